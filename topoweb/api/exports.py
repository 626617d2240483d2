"""Exports as files: NCCL topology XML, Slurm gres.conf and topology.conf, Kubernetes labels,
per server, per topology class and for the fleet."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from topoweb.config.api import (
    READ_ERRORS,
)
from topoweb.core.ecosystem import Export
from topoweb.fleet import selectors

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
