"""Each server's stored read documents (ServerDocument): its row in the server list and its
detail, shaped by the serializers below (the OpenAPI schema's source) when written, and served
by the API as the stored text. `write_documents` is the one writer, called (through
fleet.changes) by every write that changes what they show."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

import orjson
from django.db import transaction
from django.db.models import Count, F, OuterRef, QuerySet, Subquery, TextField
from django.db.models.functions import Cast, Coalesce
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from topoweb.analysis.serializers import (
    AnalysisSerializer,
    FindingGroupSerializer,
    FindingSerializer,
)
from topoweb.core.gpunames import gpu_family
from topoweb.core.health.groups import group_documents
from topoweb.fleet.models import Benchmark, Server, Snapshot
from topoweb.fleet.statements import column_name, execute_for_ids, table_name
from topoweb.health import selectors
from topoweb.health.models import HealthFinding, ServerDocument


class GpuModelCountSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="as reported (NVML, a benchmark) or uploaded")
    family = serializers.CharField(help_text="the part's one name for lists (core.gpunames)")
    count = serializers.IntegerField()


class ServerSummarySerializer(serializers.Serializer):
    hostname = serializers.CharField()
    sku = serializers.CharField(source="sku_name")
    labels = serializers.DictField()
    gpu_model = serializers.CharField(source="latest_snapshot.gpu_model", allow_null=True)
    gpu_family = serializers.SerializerMethodField(
        help_text="The GPU part's one name for lists (`A100` for `A100-SXM-80GB`, `A100 SXM4`, "
        "...); empty when no model was reported; `gpu_model` is the name as reported"
    )
    gpu_models = serializers.SerializerMethodField(
        help_text="Where the GPUs differ, each model with its count, most common first (empty: "
        "one model, or none named per GPU); `gpu_model` is then the one advice prices, the "
        "smallest-memory, slowest of them"
    )
    gpu_models_source = serializers.SerializerMethodField(
        help_text="where `gpu_models` comes from: nvml, benchmark (the names a p2p or nccl-tests "
        "run printed), uploader (a person's word: which GPU is which is not known)"
    )
    gpu_count = serializers.IntegerField(source="latest_snapshot.gpu_count", allow_null=True)
    cpu_model = serializers.CharField(
        source="latest_snapshot.cpu_model",
        allow_null=True,
        help_text="The host's CPU as its collector read it (empty: none reported)",
    )
    nic_count = serializers.IntegerField(source="latest_snapshot.nic_count", allow_null=True)
    has_nvlink = serializers.BooleanField(source="latest_snapshot.has_nvlink", allow_null=True)
    nvlink_summary = serializers.CharField(source="latest_snapshot.nvlink_summary", allow_null=True)
    health = serializers.SerializerMethodField()
    findings_count = serializers.SerializerMethodField()
    fingerprint = serializers.CharField(source="topology_class.fingerprint", allow_null=True)
    latest_snapshot_id = serializers.IntegerField(allow_null=True)
    # The last key on purpose: the stored row leaves it out and the list appends it.
    last_seen_at = serializers.DateTimeField(allow_null=True)

    def get_gpu_family(self, server: Server) -> str:
        snapshot = server.latest_snapshot
        return gpu_family(snapshot.gpu_model if snapshot is not None else "")

    @extend_schema_field(GpuModelCountSerializer(many=True))
    def get_gpu_models(self, server: Server) -> list[dict[str, Any]]:
        snapshot = server.latest_snapshot
        mixed = (snapshot.gpu_models if snapshot is not None else None) or {}
        return [
            {"name": name, "family": gpu_family(name), "count": count}
            for name, count in mixed.get("models", ())
        ]

    def get_gpu_models_source(self, server: Server) -> str:
        snapshot = server.latest_snapshot
        mixed = (snapshot.gpu_models if snapshot is not None else None) or {}
        return str(mixed.get("source", ""))

    @extend_schema_field(serializers.ChoiceField(choices=selectors.HEALTH_STATES))
    def get_health(self, server: Server) -> str:
        return selectors.server_health(server)

    def get_findings_count(self, server: Server) -> int:
        return selectors.findings_count(server)


class SnapshotSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    captured_at = serializers.DateTimeField()
    received_at = serializers.DateTimeField()
    source = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.source
    collector_version = serializers.CharField()
    content_sha256 = serializers.CharField()
    gpu_count = serializers.IntegerField()
    nic_count = serializers.IntegerField()
    gpu_model = serializers.CharField()
    cpu_model = serializers.CharField(
        help_text="The host's CPU as its collector read it (empty: none reported); its socket "
        "link prices the server's cross-socket paths"
    )
    has_nvlink = serializers.BooleanField()
    nvlink_summary = serializers.CharField()
    warning_count = serializers.IntegerField()
    fingerprint = serializers.CharField(source="topology_class.fingerprint")


class SnapshotDetailSerializer(SnapshotSummarySerializer):
    hostname = serializers.CharField(source="server.hostname")
    document = serializers.JSONField()
    raw_text = serializers.CharField()
    nvml = serializers.JSONField(allow_null=True)
    host = serializers.JSONField(allow_null=True)


class ServerSnapshotSerializer(SnapshotDetailSerializer):
    """The server detail's snapshot: its stored texts (`document`, `raw_text`, `nvml`, `host`)
    are filled in when served (SNAPSHOT_TEXTS)."""


class ServerDetailSerializer(ServerSummarySerializer):
    created_at = serializers.DateTimeField()
    findings = serializers.SerializerMethodField()
    groups = serializers.SerializerMethodField(
        help_text="The findings grouped by cause (one per cause, most severe first), each with "
        "its pairs"
    )
    findings_checked = serializers.SerializerMethodField(
        help_text="The health checks have judged the current snapshot: only then does an "
        "empty `findings` mean nothing was found"
    )
    snapshot = ServerSnapshotSerializer(source="latest_snapshot", allow_null=True)
    analysis = serializers.SerializerMethodField()
    snapshot_count = serializers.IntegerField()
    benchmark_count = serializers.IntegerField()

    @extend_schema_field(FindingSerializer(many=True))
    def get_findings(self, server: Server) -> list[dict[str, Any]]:
        return _findings_of(server)

    @extend_schema_field(FindingGroupSerializer(many=True))
    def get_groups(self, server: Server) -> list[dict[str, Any]]:
        return group_documents(_findings_of(server))

    def get_findings_checked(self, server: Server) -> bool:
        return selectors.findings_checked(server)

    @extend_schema_field(AnalysisSerializer(allow_null=True))
    def get_analysis(self, server: Server) -> Any:
        return None  # filled in when served: kept per analysis version (api.reads)


# The snapshot's stored texts the detail serves unchanged: null in the stored detail, filled in
# from the snapshot's own columns when served.
SNAPSHOT_TEXTS = ("document", "raw_text", "nvml", "host")


def _findings_of(server: Server) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = getattr(server, "findings_read", [])
    return found


def _servers_to_document() -> QuerySet[Server]:
    """The servers with everything their documents show but the snapshot's stored texts:
    latest snapshot and class, health counts, how many snapshots and benchmarks are stored."""
    snapshots = Snapshot.objects.filter(server=OuterRef("pk")).order_by().values("server")
    benchmarks = Benchmark.objects.filter(server=OuterRef("pk")).order_by().values("server")
    return (
        Server.objects.select_related("latest_snapshot__topology_class", "topology_class", "health")
        .defer(
            "latest_snapshot__raw_text",
            "latest_snapshot__nccl_xml",
            "latest_snapshot__nvml",
            "latest_snapshot__host",
            "latest_snapshot__document",
            "latest_snapshot__topology_class__document",
            "topology_class__document",
            *(f"health__{c}" for c in ("acceptance", "expectations", "document", "gauges")),
        )
        .annotate(
            snapshot_count=Coalesce(Subquery(snapshots.annotate(n=Count("id")).values("n")), 0),
            benchmark_count=Coalesce(Subquery(benchmarks.annotate(n=Count("id")).values("n")), 0),
        )
        .order_by("pk")
    )


def _detail_rows() -> QuerySet[Server, dict[str, Any]]:
    """Each server's stored detail with what is filled in when served: `last_seen_at`, the
    latest snapshot's stored texts (as text, served unchanged) and content hash, the class."""
    snapshot = "latest_snapshot__"
    rows = Server.objects.values(
        "pk",
        "last_seen_at",
        "topology_class_id",
        detail=F("documents__detail"),
        content_sha256=F(f"{snapshot}content_sha256"),
        raw_text=F(f"{snapshot}raw_text"),
        document_text=Cast(f"{snapshot}document", TextField()),
        nvml_text=Cast(f"{snapshot}nvml", TextField()),
        host_text=Cast(f"{snapshot}host", TextField()),
    ).order_by()
    return cast(QuerySet[Server, dict[str, Any]], rows)


