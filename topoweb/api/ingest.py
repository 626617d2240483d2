"""HTTP interface of ingest: collector reports, manual uploads and the upload preview. Each view
validates (size, JSON depth, text), calls one service and shapes the answer."""

from __future__ import annotations

import hmac
import math
import re
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, parsers, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.validators import ProhibitSurrogateCharactersValidator
from rest_framework.views import APIView

from topoweb.config.api import (
    ERRORS,
    PayloadTooLarge,
    hostname_field,
    validated,
)
from topoweb.config.metrics import count_report
from topoweb.config.parsers import JSONParser
from topoweb.config.throttles import IngestThrottle
from topoweb.core.formats import ParseError
from topoweb.fleet import access, facts, selectors, services
from topoweb.fleet.authentication import (
    CanUpload,
    CollectorTokenAuthentication,
    HasCollectorToken,
)
from topoweb.fleet.models import AuditEvent, CollectorToken, Source

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


def _check_size(request: Request, setting: str = "TOPOWEB_MAX_REPORT_BYTES") -> None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    limit = getattr(settings, setting)
    if length > limit:
        raise PayloadTooLarge(f"The request has {length} bytes; the limit is {limit} ({setting}).")


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


# No collector ran before this: a capture dated earlier is a clock reset or a forgery, and
# would sort before every genuine report.
EARLIEST_CAPTURE = datetime(2015, 1, 1, tzinfo=UTC)


class CaptureTimeField(serializers.DateTimeField):
    """An ISO 8601 time with its offset: a time without one names no instant (DRF would read
    it in this server's zone, whatever the host's was)."""

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            raise serializers.ValidationError(
                "The time has no time zone; send it with its offset (2026-11-29T10:00:00Z)."
            )
        return super().enforce_timezone(value)


class ReportInputSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=253, validators=[hostname_field])
    captured_at = CaptureTimeField()
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
        if value < EARLIEST_CAPTURE:
            raise serializers.ValidationError(
                f"{value.isoformat()} is before {EARLIEST_CAPTURE.year}: check the host's "
                "clock (NTP)."
            )
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
        help_text="What the reader had to guess, repair or skip in what was stored (the "
        "topology, or the benchmark)",
    )


class _CountedIngest(APIView):
    """Counts every answer of an ingest endpoint for /metrics, refusals included."""

    def handle_exception(self, exc: Exception) -> Response:
        count_report("rejected")
        return super().handle_exception(exc)


def _warnings(result: services.Ingested) -> list[str]:
    if result.warnings is not None:
        return list(result.warnings)
    stored = result.snapshot or result.benchmark
    return list(stored.document.get("warnings", [])) if stored is not None else []


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
    """A collector's report: 201 with a new snapshot, 200 with the stored identical one.

    The ingest budget (TOPOWEB_INGEST_RATE) counts new reports only, once the report's first
    statement has found it is not a duplicate: it bounds what a collector makes the service
    parse, store and analyse. A duplicate, most of a fleet's reports, stores nothing but its
    server's last-seen time in that one statement, which costs about what counting it in the
    cache would."""

    authentication_classes = [CollectorTokenAuthentication]
    permission_classes = [HasCollectorToken]
    throttle_classes = [IngestThrottle]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="reports_create",
        description="Only a collector token, and only for its own hostname (403 otherwise). "
        "New reports count against the token's TOPOWEB_INGEST_RATE (429 past it); a duplicate "
        "of the stored report is answered 200 and not counted.",
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
            admit=lambda: self.count_against_budget(request),
        )
        return _ingested(result)

    def check_throttles(self, request: Request) -> None:
        """Not before the view runs (DRF's place for it): `post` counts a new report through
        `count_against_budget`."""

    def count_against_budget(self, request: Request) -> None:
        """DRF's throttle check, raising Throttled (429 with Retry-After) when the token's
        budget is spent."""
        super().check_throttles(request)

    def perform_authentication(self, request: Request) -> None:
        super().perform_authentication(request)
        self.collector_token = request.auth if isinstance(request.auth, CollectorToken) else None

    def handle_exception(self, exc: Exception) -> Response:
        # The token is marked used, and its use audited, by the report's first statement
        # (CollectorTokenAuthentication leaves both): a request refused before it (invalid,
        # another host's) is marked and audited here, unless the database itself failed. One
        # refused after it (over budget) is marked.
        token = getattr(self, "collector_token", None)
        if token is not None and not isinstance(exc, DatabaseError):
            selectors.mark_used(token)
            access.record_use(token)
        return super().handle_exception(exc)


