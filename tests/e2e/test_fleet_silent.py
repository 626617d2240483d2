"""The fleet page shows the servers whose collector went silent, and lists them on a click."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from tests.e2e.conftest import FIXTURES

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def reported(hostname: str) -> None:
    """A collector's report, then the evaluation the worker would run (no worker in e2e)."""
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report
    from topoweb.health.services import evaluate_server

    result = ingest_report(
        hostname=hostname,
        topo_text=(FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt").read_text(),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    evaluate_server(result.server.pk)


def test_the_fleet_page_shows_silent_collectors_and_lists_them(page: Page) -> None:
    from topoweb.fleet.models import Server
    from topoweb.health.services import sweep_silent_collectors

    reported("gpu-talks-01")
    reported("gpu-quiet-01")
    Server.objects.filter(hostname="gpu-quiet-01").update(
        last_seen_at=timezone.now() - timedelta(days=1)  # past 3 reports of the default hour
    )
    assert sweep_silent_collectors() == (["gpu-quiet-01"], [])

    page.goto("/")
    chip = page.locator("#health-counts .collector-silent")
    expect(chip).to_contain_text("collector silent")
    expect(chip.locator("strong")).to_have_text("1")
    chip.click()

    expect(page).to_have_url(re.compile(r"finding=collector_silent"))
    rows = page.locator("#fleet-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-hostname", "gpu-quiet-01")
    chip.click()  # again: the whole fleet
    expect(rows).to_have_count(2)
    assert not page.errors  # type: ignore[attr-defined]