# Built once: a queryset is a lazy description that each use copies with its own filter, and
# building these (joins, deferred columns, annotations) costs more than running them.
_SERVERS_TO_DOCUMENT = _servers_to_document()
_DETAIL_ROWS = _detail_rows()


def _without_seen(document: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if k == "last_seen_at" else v) for k, v in document.items()}


# One serializer of each kind per thread, made once: DRF deep-copies every declared field
# each time a serializer is made; `to_representation` keeps no state on it.
_writers = threading.local()


def _serializer(kind: type[serializers.Serializer]) -> serializers.Serializer:
    kept: dict[type[serializers.Serializer], serializers.Serializer]
    kept = _writers.__dict__.setdefault("by_class", {})
    if kind not in kept:
        kept[kind] = kind()
    return kept[kind]


def build_documents(server_ids: Iterable[int], *, lock: bool = False) -> dict[int, tuple[str, str]]:
    """Each server's (summary, detail) as stored: the serializers' output, without what is
    filled in when served. One query for the servers (`lock`: their rows locked by it), and
    one for the findings of those the health checks judged."""
    rows = _SERVERS_TO_DOCUMENT.filter(pk__in=sorted(set(server_ids)))
    servers = list(rows.select_for_update(of=("self",)) if lock else rows)
    findings: dict[int, list[dict[str, Any]]] = {}
    judged = [s.pk for s in servers if getattr(s, "health", None) is not None]
    if judged:
        for row in HealthFinding.objects.filter(server_id__in=judged).order_by("id"):
            findings.setdefault(row.server_id, []).append(row.to_document())
    summaries, details = _serializer(ServerSummarySerializer), _serializer(ServerDetailSerializer)
    built = {}
    for server in servers:
        if getattr(server, "health", None) is not None:
            server.findings_read = findings.get(server.pk, [])  # type: ignore[attr-defined]
        else:
            server.findings_read = selectors.server_findings(server)  # type: ignore[attr-defined]
        snapshot = server.latest_snapshot
        if snapshot is not None:
            snapshot.server = server  # the snapshot's hostname, without a query
            for name in SNAPSHOT_TEXTS:
                setattr(snapshot, name, None)
        summary = dict(summaries.to_representation(server))
        del summary["last_seen_at"]
        detail = _without_seen(dict(details.to_representation(server)))
        built[server.pk] = (orjson.dumps(summary).decode(), orjson.dumps(detail).decode())
    return built


