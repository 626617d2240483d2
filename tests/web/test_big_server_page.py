"""The page of a server past TOPOWEB_MAX_QUERY_GPUS (a 576-GPU NVLink domain by default): it
loads from the stored assessment like every server page (no page builds a cost model); the
affinity comes with the class analysis, and the compare page's layout, a question that builds
the cost model, is left out with the API's reason, never a 413 for the whole page. The limit is
set low here so that a 12-GPU synthetic server stands for one past it."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests import synthetic
from tests.web.conftest import H200, add
from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis import services as analysis_services
from topoweb.fleet.models import Server, Source
from topoweb.fleet.services import ingest_report
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db


def no_cost_model(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the page built a cost model for a server past the query limit")


@pytest.fixture
def big(settings: Any) -> Server:
    ingest_report(
        hostname="nvl12-01",
        topo_text=synthetic.nvswitch_domain(12),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    add("h200-01", H200, "HGX H200", "NVIDIA H200")
    server = Server.objects.get(hostname="nvl12-01")
    evaluate_server(server.pk)  # the health worker's findings (and its drawn graph)
    settings.TOPOWEB_MAX_QUERY_GPUS = 8
    analysis_selectors.cached_model.cache_clear()
    return server


def test_the_page_of_a_server_past_the_query_limit_loads_from_its_assessment(
    reader: APIClient, big: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(analysis_selectors, "cached_model", no_cost_model)

    page = reader.get("/api/v1/servers/nvl12-01/page/")

    assert page.status_code == 200, page.content[:300]
    body = page.json()
    assert body["server"]["gpu_count"] == 12
    assert sum(e["data"].get("kind") == "gpu" for e in body["graph"]["elements"]) == 12
    assert body["matrix"]["classes"][0][:2] == ["X", "NV18"]
    assert dict(body["devices"]["GPU0"]["rows"])["GPU peers"] == "NV18: 11"
    assert dict(body["devices"]["GPU0"]["rows"])["Nearest NIC"] == "–"
    assert body["findings_checked"] is True
    assert body["affinity"] is None
    # Its class is not analysed here: the affinity waits for it, and says so.
    assert "class analysis" in body["left_out"]["affinity"]
    assert set(body["left_out"]) == {"affinity"}
    # The parts that need the cost model in the request still answer 413 on their own.
    affinity = reader.get("/api/v1/servers/nvl12-01/affinity/")
    assert affinity.status_code == 413


def test_a_server_assessed_after_its_class_analysis_gets_its_whole_page(
    reader: APIClient, big: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    h200 = Server.objects.get(hostname="h200-01")
    analysis = analysis_services.current_analysis_for(h200.topology_class)
    assert analysis_services.run_analysis(analysis.pk) == "done"
    evaluate_server(h200.pk)
    monkeypatch.setattr(analysis_selectors, "cached_model", no_cost_model)

    body = reader.get("/api/v1/servers/h200-01/page/").json()

    assert body["left_out"] == {}
    assert body["affinity"]["cuda_visible_devices"]


def test_the_compare_page_names_the_limit_for_the_big_side_and_answers_the_other(
    reader: APIClient, big: Server
) -> None:
    page = reader.get("/api/v1/compare/", {"a": "nvl12-01", "b": "h200-01"})

    assert page.status_code == 200, page.content[:300]
    rows = {r["label"]: r for r in page.json()["rows"]}
    assert "TOPOWEB_MAX_QUERY_GPUS" in rows["Step time"]["a"]
    assert rows["Best layout"]["b"].startswith("TP")
