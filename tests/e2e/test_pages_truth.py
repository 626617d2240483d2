"""Pages that explain themselves (issue 27 items 5-9): uploads, the upload form, findings by
cause, rows that make sense, and what the pages guessed, each read back from a real Chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.e2e.conftest import FIXTURES, wait_for_flag

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

H20_TOPO = "topo_38_h20-8gpu-36nic-MANGLED-tab-expansion-merged-cells.txt"


def test_the_new_server_checkbox_sits_on_its_label_line(page: Page) -> None:
    page.goto("/upload/")
    box = page.locator("#upload-create").bounding_box()
    label = page.locator("label:has(#upload-create)").bounding_box()
    assert box is not None and label is not None
    assert abs(box["x"] - label["x"]) < 8  # at the label's start, not centred above it
    assert label["height"] < 2 * box["height"] + 8  # one line, the box beside its text


def test_a_preview_of_a_36_nic_capture_draws_its_nic_groups_at_their_places(page: Page) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "preview-h20")
    page.fill("#upload-text", (FIXTURES / H20_TOPO).read_text(encoding="utf-8"))
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    shown = page.evaluate(
        """() => { const cy = window.topowebPreviewCy;
        return {groups: cy.nodes('[kind = "nic_group"]:visible').length,
                nics: cy.nodes('[kind = "nic"]:visible').length}; }"""
    )
    assert shown == {"groups": 4, "nics": 0}


GTX_RIG = "gtx-rig-a01"  # the demo fleet's name for the 7-GPU x1-riser rig


def gtx_rig_judged() -> None:
    """The GTX rig with its p2pBandwidthLatencyTest, analysed and judged as the worker would."""
    from django.utils import timezone

    from tests.e2e.conftest import analyse_pending
    from topoweb.fleet.models import Server, Source
    from topoweb.fleet.services import BenchmarkInput, ingest_report
    from topoweb.health.services import evaluate_server

    ingest_report(
        hostname=GTX_RIG,
        topo_text=(FIXTURES / "topo_04_gtx1070x6-1080-7gpu-pix-phb.txt").read_text(),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        gpu_model_hint="NVIDIA GeForce GTX 1070",
        benchmarks=[
            BenchmarkInput(
                "p2p-bandwidth-latency",
                (FIXTURES / "p2p_01_gtx1070x6-1080-7gpu-pcie-x1.txt").read_text(),
            )
        ],
    )
    analyse_pending()
    evaluate_server(Server.objects.get(hostname=GTX_RIG).pk)


def test_the_gtx_rig_shows_one_finding_per_cause_that_opens_to_its_pairs_on_the_graph(
    page: Page,
) -> None:
    gtx_rig_judged()
    page.goto(f"/servers/{GTX_RIG}/")
    wait_for_flag(page, "graph-ready")
    answer = page.request.get(f"/api/v1/servers/{GTX_RIG}/page/").json()
    assert len(answer["findings"]) >= 21 and len(answer["groups"]) <= 4
    items = page.locator("#findings > li.finding")
    assert items.count() == len(answer["groups"])
    causes = [items.nth(i).get_attribute("data-cause") for i in range(items.count())]
    assert len(set(causes)) == len(causes)
    # P2P unavailable is one line: the finding that says so and the 13 pairs it made slow.
    staged = page.locator("#findings > li.finding", has_text="P2P unavailable")
    assert staged.count() == 1
    group = next(g for g in answer["groups"] if g["cause"] == "p2p_unavailable")
    assert "host-staged" in group["title"] and len(group["pairs"]) == 13
    staged.locator("summary").click()
    assert staged.locator(".finding-pairs li").count() == group["count"] == 14
    staged.locator("button.finding-title").click()
    shown = page.evaluate(
        """() => { const cy = window.topowebCy;
        return {marked: cy.nodes('.finding-device').map((n) => n.id()).sort(),
                faded: cy.nodes('[kind = "gpu"].faded').length}; }"""
    )
    assert shown["marked"] == sorted({d for pair in group["pairs"] for d in pair})
    assert shown["faded"] == 0  # every GPU of the rig is in one of its 13 pairs
    api = page.request.get(f"/api/v1/servers/{GTX_RIG}/").json()
    assert [g["cause"] for g in api["groups"]] == [g["cause"] for g in answer["groups"]]


def test_the_gtx_rig_names_both_its_gpu_models_in_the_fleet_list_and_its_header(
    page: Page,
) -> None:
    gtx_rig_judged()  # its p2p run names six GTX 1070s and one GTX 1080
    page.goto("/")
    wait_for_flag(page, "fleet-ready")
    cell = page.locator(f"#fleet-table tr[data-hostname='{GTX_RIG}'] td.gpu-model")
    assert cell.inner_text() == "7 (6x GTX 1070 + 1x GTX 1080)"
    assert (cell.get_attribute("title") or "").startswith(
        "6x GeForce GTX 1070 + 1x GeForce GTX 1080 (named by its benchmark output"
    )
    page.goto(f"/servers/{GTX_RIG}/")
    wait_for_flag(page, "graph-ready")
    header = page.locator("#server-summary").inner_text()
    assert "6x GeForce GTX 1070 + 1x GeForce GTX 1080" in header and "7x" not in header


def test_the_acceptance_report_lists_one_row_per_cause_with_ratios_on_one_line(
    page: Page,
) -> None:
    gtx_rig_judged()
    page.goto(f"/servers/{GTX_RIG}/acceptance/")
    rows = page.locator("table.finding-groups tbody > tr.finding-group")
    report = page.request.get(f"/api/v1/servers/{GTX_RIG}/acceptance/").json()
    assert rows.count() == len(report["groups"]) <= 4 < len(report["findings"])
    ratio = page.locator("td.num", has_text="%").first
    box = ratio.bounding_box()
    assert box is not None and box["height"] < 40  # "13 %" on one line, not two
    assert ratio.evaluate("(td) => getComputedStyle(td).whiteSpace") == "nowrap"


def test_a_one_gpu_reduce_is_shown_with_why_it_is_no_bandwidth_not_as_5_million_gb_s(
    page: Page,
) -> None:
    from django.utils import timezone

    from topoweb.fleet.models import Server, Source
    from topoweb.fleet.services import BenchmarkInput, ingest_report
    from topoweb.health.services import evaluate_server

    ingest_report(
        hostname="autodl-2080ti-a01",
        topo_text=(
            FIXTURES / "topo_32_rtx2080ti-2gpu-pix-plus-topo-p2p-status-matrix.txt"
        ).read_text(),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
        benchmarks=[
            BenchmarkInput(
                "nccl-tests",
                (
                    FIXTURES / "nccl_12_rtx2080ti-1gpu-reduce-perf-MISALIGNED-inplace-columns.txt"
                ).read_text(),
            )
        ],
    )
    evaluate_server(Server.objects.get(hostname="autodl-2080ti-a01").pk)
    page.goto("/servers/autodl-2080ti-a01/acceptance/")
    row = page.locator("tr", has_text="busbw over 1 GPU")
    assert row.count() == 1
    assert "5706839" not in row.inner_text() and "n/a" in row.inner_text()
    assert "moves no data between GPUs" in row.inner_text()
    assert "not applicable" in row.inner_text()


def test_an_empty_file_says_it_is_empty_as_the_api_does(page: Page) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "anything-u01")
    page.set_input_files(
        "#upload-file", files=[{"name": "empty.txt", "mimeType": "text/plain", "buffer": b""}]
    )
    page.click("#preview-button")
    error = page.locator("#upload-error")
    error.wait_for(state="visible")
    assert "The submitted file is empty." in error.inner_text()
    assert "not valid" not in error.inner_text()


def test_a_binary_file_is_refused_without_garbled_context(page: Page) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "anything-u01")
    page.set_input_files(
        "#upload-file",
        files=[
            {
                "name": "a.out",
                "mimeType": "application/octet-stream",
                "buffer": bytes(range(256)) * 4,
            }
        ],
    )
    page.click("#preview-button")
    error = page.locator("#upload-error")
    error.wait_for(state="visible")
    assert "not UTF-8 text" in error.inner_text()
    assert page.locator("#upload-error-context").is_hidden()


def test_a_mistyped_hostname_is_caught_at_preview_with_the_name_meant(page: Page) -> None:
    from tests.e2e.conftest import ingest

    ingest("hgx-h200-a01", "topo_01_h200-8gpu-12nic-numaid.txt")
    text = (FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt").read_text(encoding="utf-8")
    page.goto("/upload/")
    page.fill("#upload-hostname", "hgx-h200-a0l")
    page.fill("#upload-text", text)
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    hint = page.locator("#preview-host")
    assert hint.is_visible()
    assert "No server named hgx-h200-a0l" in hint.inner_text()
    page.click("#use-suggestion")
    assert page.input_value("#upload-hostname") == "hgx-h200-a01"
    page.click("#save-button")
    page.wait_for_url("**/servers/hgx-h200-a01/")


L40S_TOPO = "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"  # names no GPU model


def test_a_capture_without_a_gpu_model_shows_the_model_the_advice_assumed_marked_assumed(
    page: Page,
) -> None:
    from tests.e2e.conftest import analyse_pending, ingest
    from topoweb.fleet.models import Server
    from topoweb.health.services import evaluate_server

    ingest("l40s-4g-a01", L40S_TOPO)
    analyse_pending()
    evaluate_server(Server.objects.get(hostname="l40s-4g-a01").pk)
    page.goto("/servers/l40s-4g-a01/")
    wait_for_flag(page, "graph-ready")
    summary = page.locator("#server-summary")
    assert "model not reported" not in summary.inner_text()
    mark = page.locator("#gpu-model-assumed")
    assert mark.is_visible() and mark.inner_text() == "assumed"
    assert "4x L40S" in summary.inner_text()
    assert "the capture names no GPU" in (mark.get_attribute("title") or "")
    # The socket link is the generation's usual platform: drawn, and said to be assumed.
    caption = page.evaluate(
        "() => window.topowebCy.edges('[link_class = \"SYS\"]').map((e) => e.style('label'))"
    )
    assert caption and all("(assumed)" in c for c in caption), caption


def test_the_preview_marks_the_socket_link_it_infers(page: Page) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "l40s-new-u01")
    page.check("#upload-create")
    page.fill("#upload-text", (FIXTURES / L40S_TOPO).read_text(encoding="utf-8"))
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    shown = page.evaluate(
        """() => window.topowebPreviewCy.edges('[link_class = "SYS"]')
            .map((e) => [e.style('label'), e.data('assumed')])"""
    )
    assert shown and all("(assumed)" in label and why for label, why in shown), shown
    # Told the GPU model the save will record, the preview draws that generation's platform.
    page.fill("#upload-gpu-model", "Tesla P40")
    page.evaluate("() => { delete document.body.dataset.previewReady; }")
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    labels = page.evaluate(
        """() => window.topowebPreviewCy.edges('[link_class = "SYS"]')
            .map((e) => e.style('label'))"""
    )
    assert labels and all("Intel QPI (Broadwell) (assumed)" in label for label in labels), labels


def test_the_compare_page_draws_both_servers_at_one_legible_scale_in_scrolling_panels(
    page: Page,
) -> None:
    from tests.e2e.conftest import ingest

    ingest("hgx-h200-a01", "topo_01_h200-8gpu-12nic-numaid.txt", "NVIDIA H200")
    ingest("dgx1v-a01", "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt")
    page.goto("/compare/?a=hgx-h200-a01&b=dgx1v-a01")
    wait_for_flag(page, "compare-ready")
    zooms = page.evaluate("() => [window.topowebCompare.a.zoom(), window.topowebCompare.b.zoom()]")
    assert zooms[0] == zooms[1] and zooms[0] >= 0.9  # GPU labels at 17 px, not 58 % of that
    panel = page.evaluate(
        """() => { const p = document.getElementById('graph-a');
        return {scroll: p.scrollWidth, client: p.clientWidth}; }"""
    )
    assert panel["scroll"] > panel["client"]  # the H200 is wider than its panel: it scrolls
    page.locator("#graph-a").evaluate("(p) => { p.scrollLeft = p.scrollWidth; }")
    right = page.evaluate(
        """() => { const cy = window.topowebCompare.a;
        const r = cy.container().getBoundingClientRect();
        const p = document.getElementById('graph-a').getBoundingClientRect();
        const g = cy.getElementById('GPU6').renderedBoundingBox();
        return [r.left + g.x2, p.right]; }"""
    )
    assert right[0] <= right[1]  # scrolled to its right edge, the last GPU is in view


@pytest.mark.parametrize(
    ("host", "topo", "model", "query"),
    [
        ("hgx-h200-a01", "topo_01_h200-8gpu-12nic-numaid.txt", "NVIDIA H200", ""),
        # The cube mesh's GPUs carry a second line when one is selected: "GPU1\nNV2".
        ("dgx1v-a01", "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt", "", "?gpu=GPU0"),
    ],
)
def test_tp_group_labels_stay_inside_their_gpus_boxes(
    page: Page, host: str, topo: str, model: str, query: str
) -> None:
    from tests.e2e.conftest import analyse_pending, ingest
    from topoweb.fleet.models import Server
    from topoweb.health.services import evaluate_server

    ingest(host, topo, model)
    analyse_pending()
    evaluate_server(Server.objects.get(hostname=host).pk)
    page.goto(f"/servers/{host}/{query}")
    wait_for_flag(page, "graph-ready")
    page.locator("#best-layouts button[data-layout^='2x']").first.click()
    boxes = page.evaluate(
        """() => window.topowebCy.nodes('[group_colour]').map((n) => {
          const o = {includeOverlays: false, includeUnderlays: false};
          const a = n.boundingBox({...o, includeLabels: false});
          const b = n.boundingBox({...o, includeNodes: false, includeLabels: true});
          return {id: n.id(), label: n.data('group_label'), node: [a.x1, a.y1, a.x2, a.y2],
                  text: [b.x1, b.y1, b.x2, b.y2]}; })"""
    )
    assert len(boxes) == 8 and all("TP" in b["label"] for b in boxes)
    for b in boxes:
        (x1, y1, x2, y2), (u1, v1, u2, v2) = b["node"], b["text"]
        assert x1 - 1 <= u1 and u2 <= x2 + 1 and y1 - 1 <= v1 and v2 <= y2 + 1, b


def test_the_fleet_list_names_each_gpu_part_once_and_keeps_the_raw_name_as_its_title(
    page: Page,
) -> None:
    from tests.e2e.conftest import ingest

    h200 = "topo_01_h200-8gpu-12nic-numaid.txt"  # names no GPU model: the hint is used
    ingest("a100-one-u01", h200, "A100-SXM-80GB")
    ingest("a100-two-u01", h200, "NVIDIA A100-SXM4-40GB")
    page.goto("/")
    wait_for_flag(page, "fleet-ready")
    cells = page.locator("#fleet-table tbody td.gpu-model")
    assert cells.count() == 2
    assert [cells.nth(i).inner_text() for i in range(2)] == ["8 A100", "8 A100"]
    titles = {cells.nth(i).get_attribute("title") for i in range(2)}
    assert titles == {"A100-SXM-80GB", "NVIDIA A100-SXM4-40GB"}
    # The server's own page (its detail) says what was reported, as it was written.
    page.goto("/servers/a100-one-u01/")
    wait_for_flag(page, "graph-ready")
    assert "8x A100-SXM-80GB" in page.locator("#server-summary").inner_text()


def test_the_fleet_list_and_the_server_page_count_the_same_findings_on_the_badge(
    page: Page,
) -> None:
    """One number per server: the badge counts the findings that make it critical or warning,
    on the fleet list and on the server's own page alike (info findings explain, not alarm)."""
    gtx_rig_judged()
    api = page.request.get(f"/api/v1/servers/{GTX_RIG}/").json()
    alarming = sum(f["severity"] in ("critical", "warning") for f in api["findings"])
    assert api["findings_count"] == alarming > 0
    page.goto("/")
    wait_for_flag(page, "fleet-ready")
    row = page.locator("#fleet-table tbody tr", has_text=GTX_RIG)
    listed = row.locator(".badge").first.inner_text()
    page.goto(f"/servers/{GTX_RIG}/")
    wait_for_flag(page, "graph-ready")
    shown = page.locator("#server-badges .badge").first.inner_text()
    assert listed.split("·")[-1].strip() == shown.split("·")[-1].strip() == str(alarming)


