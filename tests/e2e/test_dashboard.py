"""The dashboard in a real browser, on servers imported from the real fixtures."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import (
    A100,
    DGX1,
    DGX1_TOPO,
    FIXTURES,
    H200,
    XSS_HOST,
    analyse_pending,
    click_node,
    ingest,
    wait_for_flag,
    wait_for_graph,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NV_GREEN = "rgb(27,127,59)"
SYS_RED = "rgb(200,50,45)"
PCIE_SLATE = "rgb(74,82,99)"


@pytest.fixture
def servers(fleet: None) -> None:
    """The e2e fleet: the H200, the DGX A100 with nccl_06, the markup hostname."""


def graph_facts(page: Page, handle: str = "window.topowebCy") -> dict:  # type: ignore[type-arg]
    return page.evaluate(
        f"""() => {{
        const cy = {handle};
        const kind = (n) => n.data('kind');
        return {{
          gpus: cy.nodes().filter((n) => kind(n) === 'gpu').length,
          nics: cy.nodes().filter((n) => kind(n) === 'nic').length,
          fabric: cy.nodes().filter((n) => /nvswitch|fabric/.test(kind(n))).length,
          compound: cy.nodes(':parent').length,
          nvEdges: cy.edges('[nvlinks > 0]').map((e) =>
            [e.data('link_class'), e.style('line-color'), e.style('line-style')]),
          sysEdges: cy.edges('[link_class = "SYS"]').map((e) =>
            [e.style('line-color'), e.style('line-style')]),
          edges: cy.edges().length,
        }};
    }}"""
    )


def test_the_fleet_page_lists_servers_and_filters_them_by_search(page: Page, servers: None) -> None:
    page.goto("/")
    rows = page.locator("#fleet-table tbody tr")
    expect(rows.filter(has_text=H200)).to_have_count(1)
    expect(rows.filter(has_text=A100)).to_have_count(1)
    expect(rows).to_have_count(3)
    expect(page.locator("#health-counts .chip")).to_have_count(4)
    page.fill("#fleet-filters input[name=search]", "e2e-h200")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("8 H200")  # the part's one name; its own spelling:
    expect(rows.first.locator("td.gpu-model")).to_have_attribute("title", "NVIDIA H200")
    expect(rows.first).to_contain_text("12 NICs")
    assert "search=e2e-h200" in page.url


def test_the_server_graph_has_every_device_and_colours_link_classes(
    page: Page, servers: None
) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    facts = graph_facts(page)
    assert (facts["gpus"], facts["nics"]) == (8, 12)
    assert [cls for cls, _, _ in facts["nvEdges"]] == ["NV18"] * 8
    assert {(colour, style) for _, colour, style in facts["nvEdges"]} == {(NV_GREEN, "solid")}
    # Edges are hops of the recovered PCIe tree (slate, solid, labelled) plus the SYS hop
    # between the two NUMA boxes (red, dotted): labels and patterns, not colour alone.
    styles = page.evaluate(
        """() => Object.fromEntries(['PCIe', 'SYS'].map((c) => {
          const e = window.topowebCy.edges(`[link_class = "${c}"]`)[0];
          return [c, [e.style('line-color'), e.style('line-style'), e.style('label')]];
        }))"""
    )
    assert styles == {
        # A hop of the PCIe tree is said by its colour and the legend: no label on each.
        "PCIe": [PCIE_SLATE, "solid", ""],
        # The socket link's platform is the GPU generation's usual one, said to be assumed.
        "SYS": [SYS_RED, "dotted", "SYS · Intel UPI (Sapphire Rapids) (assumed)"],
    }
    expect(page.locator("#legend .legend-item")).to_have_count(7)
    expect(page.locator("#server-summary")).to_contain_text("8x NVIDIA H200")
    page.click("#view-matrix")
    expect(page.locator("table.matrix tbody tr")).to_have_count(20)
    expect(page.locator("table.matrix tbody tr").first.locator("td").nth(8)).to_have_text("PXB")
    # The NICs carry the legend's names, as in the graph: mlx5_0, not NIC0.
    expect(page.locator("table.matrix thead th").nth(9)).to_have_text("mlx5_0")
    expect(page.locator("table.matrix tbody th").nth(8)).to_have_text("mlx5_0")
    page.click("#view-graph")


def test_the_server_graph_shows_numa_boxes_and_one_nvswitch_node(page: Page, servers: None) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    facts = graph_facts(page)
    # NV18 all-to-all hangs off one NVSwitch fabric node: 8 edges, not 28.
    assert facts["fabric"] == 1
    assert [cls for cls, _, _ in facts["nvEdges"]] == ["NV18"] * 8
    # Two sockets: NUMA boxes, and the SYS hop between them drawn red and dotted.
    assert facts["compound"] >= 2
    assert facts["sysEdges"] and {tuple(e) for e in facts["sysEdges"]} == {(SYS_RED, "dotted")}


def test_clicking_a_gpu_highlights_its_paths_and_shows_its_details(
    page: Page, servers: None
) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    click_node(page, "GPU0")
    highlighted = page.evaluate(
        "() => ({selected: window.topowebCy.nodes('.selected-gpu').map((n) => n.id()),"
        " pathEdges: window.topowebCy.edges('.path').length,"
        " nv: window.topowebCy.edges('.path[nvlinks > 0]').length})"
    )
    assert highlighted["selected"] == ["GPU0"]
    assert highlighted["nv"] >= 1 and highlighted["pathEdges"] > highlighted["nv"]
    details = page.locator("#details")
    expect(details).to_contain_text("0-55,112-167")
    expect(details).to_contain_text("mlx5_0 (PXB)")
    expect(details).to_contain_text("NV18: 7")
    # NUMA node and binding from the affinity API; the server-wide launch order beside it.
    expect(details).to_contain_text("NUMA node 0")
    expect(details).to_contain_text("numactl --cpunodebind=0 --membind=0; NCCL_IB_HCA=mlx5_0")
    expect(page.locator("#cuda-visible-devices")).to_have_text(
        "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"
    )


def placement_api(page: Page, hostname: str, body: dict) -> dict:  # type: ignore[type-arg]
    """The placement API's own answer, asked through the signed-in page's session."""
    return page.evaluate(
        """([host, body]) => fetch(`/api/v1/servers/${encodeURIComponent(host)}/placement/`, {
          method: "POST", credentials: "same-origin",
          headers: {"Content-Type": "application/json", "X-CSRFToken":
            document.cookie.match(/csrftoken=([^;]+)/)[1]},
          body: JSON.stringify(body)}).then((r) => r.json())""",
        [hostname, body],
    )


def coloured_groups(page: Page) -> dict[int, list[int]]:
    """GPU indices per placement group as drawn on the graph, read from the nodes' data."""
    drawn = page.evaluate(
        "() => window.topowebCy.nodes('[group_colour]')"
        ".map((n) => [n.data('group_index'), n.id(), n.data('group_colour'),"
        " n.style('label')])"
    )
    groups: dict[int, list[int]] = {}
    for group, node_id, _, label in drawn:
        groups.setdefault(group, []).append(int(node_id.removeprefix("GPU")))
        assert label == f"{node_id}\nTP {group}"  # a visible tag, not colour alone
    assert len({colour for _, _, colour, _ in drawn}) == len(groups)
    return {g: sorted(m) for g, m in sorted(groups.items())}


