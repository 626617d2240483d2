"""A server's exports (NCCL XML, gres.conf, Kubernetes labels) are drawn by the worker once per
snapshot and served as stored, the same files a request would draw; a request that finds them
missing (before the worker, after a deploy that changed the core, a large graph no longer in
the cache) still answers, and queues one drawing for the server (issue 24: reads under 2 s at
the largest sizes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from tests import synthetic
from tests.web.conftest import FIXTURES, report
from topoweb.core.ecosystem import EXPORT_FORMATS
from topoweb.fleet import drawings, tasks
from topoweb.fleet.models import QueuedWork, Server, Snapshot, SnapshotExport, Source, TopologyClass
from topoweb.fleet.selectors import DRAWING
from topoweb.fleet.services import ingest_report
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

# A real collector report: one H200 with its NVML and host facts (bus ids reach the files).
DEVICE_REPORT = json.loads(
    (FIXTURES / "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json").read_text()
)


def files(reader: APIClient, hostname: str) -> dict[str, tuple[int, bytes, str, str]]:
    out = {}
    for fmt in EXPORT_FORMATS:
        response = reader.get(f"/api/v1/servers/{hostname}/export/{fmt}/")
        out[fmt] = (
            response.status_code,
            response.content,
            response["Content-Disposition"],
            response.get("X-Topoweb-Assumptions", ""),
        )
    return out


def topology_never_read(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a request read the topology to draw an export")


def test_the_worker_stores_each_export_as_a_request_draws_it(
    collector_client: Any, reader: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = report(
        "h200-vm",
        "topo_42_h200-1gpu-firecracker-vm-ansi-underline-header.txt",
        nvml=DEVICE_REPORT["nvml"],
        host=DEVICE_REPORT["host"],
    )
    assert (
        collector_client("h200-vm").post("/api/v1/reports", body, format="json").status_code == 201
    )
    drawn_in_request = files(reader, "h200-vm")
    assert not SnapshotExport.objects.exists()
    server = Server.objects.get(hostname="h200-vm")

    evaluate_server(server.pk)
    monkeypatch.setattr(Snapshot, "to_domain", topology_never_read)
    served = files(reader, "h200-vm")

    assert SnapshotExport.objects.filter(snapshot=server.latest_snapshot).count() == 4
    assert served == drawn_in_request
    assert all(status == 200 for status, *_ in served.values())
    assert b'busid="0000:00:06.0"' in served["nccl-xml"][1]  # NVML's bus id, not a placeholder


def test_an_export_drawn_by_another_core_is_drawn_again(
    collector_client: Any, reader: APIClient
) -> None:
    body = report("h200-01")
    assert (
        collector_client("h200-01").post("/api/v1/reports", body, format="json").status_code == 201
    )
    server = Server.objects.get(hostname="h200-01")
    evaluate_server(server.pk)
    stored = files(reader, "h200-01")
    SnapshotExport.objects.update(code="0" * 16, body="an older core's file")

    again = files(reader, "h200-01")

    assert again == stored
    assert b"an older core's file" not in again["gres"][1]


def test_a_large_server_missing_its_drawings_queues_one_and_is_then_served_stored(
    reader: APIClient, admin_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = ingest_report(
        hostname="nvl72-01",
        topo_text=synthetic.nvswitch_domain(72),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    server_id = done.server.pk
    cache.clear()
    sent: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(
        "topoweb.fleet.work.enqueue", lambda name, *args, **kw: sent.append((name, args)) or True
    )

    graph = reader.get("/api/v1/servers/nvl72-01/graph/")
    gres = reader.get("/api/v1/servers/nvl72-01/export/gres/")
    svg = admin_client.get("/servers/nvl72-01/graph.svg")

    assert graph.status_code == 409 and svg.status_code == 409
    assert gres.status_code == 200  # drawn in this request, as none is stored yet
    assert sent == [("fleet.draw", (server_id,))]  # one drawing queued, not one per read
    assert QueuedWork.objects.get(kind=DRAWING, key=server_id).queued_at is not None

    assert tasks.draw(server_id) == "True"  # the worker's task body
    monkeypatch.setattr(Snapshot, "to_domain", topology_never_read)
    graph = reader.get("/api/v1/servers/nvl72-01/graph/")
    stored = reader.get("/api/v1/servers/nvl72-01/export/gres/")

    assert graph.status_code == 200
    assert sum(e["data"].get("kind") == "gpu" for e in graph.json()["elements"]) == 72
    assert stored.content == gres.content
    assert QueuedWork.objects.get(kind=DRAWING, key=server_id).queued_at is None


def stored_h200(hostname: str) -> tuple[Server, Snapshot, Any]:
    """A server reported as ingest stores it, its latest snapshot and that snapshot's topology
    (what the worker hands store_exports)."""
    done = ingest_report(
        hostname=hostname,
        topo_text=(FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt").read_text(),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    server = Server.objects.select_related("latest_snapshot__topology_class").get(pk=done.server.pk)
    snapshot = server.latest_snapshot
    assert snapshot is not None
    return server, snapshot, snapshot.to_domain()


def test_store_exports_draws_only_what_is_missing() -> None:
    server, snapshot, topology = stored_h200("h200-02")
    assert drawings.store_exports(server, snapshot, topology) == len(EXPORT_FORMATS)
    assert drawings.store_exports(server, snapshot, topology) == 0
    SnapshotExport.objects.filter(fmt="gres").update(code="old")
    assert drawings.store_exports(server, snapshot, topology) == 1
    assert SnapshotExport.objects.count() == len(EXPORT_FORMATS)


def test_files_drawn_for_a_server_deleted_meanwhile_are_not_stored() -> None:
    """The worker draws a server's files while someone deletes the server (the admin, a
    rerun of the demo): they are not written pointing at its deleted snapshot, which made the
    deletion's commit fail on the foreign key (bench/load.py's clean-up hit it)."""
    from django.db import connection

    from topoweb.fleet.changes import delete_servers

    server, snapshot, topology = stored_h200("h200-03")
    delete_servers([server.pk])
    assert drawings.store_exports(server, snapshot, topology) == 0
    connection.check_constraints()  # every foreign key holds now, not only at a commit
    assert not SnapshotExport.objects.filter(snapshot_id=snapshot.pk).exists()


def class_files(reader: APIClient, fingerprint: str) -> dict[str, tuple[int, bytes, str]]:
    out = {}
    for fmt in EXPORT_FORMATS:
        response = reader.get(f"/api/v1/topology-classes/{fingerprint}/export/{fmt}/")
        out[fmt] = (
            response.status_code,
            response.content,
            response.get("X-Topoweb-Assumptions", ""),
        )
    return out


def class_never_read(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a request read the class's topology to draw an export")


def test_a_class_export_is_drawn_by_the_worker_and_served_from_the_cache(
    collector_client: Any, reader: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = report("h200-03")
    assert (
        collector_client("h200-03").post("/api/v1/reports", body, format="json").status_code == 201
    )
    server = Server.objects.select_related("topology_class").get(hostname="h200-03")
    assert server.topology_class is not None
    fingerprint = server.topology_class.fingerprint
    cache.clear()
    drawn_in_request = class_files(reader, fingerprint)  # a miss: drawn, then kept
    cache.clear()

    evaluate_server(server.pk)  # the worker draws the class's too
    monkeypatch.setattr(TopologyClass, "to_domain", class_never_read)
    served = class_files(reader, fingerprint)

    assert served == drawn_in_request
    assert all(status == 200 for status, *_ in served.values())
    assert "placeholders" in served["nccl-xml"][2]  # a class has no bus ids of its own


def test_a_class_export_missing_from_the_cache_is_drawn_once_and_kept(
    reader: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = ingest_report(
        hostname="ring-24",
        topo_text=synthetic.gpu_ring(24),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    fingerprint = TopologyClass.objects.get(pk=done.snapshot.topology_class_id).fingerprint
    cache.clear()
    first = reader.get(f"/api/v1/topology-classes/{fingerprint}/export/gres/")
    monkeypatch.setattr(TopologyClass, "to_domain", class_never_read)
    again = reader.get(f"/api/v1/topology-classes/{fingerprint}/export/gres/")
    assert first.status_code == again.status_code == 200
    assert again.content == first.content


def test_the_drawings_are_stored_before_the_assessment_is_worked_out(
    reader: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = ingest_report(
        hostname="nvl72-02",
        topo_text=synthetic.nvswitch_domain(72),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
    )
    cache.clear()

    def assessment_fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the assessment ran past its time limit")

    monkeypatch.setattr("topoweb.health.services.check_health", assessment_fails)
    with pytest.raises(RuntimeError):
        evaluate_server(done.server.pk)

    assert SnapshotExport.objects.filter(snapshot_id=done.snapshot.pk).count() == 4
    assert reader.get("/api/v1/servers/nvl72-02/graph/").status_code == 200


def test_a_new_snapshots_exports_replace_the_previous_ones(collector_client: Any) -> None:
    client = collector_client("h200-04")
    assert client.post("/api/v1/reports", report("h200-04"), format="json").status_code == 201
    server = Server.objects.get(hostname="h200-04")
    evaluate_server(server.pk)
    first = Server.objects.get(pk=server.pk).latest_snapshot_id
    again = report("h200-04", host={"kernel": "6.8.0-2"}, captured_at="2026-11-29T11:00:00Z")
    assert client.post("/api/v1/reports", again, format="json").status_code == 201
    evaluate_server(server.pk)
    latest = Server.objects.get(pk=server.pk).latest_snapshot_id

    assert latest != first
    assert set(SnapshotExport.objects.values_list("snapshot_id", flat=True)) == {latest}
    assert SnapshotExport.objects.count() == len(EXPORT_FORMATS)
