"""Bounded work per request (issue 15): the graph a page draws is drawn once per snapshot by
the health worker and served from the cache, never drawn again by the requests that read it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.web.conftest import report
from topoweb.fleet import selectors
from topoweb.fleet.models import Server
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"


def never_drawn(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a request drew the graph again")


def test_the_graph_drawn_by_the_health_worker_is_what_every_page_serves(
    collector_client: Any, reader: APIClient, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.clear()
    post = collector_client("h200-01").post(
        "/api/v1/reports", report("h200-01", H200), format="json"
    )
    assert post.status_code == 201
    server = Server.objects.get(hostname="h200-01")
    drawn = selectors.graph_elements(server.latest_snapshot)
    evaluate_server(server.pk)
    monkeypatch.setattr(selectors, "graph_document", never_drawn)

    graph = reader.get("/api/v1/servers/h200-01/graph/")
    page = reader.get("/api/v1/servers/h200-01/page/")

    assert graph.status_code == 200 and graph.json() == drawn
    assert page.status_code == 200 and page.json()["graph"] == drawn


def test_a_graph_not_drawn_yet_is_drawn_for_the_request_that_asks(
    collector_client: Any, reader: APIClient
) -> None:
    cache.clear()
    post = collector_client("h200-02").post(
        "/api/v1/reports", report("h200-02", H200), format="json"
    )
    assert post.status_code == 201

    graph = reader.get("/api/v1/servers/h200-02/graph/")

    assert graph.status_code == 200
    assert sum(e["data"].get("kind") == "gpu" for e in graph.json()["elements"]) == 8
