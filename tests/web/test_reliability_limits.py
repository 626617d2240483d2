"""Bounded work per request (issue 15, holes 1 and 2): machines as large as real ones are
answered, inputs past any real machine are refused with 413 naming the limit and store nothing,
and one server that cannot be modelled never breaks a question about the whole fleet."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests import synthetic
from tests.web.conftest import fixture_text, report
from topoweb.fleet.models import Benchmark, Server, Snapshot
from topoweb.fleet.selectors import warm_graph

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
A100_NCCL = synthetic.NCCL_SWEEP


def refused(response: Any, limit: str) -> None:
    assert response.status_code == 413, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "too_large"
    assert limit in error["message"]


def test_a_160_gpu_ring_is_stored_and_its_graph_affinity_costs_and_selection_answer(
    collector_client: Any, reader: APIClient
) -> None:
    client = collector_client("ring-160")
    body = report("ring-160", topo_text=synthetic.gpu_ring(160))
    assert client.post("/api/v1/reports", body, format="json").status_code == 201
    client = collector_client("h200-01")
    assert client.post("/api/v1/reports", report("h200-01", H200), format="json").status_code == 201

    # A request never draws a graph this large: it waits for the worker's drawing.
    assert reader.get("/api/v1/servers/ring-160/graph/").status_code == 409
    ring = Server.objects.select_related("latest_snapshot").get(hostname="ring-160")
    assert ring.latest_snapshot is not None
    warm_graph(ring.latest_snapshot)

    graph = reader.get("/api/v1/servers/ring-160/graph/")
    affinity = reader.get("/api/v1/servers/ring-160/affinity")
    cost = reader.post(
        "/api/v1/servers/ring-160/cost",
        {"collective": "all_reduce", "gpus": [0, 1, 2, 3], "bytes": 1 << 20},
        format="json",
    )
    select = reader.post("/api/v1/placement/select", {"k": 2}, format="json")

    assert graph.status_code == 200
    assert sum(e["data"].get("kind") == "gpu" for e in graph.json()["elements"]) == 160
    assert affinity.status_code == 200 and len(affinity.json()["gpus"]) == 160
    assert cost.status_code == 200 and cost.json()["busbw_gbps"] > 0
    assert select.status_code == 200
    assert select.json()["selections"][0]["hostname"] == "h200-01"
    assert select.json()["skipped"] == []
    # The ring is searched too (a bounded number of candidate groups): the only server with 16.
    sixteen = reader.post("/api/v1/placement/select", {"k": 16}, format="json")
    assert sixteen.status_code == 200, sixteen.content[:300]
    assert {s["hostname"] for s in sixteen.json()["selections"]} == {"ring-160"}


def test_a_server_past_the_selection_limit_is_named_not_searched(
    collector_client: Any, reader: APIClient, settings: Any
) -> None:
    settings.TOPOWEB_MAX_SELECT_GPUS = 64
    client = collector_client("ring-72")
    body = report("ring-72", topo_text=synthetic.gpu_ring(72))
    assert client.post("/api/v1/reports", body, format="json").status_code == 201
    client = collector_client("h200-01")
    assert client.post("/api/v1/reports", report("h200-01", H200), format="json").status_code == 201

    select = reader.post("/api/v1/placement/select", {"k": 2}, format="json")

    assert select.status_code == 200
    assert {s["hostname"] for s in select.json()["selections"]} == {"h200-01"}
    (skipped,) = select.json()["skipped"]
    assert skipped["hostname"] == "ring-72"
    assert "TOPOWEB_MAX_SELECT_GPUS" in skipped["reason"]


def test_a_matrix_of_8_gpus_and_700_nics_answers_413_naming_the_device_limit(
    collector_client: Any, person: APIClient
) -> None:
    text = synthetic.many_nics(8, 700)
    client = collector_client("nics-700")

    refused(
        client.post("/api/v1/reports", report("nics-700", topo_text=text), format="json"),
        "TOPOWEB_MAX_DEVICES",
    )
    refused(
        person.post("/api/v1/uploads", {"hostname": "nics-700", "text": text, "create": True}),
        "640",
    )
    refused(person.post("/api/v1/uploads/preview", {"text": text}), "TOPOWEB_MAX_DEVICES")
    assert not Snapshot.objects.exists()


def test_900_nics_are_past_the_byte_limit_already_and_the_answer_names_it(
    collector_client: Any,
) -> None:
    client = collector_client("nics-900")
    body = report("nics-900", topo_text=synthetic.many_nics(8, 900))

    refused(client.post("/api/v1/reports", body, format="json"), "TOPOWEB_MAX_REPORT_BYTES")


def test_more_gpus_than_any_nvlink_domain_answers_413_naming_the_gpu_limit(
    collector_client: Any, settings: Any
) -> None:
    settings.TOPOWEB_MAX_GPUS = 64  # the default (576) takes a 2 MB matrix to pass
    client = collector_client("big")
    body = report("big", topo_text=synthetic.nvswitch_domain(72))

    refused(client.post("/api/v1/reports", body, format="json"), "TOPOWEB_MAX_GPUS")
    assert not Server.objects.exists()


def test_a_30000_row_nccl_output_answers_413_naming_the_byte_limit_and_stores_nothing(
    collector_client: Any, person: APIClient
) -> None:
    huge = synthetic.long_nccl(30_000)
    client = collector_client("gpu-a01")
    body = report("gpu-a01", H200, benchmarks=[{"kind": "nccl-tests", "text": huge}])

    refused(client.post("/api/v1/reports", body, format="json"), "TOPOWEB_MAX_BENCHMARK_BYTES")
    upload = io.BytesIO(huge.encode())
    upload.name = "nccl.txt"
    refused(
        person.post("/api/v1/uploads", {"hostname": "gpu-a01", "file": upload, "create": True}),
        "TOPOWEB_MAX_BENCHMARK_BYTES",
    )
    assert not Snapshot.objects.exists()
    assert not Benchmark.objects.exists()


def test_an_nccl_output_of_too_many_rows_answers_413_naming_the_row_limit(
    collector_client: Any, person: APIClient
) -> None:
    rows = synthetic.long_nccl(1500)
    client = collector_client("gpu-a01")
    body = report("gpu-a01", H200, benchmarks=[{"kind": "nccl-tests", "text": rows}])

    refused(client.post("/api/v1/reports", body, format="json"), "TOPOWEB_MAX_BENCHMARK_ROWS")
    refused(person.post("/api/v1/uploads/preview", {"text": rows}), "1500 result rows")
    assert not Benchmark.objects.exists()


def test_a_report_carrying_too_many_benchmarks_answers_413(
    collector_client: Any, settings: Any
) -> None:
    settings.TOPOWEB_MAX_BENCHMARKS_PER_REPORT = 2
    run = {"kind": "nccl-tests", "text": fixture_text(A100_NCCL)}
    client = collector_client("gpu-a01")
    body = report("gpu-a01", H200, benchmarks=[run, run, run])

    refused(client.post("/api/v1/reports", body, format="json"), "3 benchmarks")


def test_cost_questions_past_the_query_limit_answer_413_and_selection_reports_the_server(
    collector_client: Any, reader: APIClient, settings: Any
) -> None:
    for host, topo in (("h200-01", H200), ("ring-12", None)):
        text = synthetic.gpu_ring(12) if topo is None else fixture_text(topo)
        client = collector_client(host)
        assert (
            client.post("/api/v1/reports", report(host, topo_text=text), format="json").status_code
            == 201
        )
    settings.TOPOWEB_MAX_QUERY_GPUS = 8

    cost = reader.post(
        "/api/v1/servers/ring-12/cost",
        {"collective": "all_reduce", "gpus": [0, 1], "bytes": 1 << 20},
        format="json",
    )
    select = reader.post("/api/v1/placement/select", {"k": 2}, format="json")

    refused(cost, "TOPOWEB_MAX_QUERY_GPUS")
    assert select.status_code == 200
    assert {s["hostname"] for s in select.json()["selections"]} == {"h200-01"}
    (skipped,) = select.json()["skipped"]
    assert skipped["hostname"] == "ring-12"
    assert "12 GPUs" in skipped["reason"]


def test_one_server_with_a_broken_stored_topology_does_not_break_fleet_selection(
    collector_client: Any, reader: APIClient
) -> None:
    for host in ("h200-01", "h200-02"):
        client = collector_client(host)
        assert client.post("/api/v1/reports", report(host, H200), format="json").status_code == 201
    broken = Server.objects.get(hostname="h200-02").latest_snapshot
    # Another wiring than the first server's, so the cached model is not shared.
    Snapshot.objects.filter(pk=broken.pk).update(
        document={"kind": "topology", "version": 1, "devices": "garbage"},
        content_sha256="0" * 64,
        wiring_sha256="0" * 64,
    )

    select = reader.post("/api/v1/placement/select", {"k": 8}, format="json")

    assert select.status_code == 200
    assert {s["hostname"] for s in select.json()["selections"]} == {"h200-01"}
    assert [s["hostname"] for s in select.json()["skipped"]] == ["h200-02"]
