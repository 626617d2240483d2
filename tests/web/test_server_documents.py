"""Each server's stored read documents (its list row and detail, health.documents): what the
serializers write of the server's rows, and written again by every write that changes what
they show, so the list and detail serve them as stored."""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import H200, RTX6000, V100, V100_OTHER_MESH, add, fixture_text
from topoweb.fleet import retention
from topoweb.fleet.models import Benchmark, Server, Snapshot, Source
from topoweb.fleet.services import BenchmarkInput, ingest_benchmark, ingest_report
from topoweb.health.documents import (
    SNAPSHOT_TEXTS,
    ServerDetailSerializer,
    ServerSummarySerializer,
    write_documents,
)
from topoweb.health.models import HealthFinding, ServerDocument
from topoweb.health.selectors import server_findings
from topoweb.health.services import evaluate_server, sweep_silent_collectors

pytestmark = pytest.mark.django_db

NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"


def row(reader: APIClient, hostname: str) -> dict[str, Any]:
    page = reader.get("/api/v1/servers/", {"search": hostname}).json()["results"]
    return next(r for r in page if r["hostname"] == hostname)


def detail(reader: APIClient, hostname: str) -> dict[str, Any]:
    response = reader.get(f"/api/v1/servers/{hostname}/")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def assessed(ingested: Any) -> Any:
    """What the health worker does after an ingest that stored a new snapshot (the suite's
    transactions never commit, so it is not sent): its assessment and documents, stored."""
    evaluate_server(ingested.server.pk)
    return ingested


