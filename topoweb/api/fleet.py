"""HTTP interface of the fleet: ingest (collector reports, manual uploads) and the read API,
with each server's health badge and its class's analysis status beside the fleet's own facts.
Each view validates, calls one service or selector, and shapes the answer."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, tzinfo
from typing import Any, cast
from zoneinfo import ZoneInfo

import orjson
from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, DataError
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import ISO_8601, exceptions, parsers, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.validators import ProhibitSurrogateCharactersValidator
from rest_framework.views import APIView

from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis.serializers import AnalysisSerializer, FindingSerializer
from topoweb.config.api import (
    ERRORS,
    READ_ERRORS,
    CompiledPages,
    Pagination,
    PayloadTooLarge,
    WindowCountPagination,
    hostname_field,
    validated,
    window_page,
)
from topoweb.config.compiled import CompiledQuery
from topoweb.config.metrics import count_report
from topoweb.config.parsers import JSONParser
from topoweb.config.renderers import RawJSON, dumps
from topoweb.config.throttles import IngestThrottle
from topoweb.core.ecosystem import Export
from topoweb.core.formats import ParseError
from topoweb.core.health import KINDS, SEVERITIES
from topoweb.fleet import facts, selectors, services
from topoweb.fleet.authentication import (
    CanUpload,
    CollectorTokenAuthentication,
    HasCollectorToken,
)
from topoweb.fleet.models import CollectorToken, Server, Snapshot, Source
from topoweb.health import selectors as health_selectors

# Far deeper than any facts the collector sends, and far from Python's recursion limit, which
# json.dumps (hashing, storing) and json.loads (reading back) would otherwise hit.
MAX_JSON_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable_json(value: Any) -> None:
    """Refuse here what PostgreSQL's jsonb would refuse later with a 500: U+0000, lone
    surrogates (valid JSON escapes, not valid Unicode), numbers that overflow to infinity;
    and nesting deep enough to exhaust Python's recursion on the way there."""
    if value is None:
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise serializers.ValidationError(f"Nested more than {MAX_JSON_DEPTH} levels deep.")
        if isinstance(item, float) and not math.isfinite(item):
            raise serializers.ValidationError("Numbers must be finite.")
        strings = list(item) if isinstance(item, dict) else [item] if isinstance(item, str) else []
        for text in strings:
            if "\x00" in text:
                raise serializers.ValidationError("Null characters are not allowed.")
            if _SURROGATE.search(text):
                raise serializers.ValidationError("Lone surrogate characters are not allowed.")
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        stack.extend((child, depth + 1) for child in children)


def _check_size(request: Request) -> None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > settings.TOPOWEB_MAX_REPORT_BYTES:
        raise PayloadTooLarge(
            f"The request has {length} bytes; the limit is {settings.TOPOWEB_MAX_REPORT_BYTES} "
            "(TOPOWEB_MAX_REPORT_BYTES)."
        )


def _facts(check: Any) -> Any:
    """A field validator from a reader of structured facts: the message names the wrong
    value's place inside the field, e.g. `gpus[2].pcie.max_width ... expected an integer`."""

    def validate(value: Any) -> None:
        _storable_json(value)
        if value is None:
            return
        try:
            check(value)
        except facts.FactsError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    return validate


# --- ingest ----------------------------------------------------------------------------------


class _NoSurrogates(ProhibitSurrogateCharactersValidator):
    """DRF's check (same message, same first character named), by one regular-expression
    search instead of a Python loop over every character: reports carry tens of kilobytes."""

    def __call__(self, value: Any) -> None:
        found = _SURROGATE.search(str(value))
        if found is not None:
            message = self.message.format(code_point=ord(found.group()))
            raise serializers.ValidationError(message, code=self.code)


class ReportTextField(serializers.CharField):
    """A report's text as sent (never trimmed): a CharField whose surrogate check is cheap."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)
        self.validators = [
            _NoSurrogates() if isinstance(v, ProhibitSurrogateCharactersValidator) else v
            for v in self.validators
        ]


class BenchmarkInputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=services.BENCHMARK_KINDS)
    text = ReportTextField()


class ReportInputSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=253, validators=[hostname_field])
    captured_at = serializers.DateTimeField()
    collector_version = serializers.CharField(
        max_length=64, required=False, allow_blank=True, default=""
    )
    topo_text = ReportTextField()
    nccl_xml = ReportTextField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The host's NCCL topology XML (NCCL_TOPO_DUMP_FILE), merged with topo_text",
    )
    # NVML facts are read (and refused, naming the place) by core.formats.nvml at ingest.
    nvml = serializers.DictField(required=False, allow_null=True, validators=[_storable_json])
    host = serializers.DictField(
        required=False, allow_null=True, validators=[_facts(facts.check_host)]
    )
    benchmarks = BenchmarkInputSerializer(many=True, required=False)

    def validate_captured_at(self, value: datetime) -> datetime:
        """A capture from the future would stay the server's newest for ever and hide every
        genuine report after it: refused past TOPOWEB_MAX_CLOCK_SKEW_S of this server's clock."""
        ahead = (value - timezone.now()).total_seconds()
        if ahead > settings.TOPOWEB_MAX_CLOCK_SKEW_S:
            raise serializers.ValidationError(
                f"{value.isoformat()} is {ahead:.0f} s ahead of this server's clock; at most "
                f"{settings.TOPOWEB_MAX_CLOCK_SKEW_S} s are allowed (TOPOWEB_MAX_CLOCK_SKEW_S). "
                "Check the host's clock (NTP)."
            )
        return value


class IngestedSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The snapshot's id (the benchmark's for one)")
    kind = serializers.CharField()
    hostname = serializers.CharField()
    created = serializers.BooleanField()
    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the reader had to guess or repair in the stored topology "
        "(empty for benchmarks)",
    )


class _CountedIngest(APIView):
    """Counts every answer of an ingest endpoint for /metrics, refusals included."""

    def handle_exception(self, exc: Exception) -> Response:
        count_report("rejected")
        return super().handle_exception(exc)


def _warnings(result: services.Ingested) -> list[str]:
    if result.warnings is not None:
        return list(result.warnings)
    return list(result.snapshot.document.get("warnings", [])) if result.snapshot else []


def _ingested(result: services.Ingested) -> Response:
    count_report("new" if result.created else "duplicate")
    stored = result.snapshot or result.benchmark
    assert stored is not None
    kind = "topology" if result.snapshot is not None else result.benchmark.kind  # type: ignore[union-attr]
    body = {
        "id": stored.pk,
        "kind": kind,
        "hostname": result.server.hostname,
        "created": result.created,
        "warnings": _warnings(result),
    }
    return Response(body, status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK)


class ReportApi(_CountedIngest):
    """A collector's report: 201 with a new snapshot, 200 with the stored identical one."""

    authentication_classes = [CollectorTokenAuthentication]
    permission_classes = [HasCollectorToken]
    throttle_classes = [IngestThrottle]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="reports_create",
        description="Only a collector token, and only for its own hostname (403 otherwise).",
        request=ReportInputSerializer,
        responses={200: IngestedSerializer, 201: IngestedSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        _check_size(request)
        payload = validated(ReportInputSerializer, request.data)
        token = request.auth
        assert isinstance(token, CollectorToken)
        if token.hostname != payload["hostname"]:
            raise exceptions.PermissionDenied(
                f"This token may write reports for {token.hostname!r} only."
            )
        result = services.ingest_report(
            hostname=payload["hostname"],
            topo_text=payload["topo_text"],
            nccl_xml=payload["nccl_xml"],
            captured_at=payload["captured_at"],
            source=Source.COLLECTOR,
            collector_version=payload["collector_version"],
            nvml=payload.get("nvml"),
            host=payload.get("host"),
            benchmarks=[
                services.BenchmarkInput(b["kind"], b["text"]) for b in payload.get("benchmarks", [])
            ],
            collector_token=token,
        )
        return _ingested(result)

    def perform_authentication(self, request: Request) -> None:
        super().perform_authentication(request)
        self.collector_token = request.auth if isinstance(request.auth, CollectorToken) else None

    def handle_exception(self, exc: Exception) -> Response:
        # The token is marked used by the report's first statement (CollectorTokenAuthentication
        # leaves it): a request refused before it (invalid, throttled, another host's) is marked
        # here, unless the database itself failed.
        token = getattr(self, "collector_token", None)
        if token is not None and not isinstance(exc, DatabaseError):
            selectors.mark_used(token)
        return super().handle_exception(exc)


class UploadTextSerializer(serializers.Serializer):
    text = serializers.CharField(required=False, trim_whitespace=False)
    file = serializers.FileField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("text" in attrs) == ("file" in attrs):
            raise serializers.ValidationError("Send exactly one of `text` and `file`.")
        return attrs


class UploadInputSerializer(UploadTextSerializer):
    hostname = serializers.CharField(max_length=253, validators=[hostname_field])
    gpu_model = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="The GPU model, used when the text itself does not name it (NVML facts and "
        "benchmark headers come first)",
    )
    # A declared field: DRF's metaclass takes it out of the class, so Serializer.create stays.
    create = serializers.BooleanField(  # type: ignore[assignment]
        required=False,
        default=False,
        help_text="Add the server if no server has this hostname; without it an unknown "
        "hostname answers 400 (a typo must not become a new server)",
    )


def _signed_in(request: Request) -> User:
    """The person behind a request that IsAuthenticated already let through."""
    user = request.user
    assert isinstance(user, User)
    return user


def _uploaded_text(request: Request, serializer: type[UploadTextSerializer]) -> tuple[str, Any]:
    """The text of an upload, pasted or as a file, within the size limit: what the parsers get.
    A file that is not UTF-8 text is a parse error naming its line."""
    _check_size(request)
    data = serializer(data=request.data)
    data.is_valid(raise_exception=True)
    payload = data.validated_data
    if "file" not in payload:
        return payload["text"], payload
    upload = payload["file"]
    if upload.size > settings.TOPOWEB_MAX_REPORT_BYTES:
        raise PayloadTooLarge(
            f"The file has {upload.size} bytes; the limit is {settings.TOPOWEB_MAX_REPORT_BYTES} "
            "(TOPOWEB_MAX_REPORT_BYTES)."
        )
    raw = upload.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError("the file is not UTF-8 text", raw[: exc.start].count(b"\n") + 1) from exc
    if "\x00" in text:
        raise ParseError(
            "the input is binary, not text", text[: text.index("\x00")].count("\n") + 1
        )
    return text, payload


