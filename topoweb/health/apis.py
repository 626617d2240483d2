"""JSON API of the health checks: a server's acceptance report and a SKU's distribution."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from topoweb.config.api import READ_ERRORS
from topoweb.health import selectors
from topoweb.health.serializers import AcceptanceSerializer, SkuAcceptanceSerializer


class ServerAcceptanceApi(APIView):
    @extend_schema(
        operation_id="servers_acceptance", responses={200: AcceptanceSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, hostname: str) -> Response:
        # Read only: whatever made it stale queued its re-evaluation.
        return Response(selectors.acceptance_document(selectors.server_with_health(hostname)))


class SkuAcceptanceApi(APIView):
    @extend_schema(
        operation_id="skus_acceptance", responses={200: SkuAcceptanceSerializer, **READ_ERRORS}
    )
    def get(self, request: Request, sku_name: str) -> Response:
        return Response(selectors.sku_acceptance(sku_name))
