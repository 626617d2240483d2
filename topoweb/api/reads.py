"""The fleet's read API: servers (list, detail, snapshots, graph), benchmarks, SKUs and topology
classes, with each server's health badge and its class's analysis status beside the fleet's own
facts. Each view validates its query, calls one selector and shapes the answer."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, tzinfo
from typing import Any, cast
from zoneinfo import ZoneInfo

import orjson
from django.conf import settings
from django.db import DataError
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import ISO_8601, exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis.serializers import AnalysisSerializer, FindingSerializer
from topoweb.config.api import (
    READ_ERRORS,
    CompiledPages,
    Pagination,
    WindowCountPagination,
    window_page,
)
from topoweb.config.compiled import CompiledQuery
from topoweb.config.renderers import RawJSON, dumps
from topoweb.core.health import KINDS, SEVERITIES
from topoweb.fleet import selectors, services
from topoweb.fleet.models import Server, Snapshot
from topoweb.health import selectors as health_selectors


class ServerSummarySerializer(serializers.Serializer):
    hostname = serializers.CharField()
    sku = serializers.CharField(source="sku_name")
    labels = serializers.DictField()
    gpu_model = serializers.CharField(source="latest_snapshot.gpu_model", allow_null=True)
    gpu_count = serializers.IntegerField(source="latest_snapshot.gpu_count", allow_null=True)
    nic_count = serializers.IntegerField(source="latest_snapshot.nic_count", allow_null=True)
    has_nvlink = serializers.BooleanField(source="latest_snapshot.has_nvlink", allow_null=True)
    nvlink_summary = serializers.CharField(source="latest_snapshot.nvlink_summary", allow_null=True)
    health = serializers.SerializerMethodField()
    findings_count = serializers.SerializerMethodField()
    fingerprint = serializers.CharField(source="topology_class.fingerprint", allow_null=True)
    latest_snapshot_id = serializers.IntegerField(allow_null=True)
    last_seen_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(serializers.ChoiceField(choices=health_selectors.HEALTH_STATES))
    def get_health(self, server: Server) -> str:
        return health_selectors.server_health(server)

    def get_findings_count(self, server: Server) -> int:
        return health_selectors.findings_count(server)


_DATETIME = serializers.DateTimeField()


def _answer_zone() -> tzinfo | None:
    """The time zone DRF writes an answer's times in, read once per answer (a context-local
    lookup); None when DRF's own field must write them (USE_TZ off, a format not ISO 8601)."""
    if not settings.USE_TZ or str(api_settings.DATETIME_FORMAT).lower() != ISO_8601:
        return None
    return timezone.get_current_timezone()


def _datetime_text(value: datetime | None, zone: tzinfo | None) -> str | None:
    """What DateTimeField().to_representation writes for a stored time, in the answer's
    `zone` (_answer_zone): the same text, without the field's lookups per value."""
    if not value:
        return None
    if zone is None or value.tzinfo is None:
        return cast(str | None, _DATETIME.to_representation(value))
    try:
        text = value.astimezone(zone).isoformat()
    except OverflowError:
        return cast(str | None, _DATETIME.to_representation(value))  # its error, as DRF's
    return text[:-6] + "Z" if text.endswith("+00:00") else text


# UTC as get_current_timezone() gives it for TIME_ZONE = "UTC" (zoneinfo keeps one object per
# key): a time is written as the database wrote it only in this zone.
_UTC = ZoneInfo("UTC")


def _utc_text(value: datetime | str | None, zone: tzinfo | None) -> str | None:
    """_datetime_text of a time read as selectors.UtcText (a datetime where the database did
    not write it): in UTC, the text itself (DRF writes no fraction for a whole second, and Z
    for +00:00); in another zone, the datetime it stands for, written by _datetime_text."""
    if value is None or isinstance(value, datetime):
        return _datetime_text(value, zone)
    # UtcText writes every time from year 1 to 9999 of our era in 28 characters ending in AD;
    # before or after, or infinite, it is one Python cannot hold: psycopg refuses to load
    # such a time, and so does this (a 500, as before).
    if len(value) != 28 or not value.endswith("AD"):
        raise DataError(f"time out of Python's range: {value!r}")
    if zone is not _UTC:
        at = datetime.fromisoformat(value[:-2]).replace(tzinfo=UTC)
        return _datetime_text(at, zone)
    return value[:-9] + "Z" if value.endswith(".000000AD") else value[:-2] + "Z"