def write_documents(server_ids: Iterable[int]) -> None:
    """Write these servers' documents from what is stored now (registered with
    fleet.changes). The servers' rows are locked by the query that reads them, in one order,
    so that two writers of one server (an ingest, the health worker) write one after the
    other, the later reading what the earlier committed."""
    ids = sorted(set(server_ids))
    if not ids:
        return
    # Part of the caller's transaction (no savepoint of its own: two round trips more), or
    # its own when called outside one.
    with transaction.atomic(savepoint=False):
        built = build_documents(ids, lock=True)
        ServerDocument.objects.bulk_create(
            [ServerDocument(server_id=k, summary=s, detail=d) for k, (s, d) in built.items()],
            update_conflicts=True,
            unique_fields=["server"],
            update_fields=["summary", "detail", "written_at"],
        )


def drop_documents(server_ids: Iterable[int]) -> None:
    """Delete these servers' documents (registered with fleet.changes, for servers_outdated):
    reads build them from what is stored until write_documents runs again. A statement
    written out: every new report runs it, and the ORM's delete first collects what would
    cascade (nothing does) and builds its query anew each time."""
    table, column = table_name(ServerDocument), column_name(ServerDocument, "server")
    execute_for_ids(f"DELETE FROM {table} WHERE {column} IN ({{ids}})", server_ids)


# --- served ---------------------------------------------------------------------------------

_SEEN = serializers.DateTimeField(allow_null=True)


def seen_json(when: datetime | None) -> str:
    """`last_seen_at` as the serializers write it, as JSON text."""
    return "null" if when is None else _seen_text(when)


@functools.lru_cache(maxsize=65536)
def _seen_text(when: datetime) -> str:
    # Kept per instant: a list page writes one per row and a server's time changes only when
    # it reports, while DRF's field converts and formats it anew each time. The text depends
    # on nothing else (TIME_ZONE is fixed; no request activates another zone).
    return f'"{_SEEN.to_representation(when)}"'


def summaries(servers: QuerySet[Server], *more: str) -> QuerySet[Server, dict[str, Any]]:
    """A server list queryset as the rows the list serves: each server's stored summary and
    its `last_seen_at` (one query per page, the filters and ordering on real columns), and the
    `more` columns a caller reads beside them."""
    return cast(
        QuerySet[Server, dict[str, Any]],
        servers.values("pk", "last_seen_at", *more, summary=F("documents__summary")),
    )


def summary_texts(rows: Iterable[dict[str, Any]]) -> str:
    """The JSON array of a page of `summaries` rows, joined as text: each stored summary with
    its `last_seen_at` as the last key. A server whose document is not written yet (made
    outside the services) has it built here, not stored."""
    rows = list(rows)
    missing = [row["pk"] for row in rows if row["summary"] is None]
    built = build_documents(missing) if missing else {}
    parts = []
    for row in rows:
        text = row["summary"] if row["summary"] is not None else built[row["pk"]][0]
        parts.append(f'{text[:-1]},"last_seen_at":{seen_json(row["last_seen_at"])}}}')
    return "[" + ",".join(parts) + "]"


def stored_detail(hostname: str) -> dict[str, Any] | None:
    """The server's stored detail with what is filled in when served (_detail_rows), in one
    query. None without such a server."""
    return _DETAIL_ROWS.filter(hostname=hostname).first()


def detail_document(row: dict[str, Any]) -> dict[str, Any]:
    """A stored_detail row's document, decoded (it is small: the snapshot's texts are not in
    it) for the caller to fill in; built here, not stored, for a server without one yet."""
    text = row["detail"]
    if text is None:
        text = build_documents([row["pk"]])[row["pk"]][1]
    document: dict[str, Any] = orjson.loads(text)
    return document
