"""Every name works in every URL: SKU names with '/', percent-encoded by the pages, reach the
API and the acceptance pages; unknown /api/ paths answer the JSON error shape, DEBUG or not;
a host known only by a benchmark has honest pages rather than 404s."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import fixture_text
from topoweb.fleet.models import Server, Source
from topoweb.fleet.services import ingest_benchmark, ingest_report
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

GTX_SKU = "GTX 1070/1080 7-GPU rig"  # the demo's own SKU name
GTX = "topo_04_gtx1070x6-1080-7gpu-pix-phb.txt"
GTX_P2P = "p2p_01_gtx1070x6-1080-7gpu-pcie-x1.txt"
SKU_PATH = quote(GTX_SKU, safe="")


@pytest.fixture
def rig() -> None:
    ingest_report(
        hostname="gtx-rig-a01",
        topo_text=fixture_text(GTX),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        host={"product_name": GTX_SKU},
    )


@pytest.fixture
def signed_in(client: Any, django_user_model: Any) -> Any:
    client.force_login(django_user_model.objects.create_user("viewer"))
    return client


def test_a_sku_named_with_a_slash_answers_on_the_api(reader: APIClient, rig: None) -> None:
    assert SKU_PATH == "GTX%201070%2F1080%207-GPU%20rig"
    response = reader.get(f"/api/v1/skus/{SKU_PATH}/")

    assert response.status_code == 200
    assert response.json()["sku"] == GTX_SKU
    assert [s["hostname"] for s in response.json()["servers"]] == ["gtx-rig-a01"]


def test_a_sku_named_with_a_slash_has_its_acceptance_api_and_page(
    reader: APIClient, signed_in: Any, rig: None
) -> None:
    api = reader.get(f"/api/v1/skus/{SKU_PATH}/acceptance")
    page = signed_in.get(f"/skus/{SKU_PATH}/acceptance/")

    assert api.status_code == 200
    assert api.json()["sku"] == GTX_SKU
    assert page.status_code == 200
    assert f"Acceptance of SKU {GTX_SKU}" in page.content.decode()


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("url", ["/api/v1/no-such-endpoint/", "/api/v1/servers/a/b/c/d/"])
def test_unknown_api_paths_answer_the_json_error_whatever_debug_says(
    reader: APIClient, settings: Any, debug: bool, url: str
) -> None:
    settings.DEBUG = debug
    response = reader.get(url)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


def test_unknown_pages_stay_html(signed_in: Any, settings: Any) -> None:
    settings.DEBUG = True
    response = signed_in.get("/no-such-page/")

    assert response.status_code == 404
    assert "json" not in response["Content-Type"]


def test_a_host_with_only_a_benchmark_has_an_acceptance_page_saying_what_is_missing(
    signed_in: Any,
) -> None:
    ingest_benchmark(
        hostname="bench-only-01",
        kind="p2p-bandwidth-latency",
        text=fixture_text(GTX_P2P),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    page = signed_in.get("/servers/bench-only-01/acceptance/")

    assert page.status_code == 200
    assert "No topology captured yet" in page.content.decode()


def test_the_acceptance_page_names_collective_size_and_pairs_with_a_human_timestamp(
    signed_in: Any,
) -> None:
    ingest_report(
        hostname="gtx-rig-a01",
        topo_text=fixture_text(GTX),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        benchmarks=[],
    )
    ingest_benchmark(
        hostname="gtx-rig-a01",
        kind="p2p-bandwidth-latency",
        text=fixture_text(GTX_P2P),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    evaluate_server(Server.objects.get(hostname="gtx-rig-a01").pk)  # what the worker does
    html = signed_in.get("/servers/gtx-rig-a01/acceptance/").content.decode()

    assert "all_reduce busbw, 7 ranks (nccl-tests, messages &ge; 256.0\xa0MB)" in html
    assert "p2p GPU0-&gt;GPU3" in html
    assert "busbw figure" not in html
    computed = html.split("computed ", 1)[1].split("\n", 1)[0]
    assert "T" not in computed.split(",")[0] and "." not in computed  # no ISO, no microseconds


def test_an_empty_findings_list_says_whether_the_checks_have_run(reader: APIClient) -> None:
    ingest_report(
        hostname="gtx-rig-a01",
        topo_text=fixture_text(GTX),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    for url in ("/api/v1/servers/gtx-rig-a01/", "/api/v1/servers/gtx-rig-a01/page/"):
        body = reader.get(url).json()
        assert (body["findings"], body["findings_checked"]) == ([], False), url

    evaluate_server(Server.objects.get(hostname="gtx-rig-a01").pk)  # as the worker would

    for url in ("/api/v1/servers/gtx-rig-a01/", "/api/v1/servers/gtx-rig-a01/page/"):
        assert reader.get(url).json()["findings_checked"] is True, url
