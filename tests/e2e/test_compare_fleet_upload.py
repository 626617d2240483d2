"""The compare, fleet-sort and upload pages in a real browser, on servers ingested here from the
real fixtures (SKU names as a collector reports them) with their analyses run to the end."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from tests.e2e.conftest import FIXTURES, analyse_pending, wait_for_flag, wait_for_graph

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

H200_SKU = "HGX H200 8-GPU"  # topo_01: NV18 through NVSwitch, 12 NICs, two NUMA nodes
L40S_SKU = "L40S 4-GPU server"  # topo_36: PCIe only, 2 NICs on socket 1
DGX_A100_SKU = "DGX A100"  # topo_26: NV12 through NVSwitch, 12 mlx5 NICs, four NUMA nodes


def ingest(hostname: str, fixture: str, sku: str, model: str) -> Any:
    """A collector report, then the analysis and assessment the workers would run (no worker
    in e2e)."""
    from topoweb.analysis.services import current_analysis_for, run_analysis
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report
    from topoweb.health.services import evaluate_server

    result = ingest_report(
        hostname=hostname,
        topo_text=(FIXTURES / fixture).read_text(),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        host={"product_name": sku},
        gpu_model_hint=model,
    )
    analysis = current_analysis_for(result.server.topology_class)
    if analysis.status != "done":
        run_analysis(analysis.pk)
    evaluate_server(result.server.pk)
    return result.server


@pytest.fixture
def skus(transactional_db: None) -> None:
    ingest("hgx-h200-b01", "topo_01_h200-8gpu-12nic-numaid.txt", H200_SKU, "NVIDIA H200")
    ingest("hgx-h200-b02", "topo_01_h200-8gpu-12nic-numaid.txt", H200_SKU, "NVIDIA H200")
    ingest(
        "l40s-b01", "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt", L40S_SKU, "L40S"
    )
    ingest(
        "dgx-a100-b01",
        "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt",
        DGX_A100_SKU,
        "NVIDIA A100-SXM4-80GB",
    )


def cell(page: Page, prop: str, side: int) -> Any:
    return page.locator(f"#compare-table tr[data-property='{prop}'] td").nth(side)


def open_compare(page: Page, a: str, b: str, extra: str = "") -> None:
    page.goto(f"/compare/?a={a}&b={b}{extra}")
    wait_for_flag(page, "compare-ready", timeout=60_000)


def test_comparing_two_skus_fills_every_row_from_their_analyses(page: Page, skus: None) -> None:
    open_compare(page, H200_SKU, L40S_SKU)

    expect(page.locator("#head-a")).to_contain_text(f"{H200_SKU} (SKU, via hgx-h200-b01)")
    expect(page.locator("#head-b")).to_contain_text(f"{L40S_SKU} (SKU, via l40s-b01)")
    # One name per part, as the fleet list gives it; the name as reported in the title.
    expect(cell(page, "GPU model", 0)).to_have_text("H200")
    expect(cell(page, "GPU model", 0)).to_have_attribute("title", "NVIDIA H200")
    expect(cell(page, "GPU model", 1)).to_have_text("L40S")
    # 18 NVLink4 links of 25 GB/s each way per GPU (NCCL plans 20.6), through the NVSwitch port.
    expect(cell(page, "NVLink per GPU per direction", 0)).to_contain_text(
        "371 GB/s effective, 450 line rate (18 × NVLink4"
    )
    expect(cell(page, "NVLink per GPU per direction", 1)).to_have_text("none (PCIe only)")
    expect(cell(page, "PCIe generation", 0)).to_contain_text("Gen5 x16")
    expect(cell(page, "PCIe generation", 1)).to_contain_text("Gen4 x16")
    expect(cell(page, "NICs per GPU (nearest class)", 0)).to_contain_text(
        "1.5 (12 NICs; nearest PXB)"
    )
    expect(cell(page, "Largest NVLink domain", 0)).to_contain_text("8 GPUs")
    expect(cell(page, "Largest NVLink domain", 1)).to_have_text("none (no NVLink)")
    for size in ("1 MiB", "64 MiB", "1 GiB"):
        for side in (0, 1):
            expect(cell(page, f"AllReduce busbw @ {size}", side)).to_have_text(re.compile(r"GB/s"))
    expect(cell(page, "AllReduce busbw @ 1 GiB", 0)).to_contain_text("▲ higher")
    expect(cell(page, "Best layout", 0)).to_have_text(re.compile(r"^TP\d+ × PP\d+ × DP\d+$"))
    expect(cell(page, "Comm time per step", 1)).to_have_text(re.compile(r"(µs|ms|s)"))
    # No row is left at the placeholder: the field names match the analysis.
    expect(page.locator("#compare-table td", has_text=re.compile(r"^–$"))).to_have_count(0)
    # Differences carry a text mark, not colour alone.
    differing = page.locator("#compare-table tr.differs")
    expect(differing.first).to_contain_text("differs")
    assert differing.count() == page.locator("#compare-table .diff-mark").count() > 8

    counts = page.evaluate(
        "() => [window.topowebCompare.a.nodes('[kind = \"gpu\"]').length,"
        " window.topowebCompare.b.nodes('[kind = \"gpu\"]').length]"
    )
    assert counts == [8, 4]
    # Each graph fills its own panel (no shared scale shrinking both): the drawing spans
    # nearly all of its panel's width or height.
    fill = page.evaluate(
        """() => ['a', 'b'].map((k) => {
          const cy = window.topowebCompare[k];
          const bb = cy.elements(':visible').renderedBoundingBox();
          return Math.max(bb.w / cy.width(), bb.h / cy.height());
        })"""
    )
    assert min(fill) > 0.9, fill
    # Both modelled curves on one plot (uPlot's legend lists each series).
    legend = page.locator("#compare-plot .u-legend")
    expect(legend).to_contain_text(f"{H200_SKU} (modelled)")
    expect(legend).to_contain_text(f"{L40S_SKU} (modelled)")


def test_a_layout_and_preset_asked_for_are_placed_on_both_sides(page: Page, skus: None) -> None:
    open_compare(page, "hgx-h200-b01", "dgx-a100-b01", "&tp=8&pp=1&dp=1&model=llama-70b")

    expect(page.locator("#layout-note")).to_contain_text("TP8 × PP1 × DP1 as asked")
    expect(cell(page, "Best layout", 0)).to_have_text("TP8 × PP1 × DP1")
    expect(cell(page, "Best layout", 1)).to_have_text("TP8 × PP1 × DP1")
    # NV18 ports beat NV12 ones: the H200's tensor-parallel step is the faster.
    expect(cell(page, "Comm time per step", 0)).to_contain_text("▼ lower")


def test_the_four_numa_dgx_a100_boxes_do_not_overlap_and_labels_stay_readable(
    page: Page, skus: None
) -> None:
    open_compare(page, DGX_A100_SKU, H200_SKU)

    facts = page.evaluate(
        """() => {
          const cy = window.topowebCompare.a;
          const boxes = cy.nodes(':parent').filter((n) => n.parent().empty())
            .map((n) => n.boundingBox({includeLabels: false}));
          let overlaps = 0;
          boxes.forEach((p, i) => boxes.slice(i + 1).forEach((q) => {
            if (p.x1 < q.x2 && q.x1 < p.x2 && p.y1 < q.y2 && q.y1 < p.y2) overlaps += 1;
          }));
          const gpu = cy.nodes('[kind = "gpu"]')[0];
          return {boxes: boxes.length, overlaps,
                  renderedFont: parseFloat(gpu.style('font-size')) * cy.zoom(),
                  minZoomed: gpu.style('min-zoomed-font-size')};
        }"""
    )
    assert facts["boxes"] >= 4
    assert facts["overlaps"] == 0
    assert facts["renderedFont"] >= 8.9
    assert facts["minZoomed"] in ("0", "0px")


def test_the_fleet_page_sorts_by_gpu_count(page: Page, skus: None) -> None:
    page.goto("/?search=-b0")
    page.select_option("#fleet-filters select[name=ordering]", "gpu_count")
    expect(page).to_have_url(re.compile(r"ordering=gpu_count"))
    rows = page.locator("#fleet-table tbody tr")
    expect(rows.first).to_have_attribute("data-hostname", "l40s-b01")
    page.select_option("#fleet-filters select[name=ordering]", "-hostname")
    expect(rows.first).to_have_attribute("data-hostname", "l40s-b01")
    expect(rows.last).to_have_attribute("data-hostname", "dgx-a100-b01")


def test_uploading_a_good_file_previews_then_creates_the_server(page: Page) -> None:
    page.goto("/upload/")
    page.fill("#upload-hostname", "esc8000a-ada-u01")
    page.set_input_files(
        "#upload-file", str(FIXTURES / "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt")
    )
    with page.expect_response(re.compile(r"/api/v1/uploads/preview/$")) as answer:
        page.click("#preview-button")
    assert answer.value.status == 200
    wait_for_flag(page, "preview-ready")
    expect(page.locator("#preview-summary")).to_have_text(
        "nvidia-smi topo -m: 4 GPUs, 4 NICs, no NVLink"
    )
    # A hostname nobody has is refused until the page is told it is a new server.
    page.click("#save-button")
    expect(page.locator("#upload-error")).to_contain_text("No server named 'esc8000a-ada-u01'")
    page.check("#upload-create")
    page.click("#save-button")
    page.wait_for_url(re.compile(r"/servers/esc8000a-ada-u01/$"))
    wait_for_graph(page)
    from topoweb.fleet.models import Server

    assert Server.objects.get(hostname="esc8000a-ada-u01").latest_snapshot.gpu_count == 4


def test_a_benchmark_preview_shows_what_was_read_without_an_empty_graph(page: Page) -> None:
    page.goto("/upload/")
    expect(page.locator("#preview-graph")).to_be_hidden()  # nothing parsed yet
    page.fill("#upload-hostname", "esc8000a-ada-u02")
    page.set_input_files(
        "#upload-file", str(FIXTURES / "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt")
    )
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    expect(page.locator("#preview-graph")).to_be_visible()
    expect(page.locator("#legend")).to_be_visible()

    # Then a log holding a p2p run and an nccl-tests run, pasted instead of the file.
    p2p = (FIXTURES / "p2p_05_rtx6000ada-4gpu-p2pwrites-gpu-cpu-latency.txt").read_text()
    nccl = (FIXTURES / "nccl_11_rtx2080ti-2gpu-allreduce-g2-trailing-ws-stripped.txt").read_text()
    page.set_input_files("#upload-file", [])
    page.fill("#upload-text", p2p + "\n" + nccl)
    page.click("#preview-button")
    # Set in the same task as the panels below, once the answer is read.
    expect(page.locator("#preview-summary")).to_contain_text("p2pBandwidthLatencyTest")
    expect(page.locator("#preview-graph")).to_be_hidden()
    expect(page.locator("#legend")).to_be_hidden()
    expect(page.locator("#preview-warning-list")).to_contain_text(
        "starts nccl-tests output, which was not read: upload it on its own"
    )


def test_uploading_a_broken_file_shows_the_error_with_its_line(page: Page) -> None:
    lines = (FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt").read_text().splitlines()
    broken = "\n".join(lines[:5])  # the matrix stops after GPU2's row
    page.goto("/upload/")
    page.fill("#upload-hostname", "broken-u01")
    page.fill("#upload-text", broken)
    page.click("#preview-button")

    error = page.locator("#upload-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("line 6: the matrix is truncated")
    expect(page.locator("#save-button")).to_be_disabled()
    from topoweb.fleet.models import Server

    assert not Server.objects.filter(hostname="broken-u01").exists()


GTX_SKU = "GTX 1070/1080 7-GPU rig"  # the demo's own SKU name, with a '/'


def test_a_sku_named_with_a_slash_compares_and_has_its_acceptance_page(page: Page) -> None:
    ingest("gtx-rig-b01", "topo_04_gtx1070x6-1080-7gpu-pix-phb.txt", GTX_SKU, "")
    ingest("l40s-b01", "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt", L40S_SKU, "")
    open_compare(page, "GTX%201070%2F1080%207-GPU%20rig", "l40s-b01")
    counts = page.evaluate(
        "[window.topowebCompare.a.nodes('[kind = \"gpu\"]').length,"
        " window.topowebCompare.b.nodes('[kind = \"gpu\"]').length]"
    )
    assert counts == [7, 4]
    page.goto("/skus/GTX%201070%2F1080%207-GPU%20rig/acceptance/")
    expect(page.locator("h1")).to_have_text(f"Acceptance of SKU {GTX_SKU}")
    page.click("text=gtx-rig-b01")
    expect(page.locator("h1")).to_have_text("Acceptance report: gtx-rig-b01")


def test_a_glued_affinity_capture_shows_its_repair_and_pins_to_numa_node_0(page: Page) -> None:
    from tests.core.topo_fixtures import glued_h200

    page.goto("/upload/")
    page.fill("#upload-hostname", "glued-h200-u01")
    page.check("#upload-create")
    page.fill("#upload-text", glued_h200())
    page.click("#preview-button")
    wait_for_flag(page, "preview-ready")
    warnings = page.locator("#preview-warning-list li")
    expect(warnings).to_have_count(8)
    expect(warnings.first).to_contain_text("read as CPUs 0-45,92-137 on NUMA node 0")
    page.click("#save-button")
    page.wait_for_url(re.compile(r"/servers/glued-h200-u01/$"))
    # Its task held (conftest.held_tasks): the page says the assessment is pending and
    # claims no findings.
    expect(page.locator("#assessment-pending")).to_be_visible()
    expect(page.locator("#findings")).to_contain_text("Checks pending")
    analyse_pending()  # what the workers do; the page asks again and reloads
    expect(page.locator("#assessment-pending")).to_be_hidden(timeout=15_000)
    expect(page.locator("#reader-warnings li")).to_have_count(8)
    expect(page.locator("#reader-warnings-panel")).to_be_visible()
    hints = page.locator("#affinity .hints li")
    expect(hints.first).to_contain_text("GPU0: numactl --cpunodebind=0 --membind=0")
    expect(page.locator("#affinity")).not_to_contain_text("1370")


def test_a_host_with_only_a_benchmark_shows_no_graph_and_no_false_all_clear(page: Page) -> None:
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_benchmark

    ingest_benchmark(
        hostname="bench-only-b01",
        kind="p2p-bandwidth-latency",
        text=(FIXTURES / "p2p_01_gtx1070x6-1080-7gpu-pcie-x1.txt").read_text(),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    page.goto("/servers/bench-only-b01/")
    expect(page.locator("#no-topology")).to_be_visible()
    expect(page.locator("#graph")).to_be_hidden()
    expect(page.locator("#findings")).not_to_contain_text("No findings")
    expect(page.locator("#best-layouts")).not_to_contain_text("once the analysis is done")
    with page.expect_response(re.compile(r"/servers/bench-only-b01/acceptance/$")) as answer:
        page.click("text=acceptance report")
    assert answer.value.status == 200