# Nineteen digits in a row: maybe an integer past 64 bits, which orjson reads as a float.
_LONG_DIGITS = re.compile(r"\d{19}")


def _labels(text: str | None) -> dict[str, Any] | None:
    """What DictField writes for labels stored as this JSON text: the object read by orjson
    (the same values as json.loads, Django's reader, for every JSON PostgreSQL stores, but
    for integers past 64 bits and numbers past a float's range: those by json.loads)."""
    if text is None:
        return None
    if _LONG_DIGITS.search(text):
        value = json.loads(text)
    else:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = json.loads(text)
    if value is None:
        return None
    if type(value) is dict:  # JSON's keys are strings already: DictField's str(key) is a copy
        return value
    return {str(k): v for k, v in value.items()}  # not an object: DictField's own error


def summary_from_row(row: dict[str, Any], zone: tzinfo | None) -> dict[str, Any]:
    """What ServerSummarySerializer writes for a server, from its selectors.server_summaries
    row: the same fields in the same order, without building model objects and fields (the
    columns come typed from the database: str, int, bool or None, which the fields keep).
    `zone`: _answer_zone(), read once per answer."""
    health, findings_count = health_selectors.summary_health(row)
    return {
        "hostname": row["hostname"],
        "sku": row["sku_name"],
        "labels": _labels(row["labels_text"]),
        "gpu_model": row["latest_snapshot__gpu_model"],
        "gpu_count": row["latest_snapshot__gpu_count"],
        "nic_count": row["latest_snapshot__nic_count"],
        "has_nvlink": row["latest_snapshot__has_nvlink"],
        "nvlink_summary": row["latest_snapshot__nvlink_summary"],
        "health": health,
        "findings_count": findings_count,
        "fingerprint": row["topology_class__fingerprint"],
        "latest_snapshot_id": row["latest_snapshot_id"],
        "last_seen_at": _utc_text(row["last_seen_text"], zone),
    }


class ServerFilterSerializer(serializers.Serializer):
    sku = serializers.CharField(required=False, default="")
    gpu_model = serializers.CharField(required=False, default="")
    gpu_count = serializers.IntegerField(required=False, min_value=0, max_value=100000)
    has_nvlink = serializers.BooleanField(required=False, allow_null=True, default=None)
    health = serializers.ChoiceField(
        choices=health_selectors.HEALTH_STATES, required=False, default=""
    )
    search = serializers.CharField(required=False, default="")
    finding = serializers.ChoiceField(choices=list(KINDS), required=False, default="")
    severity = serializers.ChoiceField(choices=list(SEVERITIES), required=False, default="")
    no_critical = serializers.BooleanField(required=False, default=False)
    ordering = serializers.ChoiceField(
        choices=list(selectors.ORDERINGS),
        required=False,
        default="hostname",
        help_text="Sort key; a leading '-' sorts descending. Ties are broken by hostname; "
        "servers without a value (no snapshot, never seen) come last either way.",
    )


def _paginated(
    request: Request,
    view: APIView,
    queryset: Any,
    serializer: type,
    pagination: type[Pagination] = Pagination,
) -> Response:
    paginator = pagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True).data)


# ServerFilterSerializer's validated data by query string: a function of the string alone
# (fixed choices and bounds), so kept per process; an invalid string raises each time.
_FILTERS = analysis_selectors.KeptAnswers(1024)


def _list_filters(request: Request) -> dict[str, Any]:
    def validate() -> dict[str, Any]:
        params = ServerFilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        return dict(params.validated_data)

    return dict(_FILTERS.get(str(request.META.get("QUERY_STRING", "")), validate))


