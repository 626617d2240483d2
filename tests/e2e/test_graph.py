"""The topology graph in a real browser: the same picture on every load, no overlapping boxes,
paths by link class, exports, and the server page's few requests."""

from __future__ import annotations

import csv
import hashlib
import io
from itertools import combinations
from typing import Any, cast
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ARTIFACTS, click_node, ingest, wait_for_graph

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DGX1 = "graph-dgx1v"  # topo_12: V100 hybrid cube mesh, one NUMA group from the matrix
H200 = "graph-h200"  # topo_01: NVSwitch, two NUMA nodes, 12 NICs
H20 = "graph-h20-36nic"  # topo_38: 36 NICs, nine on each PCIe switch
A100 = "graph-dgx-a100"  # topo_26: four NUMA nodes with GPUs, two with storage NICs only
A100_SPLIT = "graph-a100-split"  # topo_28: the matrix splits NUMA node 0 in two
H100 = "graph-h100"  # topo_22: NVSwitch, two NUMA nodes close together, no NICs
SERVERS = {
    DGX1: "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt",
    H200: "topo_01_h200-8gpu-12nic-numaid.txt",
    H20: "topo_38_h20-8gpu-36nic-MANGLED-tab-expansion-merged-cells.txt",
    A100: "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt",
    A100_SPLIT: "topo_28_a100-8gpu-nv12-4nic-pxb-pix-numaid.txt",
    H100: "topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt",
}


@pytest.fixture
def graphs(transactional_db: None) -> None:
    for host, topo in SERVERS.items():
        ingest(host, topo)


def open_server(page: Page, host: str, query: str = "") -> None:
    page.goto(f"/servers/{quote(host)}/{query}")
    wait_for_graph(page)


def boxes(page: Page) -> dict:  # type: ignore[type-arg]
    """Rendered boxes, labels included, of every visible node that is not a compound box, and
    of the NUMA boxes, with their titles (the CPU node on top of each)."""
    return page.evaluate(
        """() => {
        const cy = window.topowebCy;
        const bb = (n, labels) => { const b = n.renderedBoundingBox({includeLabels: labels,
            includeOverlays: false, includeUnderlays: false}); return [b.x1, b.y1, b.x2, b.y2]; };
        return {
          nodes: cy.nodes(':visible').filter((n) => !n.isParent())
            .map((n) => [n.id(), bb(n, true)]),
          numa: cy.nodes('[kind = "numa"]').map((n) => [n.id(), bb(n, false)]),
          titles: cy.nodes('[kind = "cpu"]').map((n) => n.data('label')),
        };
    }"""
    )


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.parametrize("host", [DGX1, H200, H20])
def test_three_loads_of_a_server_page_draw_the_same_picture(
    page: Page, graphs: None, host: str
) -> None:
    shots = []
    for _ in range(3):
        open_server(page, host)
        shots.append(page.locator("#graph").screenshot())
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"graph-{host}.png").write_bytes(shots[0])
    digests = [hashlib.sha256(shot).hexdigest()[:16] for shot in shots]
    if len(set(digests)) > 1:
        for n, shot in enumerate(shots):  # to look at: comparing the bytes says nothing
            (ARTIFACTS / f"graph-{host}-load{n}.png").write_bytes(shot)
    # Digests, not the pictures' bytes: pytest's diff of two PNGs runs for many minutes.
    assert digests[0] == digests[1] == digests[2]


@pytest.mark.parametrize("host", list(SERVERS))
def test_no_two_node_boxes_or_numa_boxes_overlap_and_no_two_numa_boxes_share_a_title(
    page: Page, graphs: None, host: str
) -> None:
    open_server(page, host)
    found = boxes(page)
    clashes = [(a, b) for (a, ba), (b, bb) in combinations(found["nodes"], 2) if overlap(ba, bb)]
    assert clashes == []
    assert [(a, b) for (a, ba), (b, bb) in combinations(found["numa"], 2) if overlap(ba, bb)] == []
    assert len(set(found["titles"])) == len(found["titles"]) == len(found["numa"])


def test_the_socket_links_caption_is_no_wider_than_the_link_between_the_cpu_boxes(
    page: Page, graphs: None
) -> None:
    # On one line, "SYS · Intel UPI (Sapphire Rapids) (assumed)" ran under both CPU boxes,
    # its "(assumed)" hidden.
    open_server(page, H100)
    found = page.evaluate(
        """() => {
        const cy = window.topowebCy;
        const box = (e, labels) => { const b = e.renderedBoundingBox({includeLabels: labels,
            includeOverlays: false, includeUnderlays: false}); return [b.x1, b.y1, b.x2, b.y2]; };
        return cy.edges('[link_class = "SYS"][caption]').map((e) => ({
          caption: e.data('caption'), link: box(e, false), with_label: box(e, true),
        }));
    }"""
    )
    assert found and all(edge["caption"].endswith("(assumed)") for edge in found)
    for edge in found:
        link, with_label = edge["link"], edge["with_label"]
        assert with_label[0] >= link[0] - 0.5 and with_label[2] <= link[2] + 0.5, str(edge)