def test_placement_on_the_dgx1_mesh_colours_the_apis_tp_groups_and_shows_an_impossible_job(
    page: Page, servers: None
) -> None:
    ingest(DGX1, DGX1_TOPO, "Tesla V100-SXM2-32GB")
    page.goto(f"/servers/{DGX1}/")
    wait_for_graph(page)
    page.fill("#placement-form input[name=tp]", "4")
    page.fill("#placement-form input[name=pp]", "2")
    page.fill("#placement-form input[name=dp]", "1")
    page.select_option("#placement-form select[name=model]", "llama-7b")
    page.click("#placement-form button[type=submit]")
    wait_for_flag(page, "placement-ready")
    api = placement_api(page, DGX1, {"tp": 4, "pp": 2, "dp": 1, "model": "llama-7b"})
    # The mesh's fully connected NV1/NV2 quads, as the API places them (several rings share
    # their links): the page draws exactly those groups.
    assert api["groups"]["tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert list(coloured_groups(page).values()) == api["groups"]["tp"]
    groups = page.locator("#placement-result ol.groups li")
    expect(groups).to_have_count(2)
    expect(groups.nth(0)).to_have_text("TP 0: GPU0, GPU1, GPU2, GPU3")
    result = page.locator("#placement-result")
    expect(result).to_contain_text("TP4 · PP2 · DP1 for Llama-style 7B")
    expect(result.locator("table.step-breakdown tr[data-part='pipeline bubble']")).to_have_count(1)
    expect(result.locator(".memory-fit .badge")).to_have_text("fits")
    expect(result.locator("tr[data-dimension=tp] .badge")).to_have_text("nvlink")
    expect(result.locator("tr[data-dimension=pp] .badge")).to_have_text("nvlink")
    expect(result.locator("code.mapping")).to_have_text(
        "CUDA_VISIBLE_DEVICES=" + ",".join(map(str, api["mapping"]))
    )

    page.fill("#placement-form input[name=pp]", "4")
    page.click("#placement-form button[type=submit]")
    expect(page.locator("#placement-error")).to_have_text(
        "Cannot place this job: TP x PP x DP = 4 x 4 x 1 = 16 needs more than the 8 free GPUs"
    )
    assert page.evaluate("() => window.topowebCy.nodes('[group_colour]').length") == 0


def test_a_stored_layout_of_the_h200_applies_with_one_click(page: Page, servers: None) -> None:
    page.goto(f"/servers/{H200}/")
    wait_for_graph(page)
    layouts = page.locator("#best-layouts ol.best-layouts button")
    expect(layouts).to_have_count(5)
    # Fastest first by predicted step time: a 7B model on 8x H200 is data parallel.
    expect(layouts.first).to_contain_text("TP1 · PP1 · DP8")
    page.click("#best-layouts button[data-layout='2x1x4']")
    wait_for_flag(page, "placement-ready")
    assert coloured_groups(page) == {0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]}
    assert page.input_value("#placement-form input[name=tp]") == "2"
    assert page.input_value("#placement-form select[name=model]") == "llama-7b"
    expect(page.locator("#placement-result")).to_contain_text("for Llama-style 7B")