def test_a_server_names_its_hosts_cpu_and_draws_the_socket_link_it_has(page: Page) -> None:
    """An L40S box whose collector read Sapphire Rapids: the header names the CPU, and the
    graph's socket link is Intel's UPI, not Ada's usual AMD platform marked assumed."""
    from django.utils import timezone

    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report
    from topoweb.health.services import evaluate_server

    topo = FIXTURES / "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"
    ingested = ingest_report(
        hostname="l40s-01",
        topo_text=topo.read_text(),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        host={"cpu_model": "Intel(R) Xeon(R) Gold 6442Y"},
        gpu_model_hint="NVIDIA L40S",
    )
    evaluate_server(ingested.server.pk)
    page.goto("/servers/l40s-01/")
    wait_for_flag(page, "graph-ready")
    assert page.locator("#cpu-model").inner_text() == "Intel(R) Xeon(R) Gold 6442Y"
    shown = page.evaluate("() => window.topowebCy.elements().map((e) => e.data('label') || '')")
    assert "Intel UPI (Sapphire Rapids)" in shown
    assert not [label for label in shown if "(assumed)" in label]


def test_pages_and_reports_carry_their_icon_and_ask_for_no_favicon(page: Page) -> None:
    """A page without an icon has the browser ask for /favicon.ico (a 404 in its console):
    the printable reports carry the pages' empty one."""
    gtx_rig_judged()
    asked: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    for path in ("/", f"/servers/{GTX_RIG}/acceptance/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.locator("link[rel=icon]").count() == 1
    assert not [url for url in asked if url.endswith("/favicon.ico")]
    assert errors == []
