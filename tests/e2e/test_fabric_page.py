"""The fabric page in Chromium on NVIDIA/topograph's real capture (ibnet_01): spines above the
leaves, leaves in rail rows, hosts under their unit, the uplink shortfalls drawn dashed, the
findings beside; a host's rails on click, then its server page, which lists its leaves; the
upload form making a new fabric."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from tests.e2e.conftest import ARTIFACTS, FIXTURES, wait_for_flag

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IBNET_01 = FIXTURES / "ibnet_01_dgx-h100-ndr-fabric-40-switches-582-hcas.txt"
HOST = "a08-p1-dgx-04-c01"


@pytest.fixture
def ndr_fabric(transactional_db: None) -> None:
    """ibnet_01 stored and analysed (no worker in e2e), and one of its hosts as a server."""
    from topoweb.fleet import fabric_services
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

    ingest_report(
        hostname=HOST,
        topo_text=(FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt").read_text(),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    result = fabric_services.ingest_fabric(
        name="dgx-ndr", text=IBNET_01.read_text(), source=Source.UPLOAD
    )
    assert fabric_services.analyse_capture(result.capture.pk) == "done"


def test_the_fabric_page_draws_ibnet_01(page: Page, ndr_fabric: None) -> None:
    page.goto("/fabrics/dgx-ndr/")
    wait_for_flag(page, "fabric-ready")
    expect(page.locator("#fabric-summary")).to_contain_text("31 leaves, 9 spines (2 tiers)")
    spines = page.locator(".switch.spine")
    leaves = page.locator(".switch.leaf")
    assert spines.count() == 9 and leaves.count() == 31
    spine_y = max(spines.nth(i).bounding_box()["y"] for i in range(9))  # type: ignore[index]
    leaf_y = min(leaves.nth(i).bounding_box()["y"] for i in range(31))  # type: ignore[index]
    assert spine_y < leaf_y
    # Each leaf-spine pair: 263 with cables, 10 with none (dashed), 6 of those short (dashed).
    assert page.locator("line.uplink.missing").count() == 10
    assert page.locator("line.uplink.short").count() == 6
    assert page.locator("line.uplink").count() == 279
    # Rails are rows: IBLEAF-<rail>-<unit> leaves of one rail share a row.
    y = {
        n: page.locator(f'.switch[data-name="{n}"] rect').bounding_box()["y"]  # type: ignore[index]
        for n in ("A09-P1-IBLEAF-01-03", "B09-P1-IBLEAF-01-07", "A09-P1-IBLEAF-04-03")
    }
    assert y["A09-P1-IBLEAF-01-03"] == y["B09-P1-IBLEAF-01-07"] < y["A09-P1-IBLEAF-04-03"]
    assert page.locator(".host").count() == 122
    expect(page.locator("#fabric-findings li").first).to_contain_text(
        "A09-P1-IBLEAF-01-02 has no link to A10-P1-IBSPINE-01"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "fabric-page.png"))  # docs/fabric-page.png

    page.locator(f'.host[data-host="{HOST}"]').click()
    expect(page.locator("#host-title")).to_have_text(HOST)
    rows = page.locator("#host-rails tr")
    assert rows.count() == 4
    expect(rows.nth(3)).to_contain_text("A09-P1-IBLEAF-04-04")
    assert page.locator(".rail-line").count() == 4
    page.get_by_role("link", name=f"Open {HOST}'s server page").click()
    page.wait_for_url(f"**/servers/{HOST}/")
    wait_for_flag(page, "fabric-rails")
    panel = page.locator("#fabric-panel")
    expect(panel).to_contain_text("dgx-ndr")
    expect(panel).to_contain_text("A09-P1-IBLEAF-01-04")


def test_a_capture_uploaded_on_the_fabrics_page_opens_its_fabric(
    page: Page, held_tasks: list[tuple[str, tuple[object, ...]]]
) -> None:
    from topoweb.fleet import fabric_services
    from topoweb.fleet.models import FabricCapture

    page.goto("/fabrics/")
    page.fill("#fabric-name", "lab-ndr")
    page.set_input_files("#fabric-file", str(IBNET_01))
    page.click("#fabric-save")
    page.wait_for_url("**/fabrics/lab-ndr/")
    expect(page.locator("#fabric-title")).to_have_text("lab-ndr")
    # The page says what it waits for, and draws once the analysis is stored.
    expect(page.locator("#fabric-summary")).to_contain_text("analysing")
    capture = FabricCapture.objects.get()
    assert held_tasks == [(fabric_services.ANALYSE_TASK, (capture.pk,))]
    fabric_services.analyse_capture(capture.pk)
    wait_for_flag(page, "fabric-ready")
    page.goto("/fabrics/")
    expect(page.locator("#fabric-rows")).to_contain_text("lab-ndr")


def test_a_large_fabric_opens_folded_and_unfolds_a_unit(page: Page) -> None:
    from bench.fabric import generate
    from topoweb.fleet import fabric_services
    from topoweb.fleet.models import Source

    done = fabric_services.ingest_fabric(name="big", text=generate(400), source=Source.UPLOAD)
    fabric_services.analyse_capture(done.capture.pk)
    page.goto("/fabrics/big/")
    wait_for_flag(page, "fabric-ready")
    assert page.locator(".unit-chip").count() == 13 and page.locator(".host").count() == 0
    page.locator(".unit-chip").first.click()
    expect(page.locator(".host")).to_have_count(32)
    page.locator('.host[data-host="node00001"]').click()
    expect(page.locator("#host-rails tr")).to_have_count(8)
    page.click("#fabric-expand")
    expect(page.locator(".host")).to_have_count(400)
    page.goto("/fabrics/big/?host=node00399")
    wait_for_flag(page, "fabric-ready")
    expect(page.locator("#host-title")).to_have_text("node00399")


def test_an_uplink_trained_slow_is_drawn_in_its_speed_class(page: Page) -> None:
    """ibnet_01 with one of IBLEAF-04-04's two cables to IBSPINE-03 trained at 4xHDR: that
    pair is drawn in HDR's colour, every other cabled pair in NDR's."""
    from tests.web.test_fabrics import downtrained
    from topoweb.fleet import fabric_services
    from topoweb.fleet.models import Source

    text = downtrained(IBNET_01.read_text())
    done = fabric_services.ingest_fabric(name="slow", text=text, source=Source.UPLOAD)
    assert fabric_services.analyse_capture(done.capture.pk) == "done"
    page.goto("/fabrics/slow/")
    wait_for_flag(page, "fabric-ready")
    slow = page.locator("line.uplink.hdr")
    assert slow.count() == 1
    assert (slow.get_attribute("data-leaf"), slow.get_attribute("data-spine")) == (
        "A09-P1-IBLEAF-04-04",
        "A10-P1-IBSPINE-03",
    )
    assert page.locator("line.uplink.ndr").count() == 279 - 10 - 6 - 1
    colours = page.evaluate(
        "[...document.querySelectorAll('line.uplink.hdr, line.uplink.ndr')]"
        ".map(l => [l.classList.contains('hdr'), l.getAttribute('stroke')])"
    )
    assert {c for hdr, c in colours if hdr} == {"#c27c0e"}
    assert {c for hdr, c in colours if not hdr} == {"#2f6db5"}
    expect(page.locator("#fabric-findings")).to_contain_text(
        "A09-P1-IBLEAF-04-04 port 37 - A10-P1-IBSPINE-03 port 31 trained at 4xHDR"
    )


def test_a_second_capture_shows_the_history_and_what_changed(page: Page) -> None:
    """Captures of one fabric like a server's snapshots: the page lists them newest first and
    says what changed since the one before (one uplink retrained at 4xHDR, one HCA moved to
    another leaf port); a fabric of one capture shows no history."""
    from tests.web.test_fabrics import downtrained
    from topoweb.fleet import fabric_services
    from topoweb.fleet.models import Source

    text = IBNET_01.read_text()
    first = fabric_services.ingest_fabric(name="hist", text=text, source=Source.UPLOAD)
    assert fabric_services.analyse_capture(first.capture.pk) == "done"
    page.goto("/fabrics/hist/")
    wait_for_flag(page, "fabric-ready")
    page.wait_for_load_state("networkidle")
    expect(page.locator("#captures-card")).to_be_hidden()

    # a08-p1-dgx-04-c05 mlx5_5 moves from IBLEAF-04-04 port 5 to its free port 31.
    line = '[5]\t"H-e09d7303007a5290"[1](e09d7303007a5290) \t\t# "a08-p1-dgx-04-c05 mlx5_5" '
    assert downtrained(text).count(line) == 1
    later = (
        downtrained(text)
        .replace(line, line.replace("[5]", "[31]"))
        .replace(
            '[1](e09d7303007a5290) \t"S-2c5eab0300b87b40"[5]',
            '[1](e09d7303007a5290) \t"S-2c5eab0300b87b40"[31]',
        )
    )
    second = fabric_services.ingest_fabric(name="hist", text=later, source=Source.UPLOAD)
    assert second.created and fabric_services.analyse_capture(second.capture.pk) == "done"
    page.goto("/fabrics/hist/")
    wait_for_flag(page, "captures-ready")
    rows = page.locator("#captures-table tbody tr")
    expect(rows).to_have_count(2)
    assert rows.nth(0).get_attribute("data-capture") == str(second.capture.pk)
    changed = rows.nth(0).locator("td.changes")
    expect(changed).to_contain_text(
        "1 link at another rate: A09-P1-IBLEAF-04-04 port 37 - A10-P1-IBSPINE-03 port 31 "
        "4xNDR → 4xHDR"
    )
    expect(changed).to_contain_text(
        "1 HCA moved: a08-p1-dgx-04-c05 mlx5_5 A09-P1-IBLEAF-04-04 port 5 → "
        "A09-P1-IBLEAF-04-04 port 31"
    )
    expect(rows.nth(1).locator("td.changes")).to_have_text("first")
