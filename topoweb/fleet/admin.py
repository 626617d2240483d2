"""Admin pages of the fleet, for operators (token revocation, labels)."""

from typing import Any

from django.conf import settings
from django.contrib import admin

from topoweb.fleet import retention
from topoweb.fleet.models import (
    ApiToken,
    AuditEvent,
    Benchmark,
    CollectorToken,
    Server,
    Snapshot,
    TopologyClass,
)


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    list_display = ("hostname", "sku_name", "differs_from_sku", "last_seen_at")
    search_fields = ("hostname", "sku_name")
    raw_id_fields = ("latest_snapshot", "topology_class")


@admin.register(Snapshot)
class SnapshotAdmin(admin.ModelAdmin):
    list_display = ("server", "captured_at", "source", "gpu_count", "gpu_model", "nvlink_summary")
    raw_id_fields = ("server", "topology_class", "uploaded_by")
    change_list_template = "admin/fleet/snapshot/change_list.html"  # with the retention counts

    def changelist_view(self, request: Any, extra_context: dict[str, Any] | None = None) -> Any:
        context = {
            **(extra_context or {}),
            "retention": retention.retention_counts(),
            "keep_newest": settings.TOPOWEB_KEEP_SNAPSHOTS,
            "last_prune": retention.last_prune(),
        }
        return super().changelist_view(request, extra_context=context)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit trail, read only: written by the service, never edited."""

    list_display = ("at", "kind", "actor", "address", "subject")
    list_filter = ("kind",)
    search_fields = ("actor", "subject", "address")
    date_hierarchy = "at"

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Benchmark)
class BenchmarkAdmin(admin.ModelAdmin):
    list_display = ("server", "kind", "captured_at", "collective", "avg_busbw_gbps")
    raw_id_fields = ("server", "snapshot", "uploaded_by")


@admin.register(TopologyClass)
class TopologyClassAdmin(admin.ModelAdmin):
    list_display = ("fingerprint", "sku_name", "gpu_model", "gpu_count", "nvlink_summary")


@admin.register(CollectorToken)
class CollectorTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "hostname", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("token_sha256", "prefix", "created_at", "last_used_at")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "scope", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("token_sha256", "prefix", "created_at", "last_used_at")