_HEALTH_FILTERS = ("health", "finding", "severity", "no_critical")


def _summaries(wanted: dict[str, Any]) -> QuerySet[Server, dict[str, Any]]:
    """The list's rows for ServerFilterSerializer's validated data."""
    filters = {k: v for k, v in wanted.items() if k not in _HEALTH_FILTERS}
    health = {k: v for k, v in wanted.items() if k in _HEALTH_FILTERS}
    return selectors.server_summaries(
        health_selectors.filter_by_health(
            selectors.server_list(selectors.ServerFilters(**filters)), **health
        )
    )


# The server list's query by shape (which filters are set, the booleans, health state and
# sort key, the page's bounds), compiled once per process (CompiledQuery): a scheduler asks
# the same few questions, and building and compiling the ORM query cost it more than the
# database answering. Filters read as text patterns (sku, gpu_model, search: Django escapes
# them for LIKE, per database) keep the list built per request.
_LIST_QUERIES = analysis_selectors.KeptAnswers(256)
_LIST_VALUES = {"gpu_count": int, "finding": str, "severity": str}
_LIST_PATTERNS = ("sku", "gpu_model", "search")


def _summary_rows(wanted: dict[str, Any]) -> QuerySet[Server, dict[str, Any]] | CompiledPages:
    if any(wanted.get(name) for name in _LIST_PATTERNS):
        return _summaries(wanted)
    given = [name for name in _LIST_VALUES if wanted.get(name) not in (None, "")]
    shape = tuple(
        sorted((k, v) for k, v in wanted.items() if k not in _LIST_VALUES and k not in given)
    )
    values = [wanted[name] for name in given]

    def window(bottom: int, top: int) -> list[dict[str, Any]]:
        key = (tuple(given), shape, bottom, top)

        def build(*markers: Any) -> QuerySet[Server, dict[str, Any]]:
            return window_page(
                _summaries(dict(shape) | dict(zip(given, markers, strict=True))), bottom, top
            )

        query = _LIST_QUERIES.get(
            key,
            lambda: CompiledQuery(build, kinds=tuple(_LIST_VALUES[name] for name in given)),
        )
        return query.dicts(*values)

    return CompiledPages(window, lambda: _summaries(wanted))


