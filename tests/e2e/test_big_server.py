"""A server past TOPOWEB_MAX_QUERY_GPUS in a real browser: its page draws the graph and says
its launch affinity from the stored assessment (the limit is set low, so 12 GPUs stand for 576)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests import synthetic
from tests.e2e.conftest import analyse_pending, wait_for_graph

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HOST = "e2e-nvl12-01"


def test_the_page_of_a_server_past_the_query_limit_draws_and_names_what_it_leaves_out(
    page: Page, settings: Any
) -> None:
    from django.utils import timezone

    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

    ingest_report(
        hostname=HOST,
        topo_text=synthetic.nvswitch_domain(12),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    settings.TOPOWEB_MAX_QUERY_GPUS = 8
    analyse_pending()

    page.goto(f"/servers/{HOST}/")
    wait_for_graph(page)

    assert page.evaluate("() => window.topowebCy.nodes('[kind = \"gpu\"]').length") == 12
    expect(page.locator("#server-error")).to_be_empty()
    # Its class analysis is done: the affinity comes from it, no cost model built by the page.
    expect(page.locator("#affinity-left-out")).to_be_hidden()
