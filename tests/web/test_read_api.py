"""The read API through HTTP: filters, shapes, query counts, access rules and the error shape."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.web.conftest import H200, RTX6000, RTX6000_P2P, V100, V100_OTHER_MESH, add, fixture_text
from topoweb.fleet.models import Server
from topoweb.fleet.services import BenchmarkInput

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet() -> None:
    add("h200-01", H200, "HGX H200", "NVIDIA H200")
    add("h200-02", H200, "HGX H200", "NVIDIA H200")
    add("v100-01", V100, "DGX-1V", "Tesla V100-SXM2-32GB")
    add("v100-02", V100, "DGX-1V", "Tesla V100-SXM2-32GB")
    add("v100-03", V100_OTHER_MESH, "DGX-1V", "Tesla V100-SXM2-32GB")
    add(
        "rtx-01",
        RTX6000,
        "ESC8000A",
        benchmarks=[BenchmarkInput("p2p-bandwidth-latency", fixture_text(RTX6000_P2P))],
    )


def hostnames(response: Any) -> list[str]:
    return [s["hostname"] for s in response.json()["results"]]


def test_the_server_list_pages_and_carries_each_servers_summary(
    reader: APIClient, fleet: None
) -> None:
    response = reader.get("/api/v1/servers/", {"page_size": 2})

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 6
    assert body["next"].endswith("page=2&page_size=2")
    assert body["results"][0] == {
        "hostname": "h200-01",
        "sku": "HGX H200",
        "labels": {},
        "gpu_model": "NVIDIA H200",
        "gpu_family": "H200",
        "gpu_models": [],  # one model: nothing to list
        "gpu_models_source": "",
        "gpu_count": 8,
        "cpu_model": "",
        "nic_count": 12,
        "has_nvlink": True,
        "nvlink_summary": "NV18 x28",
        "health": "ok",
        "findings_count": 0,
        "fingerprint": body["results"][1]["fingerprint"],
        "latest_snapshot_id": body["results"][0]["latest_snapshot_id"],
        "last_seen_at": body["results"][0]["last_seen_at"],
    }


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"search": "v100"}, ["v100-01", "v100-02", "v100-03"]),
        ({"search": "H200"}, ["h200-01", "h200-02"]),
        ({"sku": "dgx-1v"}, ["v100-01", "v100-02", "v100-03"]),
        ({"gpu_model": "RTX 6000"}, ["rtx-01"]),
        ({"gpu_count": 4}, ["rtx-01"]),
        ({"has_nvlink": "false"}, ["rtx-01"]),
        ({"health": "warning"}, ["v100-03"]),
        (
            {"health": "ok", "has_nvlink": "true", "gpu_count": 8},
            ["h200-01", "h200-02", "v100-01", "v100-02"],
        ),
    ],
)
def test_the_server_list_filters(
    reader: APIClient, fleet: None, params: dict[str, Any], expected: list[str]
) -> None:
    response = reader.get("/api/v1/servers/", params)

    assert response.status_code == 200
    assert hostnames(response) == expected


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        ("-hostname", ["v100-03", "v100-02", "v100-01", "rtx-01", "h200-02", "h200-01"]),
        ("gpu_count", ["rtx-01", "h200-01", "h200-02", "v100-01", "v100-02", "v100-03"]),
        ("-gpu_count", ["h200-01", "h200-02", "v100-01", "v100-02", "v100-03", "rtx-01"]),
        ("sku", ["v100-01", "v100-02", "v100-03", "rtx-01", "h200-01", "h200-02"]),
        ("-sku", ["h200-01", "h200-02", "rtx-01", "v100-01", "v100-02", "v100-03"]),
        # The fixture reports them in this order.
        ("last_seen_at", ["h200-01", "h200-02", "v100-01", "v100-02", "v100-03", "rtx-01"]),
        ("-last_seen_at", ["rtx-01", "v100-03", "v100-02", "v100-01", "h200-02", "h200-01"]),
    ],
)
def test_the_server_list_sorts_by_the_ordering_asked_for_with_hostname_breaking_ties(
    reader: APIClient, fleet: None, ordering: str, expected: list[str]
) -> None:
    response = reader.get("/api/v1/servers/", {"ordering": ordering})

    assert response.status_code == 200
    assert hostnames(response) == expected


def test_a_server_never_seen_sorts_last_whichever_the_direction(
    reader: APIClient, fleet: None
) -> None:
    Server.objects.create(hostname="aaa-never-seen")

    for ordering in ("gpu_count", "-gpu_count", "last_seen_at", "-last_seen_at"):
        assert hostnames(reader.get("/api/v1/servers/", {"ordering": ordering}))[-1] == (
            "aaa-never-seen"
        )


def test_an_unknown_ordering_answers_400_naming_the_parameter(reader: APIClient) -> None:
    response = reader.get("/api/v1/servers/", {"ordering": "gpu_model"})

    assert response.status_code == 400
    assert list(response.json()["error"]["details"]) == ["ordering"]


def test_a_bad_filter_answers_400_in_the_error_shape(reader: APIClient) -> None:
    response = reader.get("/api/v1/servers/", {"health": "sick", "gpu_count": "many"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert sorted(error["details"]) == ["gpu_count", "health"]


def test_list_endpoints_use_a_bounded_number_of_queries(
    reader: APIClient, fleet: None, django_assert_max_num_queries: Any
) -> None:
    for i in range(20):
        add(f"more-{i:02d}", V100, "DGX-1V")
    # token lookup + last-used update + count + page, whatever the number of servers
    for url in (
        "/api/v1/servers/",
        "/api/v1/skus/",
        "/api/v1/topology-classes/",
        "/api/v1/benchmarks/",
        "/api/v1/servers/more-03/snapshots/",
    ):
        with django_assert_max_num_queries(6):
            assert reader.get(url, {"page_size": 100}).status_code == 200


def test_the_server_detail_has_the_topology_findings_and_analysis_status(
    reader: APIClient, fleet: None
) -> None:
    response = reader.get("/api/v1/servers/v100-03/")

    assert response.status_code == 200
    body = response.json()
    assert body["hostname"] == "v100-03"
    assert body["health"] == "warning"
    assert body["findings"] == [
        {
            "kind": "topology_drift",
            "severity": "warning",
            "devices": [],
            "evidence": {"against": "SKU"},
            "advice": "Compare this server's matrix with a sibling of the same SKU.",
            "message": "wired differently from the usual topology of SKU 'DGX-1V'",
        }
    ]
    assert body["snapshot"]["raw_text"] == fixture_text(V100_OTHER_MESH)
    assert body["snapshot"]["document"]["kind"] == "topology"
    assert len([d for d in body["snapshot"]["document"]["devices"] if d["kind"] == "gpu"]) == 8
    assert body["analysis"]["status"] == "pending"  # no commit here, so nothing was enqueued
    assert (body["snapshot_count"], body["benchmark_count"]) == (1, 0)


def test_the_graph_is_the_cytoscape_drawing_of_the_latest_topology(
    reader: APIClient, fleet: None
) -> None:
    response = reader.get("/api/v1/servers/h200-01/graph/")

    assert response.status_code == 200
    elements = response.json()["elements"]
    nodes = [e["data"] for e in elements if e["group"] == "nodes"]
    edges = [e["data"] for e in elements if e["group"] == "edges"]
    assert sum(n["kind"] == "gpu" for n in nodes) == 8
    assert sum(n["kind"] == "nic" for n in nodes) == 12
    # NVSwitch: every GPU joins one fabric node with its 18 links, not 28 pair edges.
    assert [n["id"] for n in nodes if n["kind"] == "nvswitch"] == ["nvswitch0"]
    nvlink = [e for e in edges if e["link_class"] == "NV18"]
    assert sorted(e["source"] for e in nvlink) == [f"GPU{i}" for i in range(8)]
    assert {e["target"] for e in nvlink} == {"nvswitch0"}
    assert {e["nvlinks"] for e in nvlink} == {18}


def test_snapshot_history_and_snapshot_detail(reader: APIClient, fleet: None) -> None:
    add("h200-01", V100, "HGX H200")  # a changed wiring is a new snapshot
    history = reader.get("/api/v1/servers/h200-01/snapshots/").json()

    assert history["count"] == 2
    assert [s["gpu_count"] for s in history["results"]] == [8, 8]
    assert [s["nic_count"] for s in history["results"]] == [1, 12]
    detail = reader.get(f"/api/v1/snapshots/{history['results'][0]['id']}/").json()
    assert detail["hostname"] == "h200-01"
    assert detail["raw_text"] == fixture_text(V100)


def test_benchmark_list_and_detail(reader: APIClient, fleet: None) -> None:
    listed = reader.get("/api/v1/benchmarks/", {"kind": "p2p-bandwidth-latency"}).json()

    assert listed["count"] == 1
    item = listed["results"][0]
    assert (item["hostname"], item["gpu_count"]) == ("rtx-01", 4)
    detail = reader.get(f"/api/v1/benchmarks/{item['id']}/").json()
    assert detail["document"]["kind"] == "p2p-bandwidth-latency"
    assert detail["raw_text"] == fixture_text(RTX6000_P2P)
    assert reader.get("/api/v1/benchmarks/", {"hostname": "h200-01"}).json()["count"] == 0


def test_skus_and_topology_classes(reader: APIClient, fleet: None) -> None:
    skus = reader.get("/api/v1/skus/").json()["results"]

    assert {
        s["sku"]: (s["server_count"], s["topology_class_count"], s["differing_count"]) for s in skus
    } == {"DGX-1V": (3, 2, 1), "ESC8000A": (1, 1, 0), "HGX H200": (2, 1, 0)}
    sku = reader.get("/api/v1/skus/DGX-1V/").json()
    assert [s["hostname"] for s in sku["servers"]] == ["v100-01", "v100-02", "v100-03"]
    assert sorted(c["server_count"] for c in sku["topology_classes"]) == [1, 2]

    classes = reader.get("/api/v1/topology-classes/").json()
    assert classes["count"] == 4
    h200 = next(c for c in classes["results"] if c["sku"] == "HGX H200")
    detail = reader.get(f"/api/v1/topology-classes/{h200['fingerprint']}/").json()
    assert [s["hostname"] for s in detail["servers"]] == ["h200-01", "h200-02"]
    assert detail["analysis"]["status"] == "pending"


def test_anonymous_read_is_refused_unless_public_read_is_on(fleet: None, settings: Any) -> None:
    anonymous = APIClient()
    refused = anonymous.get("/api/v1/servers/")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "not_authenticated"

    settings.TOPOWEB_PUBLIC_READ = True
    assert anonymous.get("/api/v1/servers/").json()["count"] == 6
    # Public read never opens writes.
    assert anonymous.post("/api/v1/uploads", {"hostname": "x", "text": "y"}).status_code == 401


def test_a_signed_in_browser_session_reads(django_user_model: Any, fleet: None) -> None:
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("ana"))

    assert client.get("/api/v1/servers/", {"search": "rtx"}).json()["count"] == 1


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/servers/nope/",
        "/api/v1/servers/nope/graph/",
        "/api/v1/snapshots/999999/",
        "/api/v1/benchmarks/999999/",
        "/api/v1/skus/nope/",
        "/api/v1/topology-classes/nope/",
        "/api/v1/no-such-endpoint/",
    ],
)
def test_what_does_not_exist_answers_404_in_the_error_shape(reader: APIClient, url: str) -> None:
    response = reader.get(url)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert set(response.json()["error"]) == {"code", "message", "line", "details"}


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/servers/h200-01%00/",
        "/api/v1/servers/h200-01%00/graph/",
        "/api/v1/servers/h200-01%00/snapshots/",
        "/api/v1/servers/h200-01%00/acceptance",
        "/api/v1/skus/HGX%00/",
        "/api/v1/skus/HGX%00/acceptance",
        "/api/v1/topology-classes/ab%00/",
    ],
)
def test_a_null_character_in_the_path_answers_404_in_the_error_shape(
    reader: APIClient, fleet: None, url: str
) -> None:
    # PostgreSQL refuses U+0000 in a query parameter: this was a 500.
    reader.raise_request_exception = False
    response = reader.get(url)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/servers/?sku=HGX%00",
        "/api/v1/servers/?x%00=1",
        "/api/v1/compare/?a=HGX%00&b=h200-01",  # schemathesis found this one a 500
        "/api/v1/servers/h200-01/page/?view=%00",
    ],
)
def test_a_null_character_in_a_query_parameter_answers_400_naming_it(
    reader: APIClient, fleet: None, url: str
) -> None:
    reader.raise_request_exception = False
    response = reader.get(url)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    (name,) = response.json()["error"]["details"]
    assert "Null characters" in response.json()["error"]["details"][name][0]


def test_a_page_number_past_any_fleet_answers_404_not_500(reader: APIClient, fleet: None) -> None:
    # Its OFFSET overflowed PostgreSQL's bigint (schemathesis found it).
    reader.raise_request_exception = False
    response = reader.get("/api/v1/servers/", {"page": "99999999999999999999"})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_null_character_in_a_page_path_answers_404(
    django_user_model: Any, client: Any, fleet: None
) -> None:
    client.force_login(django_user_model.objects.create_user("viewer"))
    client.raise_request_exception = False

    assert client.get("/servers/h200-01%00/").status_code == 404
    assert client.get("/servers/h200-01%00/acceptance/").status_code == 404


def test_the_schema_and_docs_are_served_without_a_cdn(client: Any, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("viewer"))
    schema = client.get("/api/schema/", {"format": "json"})
    docs = client.get("/api/docs/")

    assert schema.status_code == 200
    assert "/api/v1/reports/" in schema.json()["paths"]
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html
    # Every script and style the page loads comes from this site: no absolute
    # address to another host (a CDN) in any src or href.
    addresses = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)', html)
    assert addresses, "the docs page loads no script or style at all"
    assert [a for a in addresses if re.match(r"(?:[a-z][a-z0-9+.-]*:)?//", a, re.I)] == []
    assert "unpkg.com" not in html and "jsdelivr.net" not in html and "cdnjs." not in html
    bundle = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert bundle.status_code == 200


def test_every_api_route_ends_with_a_slash_and_answers_without_it_too(
    client: Any, reader: APIClient, fleet: None
) -> None:
    paths = reader.get("/api/schema/", {"format": "json"}).json()["paths"]

    assert [p for p in paths if not p.endswith("/")] == []
    with_slash = reader.get("/api/v1/servers/v100-03/affinity/")
    without = reader.get("/api/v1/servers/v100-03/affinity")
    assert with_slash.status_code == without.status_code == 200
    assert with_slash.json() == without.json()
    assert reader.get("/api/v1/servers/v100-03/nothing-here").status_code == 404