class UploadApi(_CountedIngest):
    """A person's upload for a host: topo -m, an NCCL topology XML, nccl-tests,
    p2pBandwidthLatencyTest or nvbandwidth output."""

    permission_classes = [CanUpload]
    throttle_classes = [IngestThrottle]
    parser_classes = [parsers.MultiPartParser, parsers.FormParser, JSONParser]

    @extend_schema(
        operation_id="uploads_create",
        description="Needs an API token made with `--scope upload`, or a signed-in session of "
        "a user with the fleet.upload_files permission. The upload becomes the host's current "
        "topology when it is the newest capture.",
        request={
            "multipart/form-data": UploadInputSerializer,
            "application/json": UploadInputSerializer,
        },
        responses={200: IngestedSerializer, 201: IngestedSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        text, payload = _uploaded_text(request, UploadInputSerializer)
        try:
            result = services.ingest_upload(
                hostname=payload["hostname"],
                text=text,
                uploaded_by=_signed_in(request),
                gpu_model_hint=payload["gpu_model"],
                create=payload["create"],
            )
        except services.UnknownServer as exc:
            raise exceptions.ValidationError({"hostname": [str(exc)]}) from exc
        return _ingested(result)


class UploadPreviewSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["topology", *services.BENCHMARK_KINDS])
    summary = serializers.CharField(help_text="One line: what was read")
    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="Each thing the reader had to guess or repair, naming its line",
    )
    elements = serializers.ListField(
        child=serializers.DictField(),
        help_text="Cytoscape.js elements of a topology, as the graph API draws it; "
        "empty for benchmarks",
    )


class UploadPreviewApi(APIView):
    """What an upload would read, without storing anything: the upload page's preview.
    Same sign-in and size rules as the upload itself; a parse error names the line."""

    permission_classes = [CanUpload]
    parser_classes = [parsers.MultiPartParser, parsers.FormParser, JSONParser]

    @extend_schema(
        operation_id="uploads_preview",
        description="The same credentials as an upload: an API token with the upload scope, "
        "or a session with the fleet.upload_files permission.",
        request={
            "multipart/form-data": UploadTextSerializer,
            "application/json": UploadTextSerializer,
        },
        responses={
            200: UploadPreviewSerializer,
            **{k: ERRORS[k] for k in (400, 401, 403, 413, 415)},
        },
    )
    def post(self, request: Request) -> Response:
        text, _ = _uploaded_text(request, UploadTextSerializer)
        return Response(UploadPreviewSerializer(selectors.upload_preview(text)).data)


# --- read ------------------------------------------------------------------------------------


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


# --- exports ---------------------------------------------------------------------------------

EXPORT_DOC = (
    "An export as the file itself: `nccl-xml` (an NCCL_TOPO_FILE), `gres` (Slurm gres.conf "
    "lines), `k8s-labels` (JSON map of node labels) or `kubectl` (a `kubectl label` command). "
    "What had to be assumed is listed in the X-Topoweb-Assumptions header."
)


def _file_response(export: Export) -> HttpResponse:
    response = HttpResponse(export.body, content_type=f"{export.content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    if export.warnings:
        response["X-Topoweb-Assumptions"] = " | ".join(export.warnings)[:2000]
    return response


class ServerExportApi(APIView):
    @extend_schema(
        operation_id="servers_export_retrieve",
        description=EXPORT_DOC,
        responses={(200, "text/plain"): OpenApiTypes.STR, **READ_ERRORS},
    )
    def get(self, request: Request, hostname: str, fmt: str) -> HttpResponse:
        return _file_response(selectors.server_export(selectors.server_by_hostname(hostname), fmt))


class TopologyClassExportApi(APIView):
    @extend_schema(
        operation_id="topology_classes_export_retrieve",
        description=EXPORT_DOC,
        responses={(200, "text/plain"): OpenApiTypes.STR, **READ_ERRORS},
    )
    def get(self, request: Request, fingerprint: str, fmt: str) -> HttpResponse:
        topology_class = selectors.topology_class_by_fingerprint(fingerprint)
        return _file_response(selectors.topology_class_export(topology_class, fmt))


class TopologyConfApi(APIView):
    """Slurm topology.conf: one block per NVLink domain that spans servers."""

    @extend_schema(
        operation_id="exports_topology_conf_retrieve",
        responses={(200, "text/plain"): OpenApiTypes.STR, **READ_ERRORS},
    )
    def get(self, request: Request) -> HttpResponse:
        return _file_response(
            Export(selectors.fleet_topology_conf(), "text/plain", "topology.conf")
        )