def as_serialized(hostname: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary and detail the serializers write of the server's rows, read now."""
    server = Server.objects.select_related("latest_snapshot__topology_class", "health").get(
        hostname=hostname
    )
    server.snapshot_count = Snapshot.objects.filter(server=server).count()  # type: ignore[attr-defined]
    server.benchmark_count = Benchmark.objects.filter(server=server).count()  # type: ignore[attr-defined]
    found = HealthFinding.objects.filter(server=server).order_by("id")
    server.findings_read = (  # type: ignore[attr-defined]
        [f.to_document() for f in found] if hasattr(server, "health") else server_findings(server)
    )
    summary = dict(ServerSummarySerializer(server).data)
    return summary, dict(ServerDetailSerializer(server).data)


def test_the_served_rows_are_what_the_serializers_write_of_the_servers_rows(
    reader: APIClient,
) -> None:
    add("h200-01", H200, "HGX H200", "NVIDIA H200")
    add("v100-01", V100, "DGX-1V")
    add("v100-02", V100, "DGX-1V")
    add("v100-03", V100_OTHER_MESH, "DGX-1V")  # wired differently from its SKU
    evaluate_server(Server.objects.get(hostname="h200-01").pk)
    for hostname in ("h200-01", "v100-01", "v100-03"):
        summary, full = as_serialized(hostname)
        served_row, served = row(reader, hostname), detail(reader, hostname)
        assert list(served_row) == list(summary)  # the keys in the serializer's order
        assert served_row == summary
        assert list(served) == list(full)
        snapshot = Snapshot.objects.get(pk=summary["latest_snapshot_id"])
        assert {k: served["snapshot"][k] for k in SNAPSHOT_TEXTS} == {
            "document": snapshot.document,
            "raw_text": snapshot.raw_text,
            "nvml": snapshot.nvml,
            "host": snapshot.host,
        }
        left = ("snapshot", "analysis")
        assert {k: v for k, v in served.items() if k not in left} == {
            k: v for k, v in full.items() if k not in left
        }
        assert {k: v for k, v in served["snapshot"].items() if k not in SNAPSHOT_TEXTS} == {
            k: v for k, v in full["snapshot"].items() if k not in SNAPSHOT_TEXTS
        }


def test_a_new_snapshot_changes_the_servers_row_and_detail(reader: APIClient) -> None:
    add("gpu-01", H200, "X")
    before = row(reader, "gpu-01")
    add("gpu-01", RTX6000, "X")  # the host was rebuilt with other GPUs
    after, served = row(reader, "gpu-01"), detail(reader, "gpu-01")

    assert (before["gpu_count"], after["gpu_count"]) == (8, 4)
    assert after["latest_snapshot_id"] != before["latest_snapshot_id"]
    assert (served["snapshot_count"], served["snapshot"]["gpu_count"]) == (2, 4)


def test_a_new_snapshot_leaves_its_servers_documents_to_the_health_worker(
    reader: APIClient,
) -> None:
    """The ingest drops the server's stored documents (the health evaluation it asks for
    writes them); meanwhile the list and detail serve them built from what is stored."""
    assessed(add("gpu-02", H200, "X"))
    add("gpu-02", RTX6000, "X")
    assert not ServerDocument.objects.filter(server__hostname="gpu-02").exists()
    built = (row(reader, "gpu-02"), detail(reader, "gpu-02"))
    assert not ServerDocument.objects.filter(server__hostname="gpu-02").exists()
    assert (built[0]["gpu_count"], built[1]["snapshot_count"]) == (4, 2)

    evaluate_server(Server.objects.get(hostname="gpu-02").pk)
    stored = ServerDocument.objects.get(server__hostname="gpu-02")
    assert orjson.loads(stored.summary)["gpu_count"] == 4
    assert row(reader, "gpu-02")["latest_snapshot_id"] == built[0]["latest_snapshot_id"]


def test_a_benchmark_changes_the_detail(reader: APIClient) -> None:
    add("a100-01", H200, "X")
    before = detail(reader, "a100-01")
    ingest_benchmark(
        hostname="a100-01",
        kind="nccl-tests",
        text=fixture_text(NCCL),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    after = detail(reader, "a100-01")
    assert (before["benchmark_count"], after["benchmark_count"]) == (0, 1)


def test_a_benchmark_for_a_new_host_gives_it_a_row(reader: APIClient) -> None:
    ingest_benchmark(
        hostname="bench-only",
        kind="nccl-tests",
        text=fixture_text(NCCL),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    assert ServerDocument.objects.filter(server__hostname="bench-only").exists()
    assert row(reader, "bench-only")["health"] == "unknown"


def test_the_health_workers_assessment_changes_the_badge_and_findings(
    reader: APIClient,
) -> None:
    add("v100-01", V100, "DGX-1V")
    add("v100-02", V100, "DGX-1V")
    add("v100-03", V100_OTHER_MESH, "DGX-1V")
    before = detail(reader, "v100-03")
    evaluate_server(Server.objects.get(hostname="v100-03").pk)
    after = detail(reader, "v100-03")
    stored = HealthFinding.objects.filter(server__hostname="v100-03").count()

    assert (before["findings_checked"], after["findings_checked"]) == (False, True)
    assert len(after["findings"]) == stored and after["findings"] != before["findings"]
    assert row(reader, "v100-03")["findings_count"] == after["findings_count"]


def test_a_silent_collector_marked_and_cleared_changes_the_row_and_detail(
    reader: APIClient, settings: Any
) -> None:
    settings.TOPOWEB_COLLECTOR_INTERVAL_S, settings.TOPOWEB_COLLECTOR_SILENT_AFTER = 60, 3
    add("gpu-quiet", H200, "X")
    evaluate_server(Server.objects.get(hostname="gpu-quiet").pk)
    counted = row(reader, "gpu-quiet")["findings_count"]
    Server.objects.filter(hostname="gpu-quiet").update(
        last_seen_at=timezone.now() - timedelta(hours=1)
    )

    assert sweep_silent_collectors() == (["gpu-quiet"], [])
    marked = detail(reader, "gpu-quiet")
    assert "collector_silent" in {f["kind"] for f in marked["findings"]}
    assert row(reader, "gpu-quiet")["findings_count"] == counted + 1

    add("gpu-quiet", H200, "X")  # a duplicate: the server is seen again
    assert sweep_silent_collectors() == ([], ["gpu-quiet"])
    assert "collector_silent" not in {f["kind"] for f in detail(reader, "gpu-quiet")["findings"]}
    assert row(reader, "gpu-quiet")["findings_count"] == counted


def test_a_siblings_report_that_moves_the_skus_usual_wiring_changes_every_flagged_row(
    reader: APIClient,
) -> None:
    add("v100-01", V100, "DGX-1V")
    add("v100-02", V100, "DGX-1V")
    add("v100-03", V100_OTHER_MESH, "DGX-1V")
    assert (row(reader, "v100-01")["health"], row(reader, "v100-03")["health"]) == (
        "ok",
        "warning",
    )
    add("v100-04", V100_OTHER_MESH, "DGX-1V")
    add("v100-05", V100_OTHER_MESH, "DGX-1V")  # the other mesh is now the usual one

    assert (row(reader, "v100-01")["health"], row(reader, "v100-03")["health"]) == (
        "warning",
        "ok",
    )
    assert detail(reader, "v100-01")["findings"][0]["kind"] == "topology_drift"


def test_staffs_edits_in_the_admin_change_the_row_and_detail(reader: APIClient) -> None:
    add("v100-01", V100, "DGX-1V")
    add("v100-02", V100, "DGX-1V")
    add("v100-03", V100_OTHER_MESH, "DGX-1V")
    evaluate_server(Server.objects.get(hostname="v100-03").pk)
    request = RequestFactory().post("/admin/")
    server = Server.objects.get(hostname="v100-03")
    server.hostname, server.labels = "v100-03b", {"rack": "r7"}
    admin.site._registry[Server].save_model(request, server, None, True)
    finding = HealthFinding.objects.filter(server=server).first()
    assert finding is not None
    finding.message = "edited by staff"
    admin.site._registry[HealthFinding].save_model(request, finding, None, True)

    renamed = row(reader, "v100-03b")
    assert renamed["labels"] == {"rack": "r7"}
    served = detail(reader, "v100-03b")
    assert served["snapshot"]["hostname"] == "v100-03b"
    assert "edited by staff" in {f["message"] for f in served["findings"]}
    assert reader.get("/api/v1/servers/v100-03/").status_code == 404


def test_pruned_snapshots_change_the_detail(reader: APIClient, settings: Any) -> None:
    settings.TOPOWEB_KEEP_SNAPSHOTS = 1
    for hours in (3, 2, 1):
        ingest_report(
            hostname="gpu-ret",
            topo_text=fixture_text(H200),
            captured_at=timezone.now() - timedelta(hours=hours),
            source=Source.COLLECTOR,
            host={"kernel": f"6.{hours}"},  # new content, same wiring
        )
    before = detail(reader, "gpu-ret")["snapshot_count"]
    assert retention.prune_snapshots() > 0
    after = detail(reader, "gpu-ret")["snapshot_count"]
    assert (before, after) == (3, Snapshot.objects.filter(server__hostname="gpu-ret").count())
    assert after < before


def test_a_duplicate_report_moves_last_seen_without_writing_the_documents(
    reader: APIClient,
) -> None:
    assessed(add("gpu-dup", H200, "X"))
    Server.objects.filter(hostname="gpu-dup").update(last_seen_at=timezone.now() - timedelta(1))
    written = ServerDocument.objects.get(server__hostname="gpu-dup").written_at
    before = row(reader, "gpu-dup")["last_seen_at"]
    assert not add("gpu-dup", H200, "X").created
    after = row(reader, "gpu-dup")["last_seen_at"]

    assert after != before and detail(reader, "gpu-dup")["last_seen_at"] == after
    assert ServerDocument.objects.get(server__hostname="gpu-dup").written_at == written


def test_a_server_without_a_stored_document_is_still_served_built_not_stored(
    reader: APIClient,
) -> None:
    add("gpu-old", H200, "X")
    expected = (row(reader, "gpu-old"), detail(reader, "gpu-old"))
    ServerDocument.objects.all().delete()

    assert (row(reader, "gpu-old"), detail(reader, "gpu-old")) == expected
    assert not ServerDocument.objects.exists()


def test_the_migration_writes_the_documents_of_the_servers_already_stored(
    reader: APIClient,
) -> None:
    from django.apps import apps

    add("h200-01", H200, "HGX H200")
    add(
        "rtx-01", RTX6000, "ESC8000A", benchmarks=[BenchmarkInput("nccl-tests", fixture_text(NCCL))]
    )
    write_documents(Server.objects.values_list("pk", flat=True))
    stored = dict(ServerDocument.objects.values_list("server_id", "detail"))
    ServerDocument.objects.all().delete()
    migration = importlib.import_module("topoweb.health.migrations.0008_fill_server_documents")
    migration.fill_in(apps, None)

    assert dict(ServerDocument.objects.values_list("server_id", "detail")) == stored


def test_the_sku_and_class_details_serve_the_members_rows_as_the_list_does(
    reader: APIClient,
) -> None:
    add("v100-01", V100, "DGX-1V")
    add("v100-02", V100, "DGX-1V")
    add("v100-03", V100_OTHER_MESH, "DGX-1V")
    listed = {r["hostname"]: r for r in reader.get("/api/v1/servers/").json()["results"]}
    sku = reader.get("/api/v1/skus/DGX-1V/").json()
    fingerprint = listed["v100-01"]["fingerprint"]
    topology_class = reader.get(f"/api/v1/topology-classes/{fingerprint}/").json()

    assert sku["sku"] == "DGX-1V"
    assert {r["hostname"]: r for r in sku["servers"]} == listed
    assert {c["fingerprint"] for c in sku["topology_classes"]} == {
        r["fingerprint"] for r in listed.values()
    }
    assert topology_class["servers"] == [listed["v100-01"], listed["v100-02"]]
    assert reader.get("/api/v1/skus/no-such-sku/").status_code == 404


def test_the_health_worker_locks_the_server_before_its_health_row_as_an_ingest_does() -> None:
    """An ingest locks the server's row (its update) and then marks its health row stale; the
    worker, which writes the health row and then the documents (locking the server's row),
    must take them in the same order, or the two can wait on each other in a circle."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    add("gpu-lock", H200, "X")
    server = Server.objects.get(hostname="gpu-lock")
    evaluate_server(server.pk)  # the health row exists: this time it is locked and updated
    with CaptureQueriesContext(connection) as ran:
        evaluate_server(server.pk)
    sqls = [q["sql"] for q in ran.captured_queries]

    def first(found: Any) -> int:
        return next(i for i, sql in enumerate(sqls) if found(sql))

    server_lock = first(lambda sql: 'FROM "fleet_server"' in sql and "FOR UPDATE" in sql)
    health_lock = first(lambda sql: '"health_serverhealth"' in sql and "FOR UPDATE" in sql)
    assert server_lock < health_lock


def test_the_server_page_shows_the_row_the_list_serves(reader: APIClient) -> None:
    """The page's summary is the server's stored list row (one read path for one document):
    what the list serves, the page shows, counts beside it."""
    assessed(add("gpu-a01", H200))
    ServerDocument.objects.filter(server__hostname="gpu-a01").update(
        summary=ServerDocument.objects.get(server__hostname="gpu-a01").summary.replace(
            '"health":', '"sku_shown":"as stored","health":', 1
        )
    )
    listed = row(reader, "gpu-a01")
    page = reader.get("/api/v1/servers/gpu-a01/page/").json()["server"]
    assert listed["sku_shown"] == "as stored"
    counts = {"snapshot_count": 1, "benchmark_count": 0}
    assert page == listed | counts
