"""The fleet's read API: servers (list, detail, snapshots, graph), benchmarks, SKUs and topology
classes, with each server's health badge and its class's analysis status beside the fleet's own
facts. Each view validates its query, calls one selector and shapes the answer."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis.serializers import (
    AnalysisSerializer,
)
from topoweb.config.answers import answer_once, kept_read
from topoweb.config.api import (
    READ_ERRORS,
    ErrorSerializer,
    Pagination,
    WindowCountPagination,
    validated,
)
from topoweb.config.renderers import JSONRenderer, dumps, raw_json
from topoweb.core.health import KINDS, SEVERITIES
from topoweb.fleet import selectors, services
from topoweb.fleet.models import Server, Snapshot
from topoweb.health import documents
from topoweb.health import selectors as health_selectors
from topoweb.health.documents import (
    ServerDetailSerializer,
    ServerSummarySerializer,
    SnapshotDetailSerializer,
    SnapshotSummarySerializer,
)


class ServerFilterSerializer(serializers.Serializer):
    sku = serializers.CharField(required=False, default="")
    gpu_model = serializers.CharField(
        required=False,
        default="",
        help_text="Part of a GPU model's name: the server's priced model or, where its GPUs "
        "differ, any of them",
    )
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


_HEALTH_FILTERS = ("health", "finding", "severity", "no_critical")


def _servers(request: Request) -> QuerySet[Server]:
    """The list's servers for the request's validated filters (ServerFilterSerializer)."""
    wanted = validated(ServerFilterSerializer, request.query_params)
    return _servers_matching(tuple(sorted(wanted.items()))).all()


@functools.lru_cache(maxsize=256)
def _servers_matching(wanted: tuple[tuple[str, Any], ...]) -> QuerySet[Server]:
    """The list's queryset for one set of validated filters, built once per process: building
    it (joins, lookups) costs more than running it, and a queryset is a lazy description that
    each use copies (the caller's `.all()`), so this one is never run and holds no rows."""
    filters = {k: v for k, v in wanted if k not in _HEALTH_FILTERS}
    health = {k: v for k, v in wanted if k in _HEALTH_FILTERS}
    return health_selectors.filter_by_health(
        selectors.servers(selectors.ServerFilters(**filters)), **health
    )


class ServerListApi(APIView):
    @extend_schema(
        operation_id="servers_list",
        parameters=[ServerFilterSerializer],
        responses={200: ServerSummarySerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request) -> HttpResponse:
        def answer() -> bytes:
            # Each row is the server's stored summary (health.documents), joined as text.
            paginator = WindowCountPagination()
            servers = documents.summaries(_servers(request))
            page = paginator.paginate_queryset(servers, request, self)
            rows = raw_json(documents.summary_texts(page or []))
            return JSONRenderer().render(paginator.get_paginated_response(rows).data)

        # The page's links name this host: the whole URL is the key.
        body = kept_read(("server list", request.build_absolute_uri()), answer)
        return HttpResponse(body, content_type="application/json")

    # drf-spectacular reads pagination from here to describe the envelope.
    pagination_class = Pagination


class TopologyClassSerializer(serializers.Serializer):
    fingerprint = serializers.CharField()
    sku = serializers.CharField(source="sku_name")
    gpu_model = serializers.CharField()
    gpu_count = serializers.IntegerField()
    nic_count = serializers.IntegerField()
    nvlink_summary = serializers.CharField()
    description = serializers.CharField()
    server_count = serializers.IntegerField()


def _analysis_json(
    analysis_id: int | None,
    updated_at: datetime | None,
    topology_class_id: int | None,
    content_sha256: str | None,
    document_text: str | None,
) -> Any:
    """The class's analysis in the GPU numbering of the server's latest snapshot (its content
    hash and document as stored text, None without one), serialised once per analysis version
    and GPU order (a result is tens of kilobytes: building and encoding it cost most of the
    answer) and then served as the stored JSON text."""
    if analysis_id is None:
        return None
    # Kept by (analysis id, its last update, the snapshot content): the update time changes
    # with every write to the analysis, so a stale entry is never served.
    text = answer_once(
        ("analysis text", analysis_id, updated_at, content_sha256),
        lambda: _analysis_text(topology_class_id, content_sha256, document_text),
    )
    return None if text is None else raw_json(text)


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


def server_detail(hostname: str, analysis: tuple[int, datetime] | None) -> Any:
    """ServerDetailSerializer's answer for a server: its stored detail (health.documents) read
    in one query with the latest snapshot's stored texts, served unchanged, and its class's
    `analysis` (current_analysis_key: which version is current) served as the JSON text kept
    for that version."""
    row = documents.stored_detail(hostname)
    if row is None:
        raise Http404(f"no server named {hostname!r}")
    detail = documents.detail_document(row)
    detail["last_seen_at"] = raw_json(documents.seen_json(row["last_seen_at"]))
    snapshot = detail["snapshot"]
    if snapshot is not None:
        snapshot["document"] = raw_json(row["document_text"])
        snapshot["raw_text"] = row["raw_text"]
        snapshot["nvml"] = raw_json(row["nvml_text"])
        snapshot["host"] = raw_json(row["host_text"])
    analysis_id, updated_at = analysis or (None, None)
    detail["analysis"] = _analysis_json(
        analysis_id,
        updated_at,
        row["topology_class_id"],
        row["content_sha256"],
        row["document_text"],
    )
    return detail


class ServerDetailApi(APIView):
    @extend_schema(
        operation_id="servers_retrieve", responses={200: ServerDetailSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, hostname: str) -> HttpResponse:
        # Kept whole (config.answers.kept_read) with its class's analysis as now current: an
        # analysis changes state without any write to the server.
        analysis = analysis_selectors.current_analysis_key(None, hostname=hostname)
        body = kept_read(
            ("server detail", hostname, analysis),
            lambda: JSONRenderer().render(server_detail(hostname, analysis)),
        )
        return HttpResponse(body, content_type="application/json")


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
    figures = serializers.DictField(
        child=serializers.CharField(),
        help_text="Where the links' bandwidth and latency come from: generation (the "
        "catalogue's, from the reported GPU model or guessed from the matrix) and basis (what "
        "was assumed, said in words)",
    )


class ServerGraphApi(APIView):
    """Cytoscape elements of the server's latest topology."""

    @extend_schema(
        operation_id="servers_graph_retrieve",
        responses={
            200: GraphSerializer,
            **READ_ERRORS,
            409: OpenApiResponse(
                ErrorSerializer, description="A large server's graph, not drawn yet by the worker"
            ),
        },
    )
    def get(self, request: Request, hostname: str) -> Response:
        server = selectors.server_by_hostname(hostname)
        if server.latest_snapshot is None:
            raise exceptions.NotFound(f"{hostname!r} has no topology yet.")
        try:
            return Response(selectors.graph_elements(server.latest_snapshot))
        except selectors.GraphNotDrawn as exc:
            raise NotDrawnYet(str(exc)) from exc


class NotDrawnYet(exceptions.APIException):
    """409: a large server's graph waits for the worker's drawing (never drawn in a request)."""

    status_code = 409
    default_code = "not_drawn_yet"


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
        # The members' stored summaries (health.documents), as the server list serves them.
        servers = selectors.servers(selectors.ServerFilters(sku=sku_name))
        rows = list(documents.summaries(servers, "sku_name", "topology_class_id"))
        if not rows:
            raise Http404(f"no SKU named {sku_name!r}")
        classes = selectors.topology_class_list().filter(
            pk__in={row["topology_class_id"] for row in rows}
        )
        return Response(
            {
                "sku": rows[0]["sku_name"],
                "servers": raw_json(documents.summary_texts(rows)),
                "topology_classes": TopologyClassSerializer(classes, many=True).data,
            }
        )


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
        data = TopologyClassDetailSerializer(
            {
                **{
                    str(f.source): getattr(topology_class, str(f.source))
                    for f in TopologyClassSerializer().fields.values()
                },
                "document": topology_class.document,
                "servers": [],  # the members' stored summaries, below
                "analysis": analysis_selectors.current_analysis(topology_class.pk),
            }
        ).data
        members = selectors.servers(selectors.ServerFilters()).filter(topology_class=topology_class)
        data["servers"] = raw_json(documents.summary_texts(documents.summaries(members)))
        return Response(data)
