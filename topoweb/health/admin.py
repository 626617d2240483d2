"""Admin pages of the health checks: staff edit SKU expectations; evaluations and findings are
edited rarely, and a server's stored documents follow (fleet.admin.DocumentsFollow)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.models import User
from django.http import HttpRequest

from topoweb.fleet.admin import DocumentsFollow
from topoweb.health.models import HealthFinding, ServerHealth, SkuExpectation
from topoweb.health.services import save_expectation


@admin.register(SkuExpectation)
class SkuExpectationAdmin(admin.ModelAdmin):
    list_display = ("sku_name", "version", "bandwidth_ratio", "sku_median_ratio", "updated_at")
    readonly_fields = ("version", "updated_at", "updated_by")
    search_fields = ("sku_name",)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        judged = set(form.changed_data) - {"notes"}
        user = request.user if isinstance(request.user, User) else None
        save_expectation(obj, changed=change and bool(judged), user=user)


@admin.register(ServerHealth)
class ServerHealthAdmin(DocumentsFollow):
    list_display = ("server", "computed_at", "critical_count", "warning_count")
    raw_id_fields = ("server", "snapshot")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(HealthFinding)
class HealthFindingAdmin(DocumentsFollow):
    list_display = ("server", "kind", "severity", "message")
    list_filter = ("kind", "severity")
    raw_id_fields = ("server",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