class UploadTextSerializer(serializers.Serializer):
    text = serializers.CharField(required=False, trim_whitespace=False)
    file = serializers.FileField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("text" in attrs) == ("file" in attrs):
            raise serializers.ValidationError("Send exactly one of `text` and `file`.")
        return attrs


class UploadPreviewInputSerializer(UploadTextSerializer):
    hostname = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=253,
        help_text="The server the upload is for: the answer says whether it exists and, if not, "
        "the closest existing name",
    )
    gpu_model = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="As the upload's: the GPU model when the output names none; the preview "
        "draws with that generation's figures and usual platform, as the saved page will",
    )


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


def signed_in(request: Request) -> User:
    """The person behind a request that IsAuthenticated already let through."""
    user = request.user
    assert isinstance(user, User)
    return user


def uploaded_text(
    request: Request,
    serializer: type[serializers.Serializer],
    setting: str = "TOPOWEB_MAX_REPORT_BYTES",
) -> tuple[str, Any]:
    """The text of an upload, pasted or as a file, within the size limit `setting` names: what
    the parsers get. A file that is not UTF-8 text is a parse error naming its line."""
    _check_size(request, setting)
    data = serializer(data=request.data)
    data.is_valid(raise_exception=True)
    payload = data.validated_data
    if "file" not in payload:
        return payload["text"], payload
    upload = payload["file"]
    limit = getattr(settings, setting)
    if upload.size > limit:
        raise PayloadTooLarge(
            f"The file has {upload.size} bytes; the limit is {limit} ({setting})."
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
        text, payload = uploaded_text(request, UploadInputSerializer)
        try:
            result = services.ingest_upload(
                hostname=payload["hostname"],
                text=text,
                uploaded_by=signed_in(request),
                gpu_model_hint=payload["gpu_model"],
                create=payload["create"],
            )
        except services.UnknownServer as exc:
            raise exceptions.ValidationError({"hostname": [str(exc)]}) from exc
        access.record_request(
            AuditEvent.Kind.UPLOAD,
            request,
            subject=payload["hostname"],
            created=result.created,
            snapshot=result.snapshot.pk if result.snapshot is not None else None,
            benchmark=result.benchmark.pk if result.benchmark is not None else None,
        )
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
    host = serializers.DictField(
        required=False,
        help_text="For the hostname asked about: hostname, known (a server of that name "
        "exists), suggestion (the closest existing name, or null)",
    )
    nic_groups = serializers.DictField(
        required=False,
        help_text="As the graph API's: whether NICs are grouped and start collapsed (the "
        "elements hold both drawings); a topology only",
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
            "multipart/form-data": UploadPreviewInputSerializer,
            "application/json": UploadPreviewInputSerializer,
        },
        responses={
            200: UploadPreviewSerializer,
            **{k: ERRORS[k] for k in (400, 401, 403, 413, 415)},
        },
    )
    def post(self, request: Request) -> Response:
        text, payload = uploaded_text(request, UploadPreviewInputSerializer)
        answer = selectors.upload_preview(text, gpu_model=payload.get("gpu_model", "").strip())
        if payload.get("hostname"):
            answer["host"] = selectors.hostname_match(payload["hostname"].strip())
        return Response(UploadPreviewSerializer(answer).data)


class EnrollInputSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=253, validators=[hostname_field])


class EnrolledSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    token = serializers.CharField(help_text="This host's collector token, shown once.")


class AlreadyEnrolled(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class EnrollApi(APIView):
    """A collector's first contact: the fleet's one enrollment secret (TOPOWEB_ENROLLMENT_TOKEN)
    is traded for the host's own collector token. 409 once the host holds one; 404 when
    enrollment is off (no secret set)."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    throttle_classes = [IngestThrottle]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="enroll_create",
        request=EnrollInputSerializer,
        responses={201: EnrolledSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        secret = settings.TOPOWEB_ENROLLMENT_TOKEN
        if not secret:
            raise exceptions.NotFound("Enrollment is off: TOPOWEB_ENROLLMENT_TOKEN is not set.")
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), secret):
            raise exceptions.AuthenticationFailed("The enrollment token is required.")
        hostname = validated(EnrollInputSerializer, request.data)["hostname"]
        token = access.enroll_collector(request, hostname)
        if token is None:
            raise AlreadyEnrolled(
                f"{hostname!r} is already enrolled: revoke its collector token in the admin "
                "to enroll it again."
            )
        return Response({"hostname": hostname, "token": token}, status=status.HTTP_201_CREATED)

    def get_authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="topoweb enrollment"'  # a 401, not a 403, without the secret