class ServerListApi(APIView):
    @extend_schema(
        operation_id="servers_list",
        parameters=[ServerFilterSerializer],
        responses={200: ServerSummarySerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        paginator = WindowCountPagination()
        rows: Any = _summary_rows(_list_filters(request))  # a queryset or its compiled pages
        page = paginator.paginate_queryset(rows, request, view=self)
        assert page is not None
        zone = _answer_zone()
        return paginator.get_paginated_response([summary_from_row(row, zone) for row in page])

    # drf-spectacular reads pagination from here to describe the envelope.
    pagination_class = Pagination


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
    """The server detail's snapshot: its document served as the stored text (the deferred
    `document` itself stays loadable for the GPU order)."""

    document = serializers.JSONField(source="document_raw")


class TopologyClassSerializer(serializers.Serializer):
    fingerprint = serializers.CharField()
    sku = serializers.CharField(source="sku_name")
    gpu_model = serializers.CharField()
    gpu_count = serializers.IntegerField()
    nic_count = serializers.IntegerField()
    nvlink_summary = serializers.CharField()
    description = serializers.CharField()
    server_count = serializers.IntegerField()


class ServerDetailSerializer(ServerSummarySerializer):
    created_at = serializers.DateTimeField()
    findings = serializers.SerializerMethodField()
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
        return health_selectors.server_findings(server)

    def get_findings_checked(self, server: Server) -> bool:
        return health_selectors.findings_checked(server)

    @extend_schema_field(AnalysisSerializer(allow_null=True))
    def get_analysis(self, server: Server) -> RawJSON | None:
        snapshot = server.latest_snapshot
        return _analysis_json(
            server.analysis_id,  # type: ignore[attr-defined]
            server.analysis_updated_at,  # type: ignore[attr-defined]
            server.topology_class_id,
            snapshot.content_sha256 if snapshot is not None else None,
            server.document_text,  # type: ignore[attr-defined]
        )


def _analysis_json(
    analysis_id: int | None,
    updated_at: datetime | None,
    topology_class_id: int | None,
    content_sha256: str | None,
    document_text: str | None,
) -> RawJSON | None:
    """The class's analysis in the GPU numbering of the server's latest snapshot (its content
    hash and document as stored text, None without one), serialised once per analysis version
    and GPU order (a result is tens of kilobytes: building and encoding it cost most of the
    answer) and then served as the stored JSON text."""
    if analysis_id is None:
        return None
    text = _ANALYSIS_TEXT.get(
        (analysis_id, updated_at, content_sha256),
        lambda: _analysis_text(topology_class_id, content_sha256, document_text),
    )
    return None if text is None else RawJSON(text)


def _analysis_text(
    topology_class_id: int | None, content_sha256: str | None, document_text: str | None
) -> str | None:
    analysis = analysis_selectors.current_analysis(topology_class_id)
    if analysis is None:  # deleted since: its key (id, last update) is never read again
        return None
    data = dict(AnalysisSerializer(analysis).data)
    if data.get("result") and content_sha256 is not None and document_text is not None:
        # Stored in the class's canonical GPU order: served in this server's own, read from
        # the snapshot's content and topology (a carrier of the two, never saved).
        snapshot = Snapshot(content_sha256=content_sha256, document=json.loads(document_text))
        data["result"] = analysis_selectors.analysis_result_for(
            Server(latest_snapshot=snapshot), data["result"]
        )
    return dumps(data).decode()


# Per process: (analysis id, its last update, the snapshot content) -> the answer's JSON text.
# The update time changes with every write to the analysis, so a stale entry is never served.
_ANALYSIS_TEXT = analysis_selectors.KeptAnswers(512)


def _current_analysis_key() -> dict[str, Any]:
    """The id and last update of the class's current analysis (the key its answer text is
    kept by), as annotations of a server query."""
    current = analysis_selectors.current_analysis_of(OuterRef("topology_class_id"))
    return {
        "analysis_id": Subquery(current.values("id")[:1]),
        "analysis_updated_at": Subquery(current.values("updated_at")[:1]),
    }


# The detail's server as model objects, for ServerDetailSerializer (serialized_server_detail).
_server_detail = CompiledQuery(
    lambda hostname: selectors.server_detail_query(hostname).annotate(**_current_analysis_key())
)
# The detail's one row, compiled once: with its stored findings and the analysis's key.
_server_detail_row = CompiledQuery(
    lambda hostname: selectors.server_detail_values(
        hostname,
        stored_findings=health_selectors.StoredFindings("pk"),
        **_current_analysis_key(),
    )
)


def serialized_server_detail(hostname: str) -> Any:
    """ServerDetailSerializer's answer from model objects, as the detail was answered before
    detail_from_row: the reference that function is tested against."""
    server = selectors.server_detail(hostname, _server_detail)
    snapshot = server.latest_snapshot
    if snapshot is not None:
        # The facts are served as stored: no decode and re-encode per request.
        snapshot.nvml = RawJSON.or_none(server.nvml_text)  # type: ignore[attr-defined]
        snapshot.host = RawJSON.or_none(server.host_text)  # type: ignore[attr-defined]
        snapshot.document_raw = RawJSON(server.document_text)  # type: ignore[attr-defined]
    return ServerDetailSerializer(server).data


def detail_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """What ServerDetailSerializer writes for a server, from its server_detail_values row
    (with the analysis's key): the same fields in the same order, without model objects or
    serializer fields; one more query for the analysis the first time a version of it is
    served."""
    analysis = _analysis_json(
        row["analysis_id"],
        row["analysis_updated_at"],
        row["topology_class_id"],
        row["latest_snapshot__content_sha256"],
        row["document_text"],
    )
    zone = _answer_zone()
    snapshot = None
    if row["latest_snapshot_id"] is not None:
        snapshot = {
            "id": row["latest_snapshot_id"],
            "captured_at": _datetime_text(row["latest_snapshot__captured_at"], zone),
            "received_at": _datetime_text(row["latest_snapshot__received_at"], zone),
            "source": str(row["latest_snapshot__source"]),
            "collector_version": str(row["latest_snapshot__collector_version"]),
            "content_sha256": str(row["latest_snapshot__content_sha256"]),
            "gpu_count": int(row["latest_snapshot__gpu_count"]),
            "nic_count": int(row["latest_snapshot__nic_count"]),
            "gpu_model": str(row["latest_snapshot__gpu_model"]),
            "has_nvlink": bool(row["latest_snapshot__has_nvlink"]),
            "nvlink_summary": str(row["latest_snapshot__nvlink_summary"]),
            "warning_count": int(row["latest_snapshot__warning_count"]),
            "fingerprint": str(row["latest_snapshot__topology_class__fingerprint"]),
            "hostname": str(row["hostname"]),
            "document": RawJSON(row["document_text"]),
            "raw_text": str(row["latest_snapshot__raw_text"]),
            "nvml": RawJSON.or_none(row["nvml_text"]),
            "host": RawJSON.or_none(row["host_text"]),
        }
    return summary_from_row(row, zone) | {
        "created_at": _datetime_text(row["created_at"], zone),
        "findings": health_selectors.detail_findings(row),
        "findings_checked": health_selectors.detail_findings_checked(row),
        "snapshot": snapshot,
        "analysis": analysis,
        "snapshot_count": int(row["snapshot_count"]),
        "benchmark_count": int(row["benchmark_count"]),
    }


class ServerDetailApi(APIView):
    @extend_schema(
        operation_id="servers_retrieve", responses={200: ServerDetailSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, hostname: str) -> Response:
        return Response(detail_from_row(selectors.server_detail_row(hostname, _server_detail_row)))


class ServerSnapshotsApi(APIView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="servers_snapshots_list",
        responses={200: SnapshotSummarySerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request, hostname: str) -> Response:
        server = selectors.server_by_hostname(hostname)
        return _paginated(
            request, self, selectors.snapshot_history(server), SnapshotSummarySerializer
        )


class SnapshotDetailApi(APIView):
    @extend_schema(
        operation_id="snapshots_retrieve", responses={200: SnapshotDetailSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, snapshot_id: int) -> Response:
        return Response(SnapshotDetailSerializer(selectors.snapshot_by_id(snapshot_id)).data)


class GraphSerializer(serializers.Serializer):
    elements = serializers.ListField(
        child=serializers.DictField(),
        help_text="Cytoscape.js elements (group: nodes or edges), each node at its computed "
        "position; draw them with the preset layout",
    )
    paths = serializers.DictField(
        child=serializers.ListField(child=serializers.DictField()),
        help_text="Per GPU, nearest first: each other device (peer), its link class and the "
        "ids of the drawn elements on the real path to it. The GPU's peers on an NVSwitch "
        "fabric are one row {class, fabric}: every other GPU with an edge to that fabric node, "
        "each over GPU, nv:GPU:fabric, fabric, nv:peer:fabric, peer (with `peers` naming them, "
        "one row per class, where the fabric's pairs differ in class)",
    )
    nic_groups = serializers.DictField(
        help_text="present: NICs on one PCIe switch are grouped; collapsed: drawn as one node first"
    )


class ServerGraphApi(APIView):
    """Cytoscape elements of the server's latest topology."""

    @extend_schema(
        operation_id="servers_graph_retrieve", responses={200: GraphSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, hostname: str) -> Response:
        server = selectors.server_by_hostname(hostname)
        if server.latest_snapshot is None:
            raise exceptions.NotFound(f"{hostname!r} has no topology yet.")
        return Response(selectors.graph_elements(server.latest_snapshot))


class BenchmarkSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    hostname = serializers.CharField(source="server.hostname")
    kind = serializers.CharField()
    snapshot_id = serializers.IntegerField(allow_null=True)
    source = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.source
    captured_at = serializers.DateTimeField()
    received_at = serializers.DateTimeField()
    collective = serializers.CharField()
    avg_busbw_gbps = serializers.FloatField(allow_null=True)
    gpu_count = serializers.IntegerField(allow_null=True)


class BenchmarkDetailSerializer(BenchmarkSummarySerializer):
    document = serializers.JSONField()
    raw_text = serializers.CharField()


class BenchmarkFilterSerializer(serializers.Serializer):
    hostname = serializers.CharField(required=False, default="")
    kind = serializers.ChoiceField(choices=services.BENCHMARK_KINDS, required=False, default="")


class BenchmarkListApi(APIView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="benchmarks_list",
        parameters=[BenchmarkFilterSerializer],
        responses={200: BenchmarkSummarySerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        params = BenchmarkFilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        queryset = selectors.benchmark_list(**params.validated_data)
        return _paginated(request, self, queryset, BenchmarkSummarySerializer)


class BenchmarkDetailApi(APIView):
    @extend_schema(
        operation_id="benchmarks_retrieve",
        responses={200: BenchmarkDetailSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, benchmark_id: int) -> Response:
        return Response(BenchmarkDetailSerializer(selectors.benchmark_by_id(benchmark_id)).data)


class SkuSerializer(serializers.Serializer):
    sku = serializers.CharField(source="sku_name")
    server_count = serializers.IntegerField()
    topology_class_count = serializers.IntegerField()
    differing_count = serializers.IntegerField()


class SkuListApi(APIView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="skus_list", responses={200: SkuSerializer(many=True), **READ_ERRORS}
    )
    def get(self, request: Request) -> Response:
        return _paginated(request, self, selectors.sku_list(), SkuSerializer)


class SkuDetailSerializer(serializers.Serializer):
    sku = serializers.CharField()
    servers = ServerSummarySerializer(many=True)
    topology_classes = TopologyClassSerializer(many=True)


class SkuDetailApi(APIView):
    @extend_schema(
        operation_id="skus_retrieve", responses={200: SkuDetailSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, sku_name: str) -> Response:
        members = list(selectors.sku_members(sku_name))
        fingerprints = {s.topology_class.fingerprint for s in members if s.topology_class}
        classes = selectors.topology_class_list().filter(fingerprint__in=fingerprints)
        body = {"sku": members[0].sku_name, "servers": members, "topology_classes": classes}
        return Response(SkuDetailSerializer(body).data)


class TopologyClassListApi(APIView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="topology_classes_list",
        responses={200: TopologyClassSerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        return _paginated(request, self, selectors.topology_class_list(), TopologyClassSerializer)


class TopologyClassDetailSerializer(TopologyClassSerializer):
    document = serializers.JSONField()
    servers = ServerSummarySerializer(many=True)
    analysis = AnalysisSerializer(allow_null=True)


class TopologyClassDetailApi(APIView):
    @extend_schema(
        operation_id="topology_classes_retrieve",
        responses={200: TopologyClassDetailSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, fingerprint: str) -> Response:
        topology_class = selectors.topology_class_by_fingerprint(fingerprint)
        topology_class.servers_list = selectors.server_list(selectors.ServerFilters()).filter(  # type: ignore[attr-defined]
            topology_class=topology_class
        )
        data = TopologyClassDetailSerializer(
            {
                **{
                    str(f.source): getattr(topology_class, str(f.source))
                    for f in TopologyClassSerializer().fields.values()
                },
                "document": topology_class.document,
                "servers": topology_class.servers_list,  # type: ignore[attr-defined]
                "analysis": analysis_selectors.current_analysis(topology_class.pk),
            }
        ).data
        return Response(data)
