"""Exports as files: NCCL topology XML, Slurm gres.conf and topology.conf, Kubernetes labels,
per server, per topology class and for the fleet."""

from __future__ import annotations

from django.http import HttpResponse, StreamingHttpResponse
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from topoweb.config.api import ERRORS, READ_ERRORS
from topoweb.core.ecosystem import Export
from topoweb.fleet import access, drawings, selectors
from topoweb.fleet.models import AuditEvent

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
        return _file_response(drawings.server_export(selectors.server_by_hostname(hostname), fmt))


class TopologyClassExportApi(APIView):
    @extend_schema(
        operation_id="topology_classes_export_retrieve",
        description=EXPORT_DOC,
        responses={(200, "text/plain"): OpenApiTypes.STR, **READ_ERRORS},
    )
    def get(self, request: Request, fingerprint: str, fmt: str) -> HttpResponse:
        topology_class = selectors.topology_class_by_fingerprint(fingerprint, document=False)
        return _file_response(drawings.topology_class_export(topology_class, fmt))


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


class AuditExportApi(APIView):
    """The audit trail as JSON lines, oldest first: staff only (a staff member's session or
    API token). `since` (ISO 8601) and `kind` narrow it."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(
        operation_id="audit_export",
        parameters=[
            OpenApiParameter("since", OpenApiTypes.DATETIME, required=False),
            OpenApiParameter("kind", str, required=False, enum=list(AuditEvent.Kind.values)),
        ],
        responses={(200, "application/jsonl"): OpenApiTypes.STR, **ERRORS},
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        since_text = request.query_params.get("since", "")
        since = parse_datetime(since_text) if since_text else None
        if since_text and (since is None or since.tzinfo is None):
            raise exceptions.ValidationError(
                {"since": ["An ISO 8601 time with its zone, e.g. 2026-12-01T00:00:00Z."]}
            )
        kind = request.query_params.get("kind", "")
        if kind and kind not in AuditEvent.Kind.values:
            raise exceptions.ValidationError({"kind": [f"One of {AuditEvent.Kind.values}."]})
        response = StreamingHttpResponse(
            access.export_lines(since, kind), content_type="application/jsonl"
        )
        response["Content-Disposition"] = 'attachment; filename="topoweb-audit.jsonl"'
        return response