def test_the_benchmark_plot_draws_the_modelled_curve_and_the_measured_sweep(
    page: Page, servers: None
) -> None:
    page.goto(f"/servers/{A100}/")
    wait_for_flag(page, "bench-ready")
    series = page.evaluate("() => window.topowebBenchSeries")
    kinds = [(s["kind"], s["label"]) for s in series]
    assert kinds[0] == ("modelled", "modelled all_reduce, 8 GPUs")
    assert kinds[1] == ("modelled", "modelled all_reduce, calibrated on measurements")
    assert kinds[2][0] == "measured" and kinds[2][1].startswith("measured all_reduce, 8 GPUs")
    # Modelled over the standard sizes (8 B .. 8 GiB); nccl_06 swept 64 B .. 8 GiB.
    assert [s["points"] for s in series] == [31, 31, 28]
    legend = page.locator("#bench-plot .u-legend")
    expect(legend).to_contain_text("modelled all_reduce, 8 GPUs")
    expect(legend).to_contain_text("measured all_reduce")
    # uPlot draws the tick labels on its canvas; what it drew stays on the axis.
    ticks = page.evaluate("() => window.topowebBenchPlot.axes[0]._values")
    assert {"1 KiB", "1 MiB", "1 GiB"} <= set(ticks)
    expect(page.locator("#bench-table tbody tr")).to_have_count(1)


def test_the_compare_page_shows_both_servers_and_their_differences(
    page: Page, servers: None
) -> None:
    page.goto(f"/compare/?a={H200}&b={A100}")
    wait_for_flag(page, "compare-ready", timeout=30_000)
    expect(page.locator("#head-a")).to_contain_text(H200)
    expect(page.locator("#head-b")).to_contain_text(A100)
    model = page.locator("#compare-table tr[data-property='GPU model']")
    expect(model).to_have_class(re.compile("differs"))
    expect(model).to_contain_text("H200")
    expect(page.locator("#compare-table tr[data-property='GPU count']")).not_to_have_class(
        re.compile("differs")
    )
    counts = page.evaluate(
        "() => [window.topowebCompare.a.nodes('[kind = \"gpu\"]').length,"
        " window.topowebCompare.b.nodes('[kind = \"gpu\"]').length]"
    )
    assert counts == [8, 8]


def test_uploading_a_good_file_creates_the_server_and_opens_its_page(
    page: Page, servers: None
) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "e2e-uploaded-01")
    page.check("#upload-create")
    page.set_input_files(
        "#upload-file", str(FIXTURES / "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt")
    )
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    expect(page.locator("#preview-summary")).to_contain_text("4 GPUs, 4 NICs")
    page.click("#save-button")
    page.wait_for_url(re.compile(r"/servers/e2e-uploaded-01/$"))
    # The page waits for the assessment (its task held, conftest.held_tasks), and fills in
    # once it is stored.
    expect(page.locator("#assessment-pending")).to_be_visible()
    analyse_pending()
    expect(page.locator("#assessment-pending")).to_be_hidden(timeout=15_000)
    wait_for_graph(page)
    assert graph_facts(page)["gpus"] == 4
    from topoweb.fleet.models import Server

    assert Server.objects.filter(hostname="e2e-uploaded-01").exists()


def test_uploading_a_broken_file_shows_the_line_that_is_wrong(page: Page, servers: None) -> None:
    good = (FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt").read_text().splitlines()
    # Cut the GPU3 row short: the matrix is no longer square.
    broken = "\n".join(
        line if not line.startswith("GPU3\t") else "GPU3\tNV18\tNV18" for line in good
    )
    page.goto("/upload/")
    page.fill("#upload-hostname", "e2e-broken-01")
    page.fill("#upload-text", broken)
    page.click("#preview-button")
    error = page.locator("#upload-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("line 6")
    expect(page.locator("#upload-error-context .bad-line")).to_contain_text("GPU3")
    expect(page.locator("#save-button")).to_be_disabled()
    from topoweb.fleet.models import Server

    assert not Server.objects.filter(hostname="e2e-broken-01").exists()


def test_a_hostname_made_of_markup_renders_as_inert_text(page: Page, servers: None) -> None:
    page.goto("/?search=onerror")
    row = page.locator("#fleet-table tbody tr").filter(has_text=XSS_HOST)
    expect(row).to_have_count(1)
    expect(page.locator("#fleet-table img")).to_have_count(0)
    row.get_by_role("link").click()
    wait_for_graph(page)
    expect(page.locator("#server-name")).to_have_text(XSS_HOST)
    assert page.locator("main img").count() == 0
    csp = page.evaluate(
        "() => fetch(location.href).then((r) => r.headers.get('content-security-policy'))"
    )
    assert (
        "script-src 'self'" in csp
        and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    )
