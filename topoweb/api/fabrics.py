"""HTTP interface of the fabric between servers: fabrics (list, upload by hand), a collector's
`ibnetdiscover` report, one fabric's analysis, its captures and the diff between two. Each view
validates, calls one service or selector and shapes the answer."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    inline_serializer,
)
from rest_framework import exceptions, parsers, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from topoweb.api.ingest import ReportTextField, signed_in, uploaded_text
from topoweb.config.api import ERRORS, READ_ERRORS, Pagination, validated
from topoweb.config.parsers import JSONParser
from topoweb.config.throttles import IngestThrottle
from topoweb.fleet import access, fabric_selectors, fabric_services
from topoweb.fleet.authentication import (
    CanUpload,
    CollectorTokenAuthentication,
    HasCollectorToken,
)
from topoweb.fleet.models import AuditEvent, CollectorToken, Source

_NAME_HELP = "The fabric's name (letters, digits, `._-`); a new name makes a new fabric"
_NAME = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$", help_text=_NAME_HELP)


class CaptureSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    captured_at = serializers.DateTimeField()
    received_at = serializers.DateTimeField()
    source = serializers.CharField()  # type: ignore[assignment]
    hostname = serializers.CharField(help_text="The collector's host; empty for uploads")
    switch_count = serializers.IntegerField()
    ca_count = serializers.IntegerField()
    link_count = serializers.IntegerField()
    warning_count = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["pending", "done", "failed"])
    analysed_at = serializers.DateTimeField(allow_null=True)


class FabricSummarySerializer(serializers.Serializer):
    name = serializers.CharField()
    latest_capture = serializers.SerializerMethodField()

    def get_latest_capture(self, fabric: Any) -> dict[str, Any] | None:
        return fabric_selectors.capture_summary(fabric.latest_capture)


class FabricSwitchSerializer(serializers.Serializer):
    name = serializers.CharField()
    guid = serializers.CharField()
    tier = serializers.CharField(
        help_text="leaf, spine, core, tier-N, unreached (no host reaches it), or unknown (its "
        "own block is missing and only spines name it)"
    )
    ports = serializers.IntegerField(allow_null=True)


class FabricLinkSerializer(serializers.Serializer):
    a = serializers.CharField()
    a_port = serializers.IntegerField()
    b = serializers.CharField()
    b_port = serializers.IntegerField()
    width = serializers.CharField(help_text="lanes, e.g. 4x")
    speed = serializers.CharField(help_text="lane speed, e.g. NDR")
    gbps = serializers.FloatField()


class FabricHcaSerializer(serializers.Serializer):
    name = serializers.CharField(allow_null=True, help_text="the device, e.g. mlx5_0")
    guid = serializers.CharField()
    switch = serializers.CharField(allow_null=True)
    port = serializers.IntegerField(allow_null=True)
    rail = serializers.IntegerField(allow_null=True)
    rate = serializers.CharField(allow_null=True)


class FabricHostSerializer(serializers.Serializer):
    hostname = serializers.CharField(allow_null=True, help_text="null: default NodeDescription")
    server = serializers.CharField(
        allow_null=True, required=False, help_text="the server this host is, when one matches"
    )
    hcas = FabricHcaSerializer(many=True)


class FabricFindingSerializer(serializers.Serializer):
    kind = serializers.CharField()
    severity = serializers.ChoiceField(choices=["critical", "warning", "info"])
    message = serializers.CharField()
    switches = serializers.ListField(child=serializers.CharField())
    hosts = serializers.ListField(child=serializers.CharField())
    devices = serializers.ListField(child=serializers.CharField())
    evidence = serializers.DictField()
    advice = serializers.CharField()


class FabricAnalysisSerializer(serializers.Serializer):
    summary = serializers.DictField()
    switches = FabricSwitchSerializer(many=True)
    links = FabricLinkSerializer(many=True)
    hosts = FabricHostSerializer(many=True)
    findings = FabricFindingSerializer(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    rail_of_leaf = serializers.DictField(child=serializers.IntegerField())


class FabricDetailSerializer(serializers.Serializer):
    name = serializers.CharField()
    capture = CaptureSummarySerializer(allow_null=True)
    captures = serializers.IntegerField(help_text="How many captures the fabric has")
    status = serializers.ChoiceField(choices=["pending", "done", "failed"])
    error = serializers.CharField()
    analysis = FabricAnalysisSerializer(
        allow_null=True, help_text="What the worker made of the capture; null until it has run"
    )


class FabricIngestedSerializer(serializers.Serializer):
    name = serializers.CharField()
    capture = serializers.IntegerField()
    created = serializers.BooleanField()
    warnings = serializers.ListField(child=serializers.CharField())


class FabricUploadSerializer(serializers.Serializer):
    name = _NAME
    text = serializers.CharField(required=False, trim_whitespace=False)
    file = serializers.FileField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("text" in attrs) == ("file" in attrs):
            raise serializers.ValidationError("Send exactly one of `text` and `file`.")
        return attrs


class FabricReportSerializer(serializers.Serializer):
    name = _NAME
    captured_at = serializers.DateTimeField()
    text = ReportTextField(help_text="`ibnetdiscover` output")


def _ingested(result: fabric_services.FabricIngested) -> Response:
    body = {
        "name": result.fabric.name,
        "capture": result.capture.pk,
        "created": result.created,
        "warnings": result.capture.document.get("warnings", []),
    }
    return Response(body, status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK)


class FabricListApi(APIView):
    """Every fabric with its latest capture; POST stores a capture uploaded by hand."""

    pagination_class = Pagination

    def get_permissions(self) -> list[Any]:
        return [CanUpload()] if self.request.method == "POST" else list(super().get_permissions())

    def get_throttles(self) -> list[Any]:
        return [IngestThrottle()] if self.request.method == "POST" else super().get_throttles()

    parser_classes = [parsers.MultiPartParser, parsers.FormParser, JSONParser]

    @extend_schema(
        operation_id="fabrics_list",
        responses={200: FabricSummarySerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(fabric_selectors.fabrics(), request, view=self)
        return paginator.get_paginated_response(FabricSummarySerializer(page, many=True).data)

    @extend_schema(
        operation_id="fabrics_create",
        description="An `ibnetdiscover` report of the fabric named `name`, as `text` or a "
        "`file` (files up to TOPOWEB_MAX_FABRIC_BYTES). Needs what an upload needs: an API "
        "token with the upload scope, or a session with the fleet.upload_files permission. "
        "201 with a new capture, 200 with the stored identical one; the worker analyses it.",
        request={
            "multipart/form-data": FabricUploadSerializer,
            "application/json": FabricUploadSerializer,
        },
        responses={200: FabricIngestedSerializer, 201: FabricIngestedSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        text, payload = uploaded_text(request, FabricUploadSerializer, "TOPOWEB_MAX_FABRIC_BYTES")
        result = fabric_services.ingest_fabric(
            name=payload["name"], text=text, source=Source.UPLOAD, uploaded_by=signed_in(request)
        )
        access.record_request(
            AuditEvent.Kind.UPLOAD,
            request,
            subject=f"fabric {result.fabric.name}",
            created=result.created,
            fabric_capture=result.capture.pk,
        )
        return _ingested(result)


class FabricReportApi(APIView):
    """A collector's `ibnetdiscover` run (`--ibnetdiscover`, on one host per fabric)."""

    authentication_classes = [CollectorTokenAuthentication]
    permission_classes = [HasCollectorToken]
    throttle_classes = [IngestThrottle]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="fabric_reports_create",
        description="Only a collector token; the capture records the token's host.",
        request=FabricReportSerializer,
        responses={200: FabricIngestedSerializer, 201: FabricIngestedSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        payload = validated(FabricReportSerializer, request.data)
        token = request.auth
        assert isinstance(token, CollectorToken)
        result = fabric_services.ingest_fabric(
            name=payload["name"],
            text=payload["text"],
            source=Source.COLLECTOR,
            hostname=token.hostname,
            captured_at=payload["captured_at"],
        )
        return _ingested(result)


class FabricDetailApi(APIView):
    @extend_schema(
        operation_id="fabrics_retrieve",
        parameters=[
            OpenApiParameter("capture", int, description="A capture's id (default: the latest)")
        ],
        responses={200: FabricDetailSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, name: str) -> Response:
        capture = _int_param(request, "capture")
        return Response(fabric_selectors.fabric_detail(name, capture))


class FabricCapturesApi(APIView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="fabrics_captures_list",
        responses={200: CaptureSummarySerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request, name: str) -> Response:
        fabric = fabric_selectors.fabric_by_name(name)
        paginator = Pagination()
        page = paginator.paginate_queryset(
            fabric_selectors.capture_history(fabric), request, view=self
        )
        return paginator.get_paginated_response(CaptureSummarySerializer(page, many=True).data)


_LISTED = "{count, items}: every change counted, the first 500 listed"
FabricDiffSerializer = inline_serializer(
    name="FabricDiff",
    fields={
        "name": serializers.CharField(),
        "from": serializers.IntegerField(help_text="the older capture's id"),
        "to": serializers.IntegerField(help_text="the newer capture's id"),
        "switches": serializers.DictField(help_text=f"added, removed: {_LISTED}"),
        "links": serializers.DictField(help_text=f"added, removed, rate_changed: {_LISTED}"),
        "hcas": serializers.DictField(help_text=f"added, removed, moved: {_LISTED}"),
    },
)


class FabricDiffApi(APIView):
    @extend_schema(
        operation_id="fabrics_diff",
        parameters=[
            OpenApiParameter("from", int, description="Older capture (default: the one before)"),
            OpenApiParameter("to", int, description="Newer capture (default: the latest)"),
        ],
        responses={200: FabricDiffSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, name: str) -> Response:
        fabric = fabric_selectors.fabric_by_name(name)
        ids = list(fabric_selectors.capture_history(fabric).values_list("id", flat=True)[:2])
        new = _int_param(request, "to") or (ids[0] if ids else None)
        old = _int_param(request, "from") or (ids[1] if len(ids) > 1 else None)
        if new is None or old is None:
            raise exceptions.ValidationError(
                {"from": ["The fabric has fewer than two captures: name both `from` and `to`."]}
            )
        return Response(fabric_selectors.fabric_diff(name, old, new))


def _int_param(request: Request, key: str) -> int | None:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 12:
        raise exceptions.ValidationError({key: [f"Expected a capture id, got {raw[:40]!r}."]})
    return int(raw)


class FabricExportApi(APIView):
    @extend_schema(
        operation_id="fabrics_export_retrieve",
        description="A scheduler's file from the fabric's latest analysis: `topology.conf` "
        "(Slurm topology/tree), `topology.yaml` (Slurm 24.11+, tree and block), `labels.json` "
        "or `label.sh` (Kubernetes labels network.topology.nvidia.com/accelerator, block, "
        "spine, datacenter). 409 while the worker has not analysed the capture.",
        responses={(200, "text/plain"): OpenApiTypes.STR, **READ_ERRORS, 409: ERRORS[400]},
    )
    def get(self, request: Request, name: str, fmt: str) -> HttpResponse:
        try:
            body = fabric_selectors.fabric_export(name, fmt)
        except fabric_selectors.NotAnalysed as exc:
            raise Conflict(str(exc)) from exc
        kind = "application/json" if fmt.endswith(".json") else "text/plain"
        response = HttpResponse(body, content_type=f"{kind}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}-{fmt}"'
        return response


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Not ready."
    default_code = "not_ready"


class FabricPageSerializer(serializers.Serializer):
    name = serializers.CharField()
    capture = CaptureSummarySerializer(allow_null=True)
    status = serializers.ChoiceField(choices=["pending", "done", "failed"])
    summary = serializers.DictField(allow_null=True)
    findings = FabricFindingSerializer(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    page = serializers.DictField(
        allow_null=True,
        help_text="The drawing (core.fabric_layout): switches with positions, uplinks as "
        "[leaf, spine, links, speed class, style], unit chips, hosts with their rails as "
        "[switch index, port, rail, device, rate]; null until the worker has run",
    )


class FabricPageHostsSerializer(serializers.Serializer):
    unit = serializers.CharField(help_text="the unit asked for (`*`: all)")
    hosts = serializers.ListField(child=serializers.DictField())


class FabricPageApi(APIView):
    @extend_schema(
        operation_id="fabrics_page_retrieve",
        description="The fabric page's drawing. A large fabric's drawing comes folded "
        "(`page.collapsed`, `page.hosts` null): ask for a unit's hosts with `?unit=NAME` "
        "(`*`: every host) or for a host's unit with `?host=NAME`; those answer "
        "{unit, hosts}.",
        parameters=[
            OpenApiParameter("unit", str, description="a unit's hosts only"),
            OpenApiParameter("host", str, description="the hosts of this host's unit"),
        ],
        responses={
            200: PolymorphicProxySerializer(
                component_name="FabricPageAnswer",
                serializers=[FabricPageSerializer, FabricPageHostsSerializer],
                resource_type_field_name=None,
            ),
            **READ_ERRORS,
        },
    )
    def get(self, request: Request, name: str) -> Response:
        unit = request.query_params.get("unit")
        host = request.query_params.get("host")
        return Response(fabric_selectors.fabric_page_document(name, unit=unit, host=host))


class ServerRailsSerializer(serializers.Serializer):
    fabric = serializers.CharField()
    hostname = serializers.CharField(help_text="the host's name in the capture")
    hcas = FabricHcaSerializer(many=True)


class ServerFabricsApi(APIView):
    """The leaves a server's HCAs hang off, in each fabric whose latest analysis names it."""

    @extend_schema(
        operation_id="servers_fabrics_list",
        responses={200: ServerRailsSerializer(many=True), **READ_ERRORS},
    )
    def get(self, request: Request, hostname: str) -> Response:
        return Response(fabric_selectors.server_rails(hostname))