def test_the_36_nic_server_starts_with_nics_grouped_per_switch_and_expands_them(
    page: Page, graphs: None
) -> None:
    open_server(page, H20)
    visible = (
        "() => window.topowebCy.nodes(':visible').filter((n) => n.data('kind') === '{}').length"
    )
    assert page.evaluate(visible.format("nic")) == 0
    assert page.evaluate(visible.format("nic_group")) == 4
    font_px = page.evaluate(
        "() => window.topowebCy.zoom() * parseFloat(window.topowebCy.$('[kind = \"nic_group\"]')"
        ".style('font-size'))"
    )
    assert font_px >= 9  # readable when fitted into the panel
    page.click("#nic-toggle")
    assert page.evaluate(visible.format("nic")) == 36
    found = boxes(page)
    assert [(a, b) for (a, ba), (b, bb) in combinations(found["nodes"], 2) if overlap(ba, bb)] == []


def lit_by_clicking(page: Page, server: str, node: str) -> dict[str, Any]:
    """The path edges and the peers' labels that clicking `node` on `server`'s graph lights."""
    open_server(page, server)
    click_node(page, node)
    return cast(
        dict[str, Any],
        page.evaluate(
            """() => {
          const cy = window.topowebCy;
          return {
            edges: cy.edges('.path').map((e) => e.id()),
            peers: Object.fromEntries(cy.nodes('.peer').map((n) => [n.id(), n.data('peer_label')])),
          };
        }"""
        ),
    )


def test_clicking_gpu0_on_a_dgx1_reaches_its_node_peers_through_the_host_not_over_nvlink(
    page: Page, graphs: None
) -> None:
    lit = lit_by_clicking(page, DGX1, "GPU0")
    # GPU5 is NODE from GPU0: up to the CPU and down, never GPU0 -> GPU1 -> GPU5 over NVLink.
    assert "nv:GPU1:GPU5" not in lit["edges"]
    assert {"pcie:GPU0", "pcie:GPU5"} <= set(lit["edges"])
    assert lit["peers"]["GPU5"] == "GPU5\nNODE"
    assert lit["peers"]["GPU1"] == "GPU1\nNV2"
    assert "nv:GPU0:GPU1" in lit["edges"]


def test_clicking_gpu0_on_an_nvswitch_server_lights_every_gpu_over_the_fabric(
    page: Page, graphs: None
) -> None:
    # The server sends GPU0's NVSwitch peers as one row naming the fabric; the page expands it.
    lit = lit_by_clicking(page, H200, "GPU0")
    assert {f"nv:GPU{i}:nvswitch0" for i in range(8)} <= set(lit["edges"])
    assert {f"GPU{i}": f"GPU{i}\nNV18" for i in range(1, 8)}.items() <= lit["peers"].items()
    assert "GPU0" not in lit["peers"]
    assert any(v.endswith("\nSYS") for v in lit["peers"].values())  # and the NICs, by class


def test_the_graph_exports_as_png_and_svg_the_matrix_as_csv_and_a_link_reopens_the_view(
    page: Page, graphs: None
) -> None:
    open_server(page, H200)
    with page.expect_download() as download:
        page.click("#export-png")
    assert download.value.suggested_filename == f"{H200}-graph.png"
    assert download.value.path().read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    svg = page.request.get(page.locator("#export-svg").get_attribute("href") or "")
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text().count('class="node gpu"') == 8

    page.click("#view-matrix")
    table = page.request.get(page.locator("#export-csv").get_attribute("href") or "")
    rows = list(csv.reader(io.StringIO(table.text())))
    assert rows[0][1:3] == ["GPU0", "GPU1"]
    assert rows[1][1:3] == ["X", "NV18"]

    click_node_after_matrix = page.locator("#view-graph")
    click_node_after_matrix.click()
    click_node(page, "GPU3")
    link = page.locator("#share-link").get_attribute("href") or ""
    assert "gpu=GPU3" in link
    page.goto(link)
    wait_for_graph(page)
    expect(page.locator("#details")).to_contain_text("GPU3")
    assert page.evaluate("() => window.topowebCy.nodes('.selected-gpu').map((n) => n.id())") == [
        "GPU3"
    ]


def test_the_server_page_gets_its_data_in_at_most_three_api_requests(
    page: Page, graphs: None
) -> None:
    requests: list[str] = []
    page.on(
        "request",
        lambda r: requests.append(r.url) if "/api/" in r.url else None,
    )
    open_server(page, H200)
    page.wait_for_load_state("networkidle")
    assert len(requests) <= 3, requests
