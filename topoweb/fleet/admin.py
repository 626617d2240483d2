"""Admin pages of the fleet, for operators (tokens made and revoked, labels)."""

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib import admin
from rest_framework_api_key.admin import APIKeyModelAdmin
from rest_framework_api_key.models import APIKey

from topoweb.fleet import changes, retention
from topoweb.fleet.models import (
    ApiToken,
    AuditEvent,
    Benchmark,
    CollectorToken,
    Server,
    Snapshot,
    TopologyClass,
)


def _servers_of(objects: Iterable[Any]) -> list[int]:
    """The servers whose stored documents show these rows (a server, or a row of one, or a
    topology class: its servers)."""
    ids: list[int] = []
    for obj in objects:
        if isinstance(obj, Server):
            ids.append(obj.pk)
        elif isinstance(obj, TopologyClass):
            ids += obj.servers.values_list("pk", flat=True)
        else:
            ids.append(obj.server_id)
    return ids


class DocumentsFollow(admin.ModelAdmin):
    """Staff's edits and deletions of rows a server's stored documents show: the documents
    are written again in the same transaction (fleet.changes)."""

    def save_model(self, request: Any, obj: Any, form: Any, change: bool) -> None:
        if obj.pk is not None:
            changes.lock_servers(_servers_of([obj]))  # before the row (fleet.changes)
        super().save_model(request, obj, form, change)
        changes.servers_changed(_servers_of([obj]))

    def delete_model(self, request: Any, obj: Any) -> None:
        ids = _servers_of([obj])
        changes.lock_servers(ids)
        super().delete_model(request, obj)
        changes.servers_changed(ids)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        ids = _servers_of(queryset)
        changes.lock_servers(ids)
        super().delete_queryset(request, queryset)
        changes.servers_changed(ids)


@admin.register(Server)
class ServerAdmin(DocumentsFollow):
    list_display = ("hostname", "sku_name", "differs_from_sku", "last_seen_at")
    search_fields = ("hostname", "sku_name")
    raw_id_fields = ("latest_snapshot", "topology_class")


@admin.register(Snapshot)
class SnapshotAdmin(DocumentsFollow):
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
class BenchmarkAdmin(DocumentsFollow):
    list_display = ("server", "kind", "captured_at", "collective", "avg_busbw_gbps")
    raw_id_fields = ("server", "snapshot", "uploaded_by")


@admin.register(TopologyClass)
class TopologyClassAdmin(DocumentsFollow):
    list_display = ("fingerprint", "sku_name", "gpu_model", "gpu_count", "nvlink_summary")


# The package's own APIKey model is not used here: its page would make keys nothing accepts.
admin.site.unregister(APIKey)


# The package types its admin's tuples by their length: ours are longer (type: ignore).
class _TokenAdmin(APIKeyModelAdmin):
    """The package's page of keys (made here, the plain key shown once; revoked or given an
    expiry here), with the fleet's columns."""

    list_filter = ("revoked", "created")  # type: ignore[assignment]

    def get_readonly_fields(self, request: Any, obj: Any = None) -> tuple[str, ...]:
        return (*super().get_readonly_fields(request, obj), "created", "last_used_at")


@admin.register(CollectorToken)
class CollectorTokenAdmin(_TokenAdmin):
    list_display = ("prefix", "hostname", "created", "last_used_at", "expiry_date", "revoked")
    search_fields = ("prefix", "hostname", "name")  # type: ignore[assignment]


@admin.register(ApiToken)
class ApiTokenAdmin(_TokenAdmin):
    list_display = ("prefix", "user", "scope", "created", "last_used_at", "expiry_date", "revoked")  # type: ignore[assignment]
    search_fields = ("prefix", "user__username", "name")  # type: ignore[assignment]
    raw_id_fields = ("user",)
