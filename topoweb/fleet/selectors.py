"""Reads of the fleet: token lookups, the filtered server list, per-server detail, SKUs and
topology classes, and the graph elements the front end draws."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from topoweb.analysis.models import Analysis
from topoweb.analysis.services import COST_MODEL_VERSION
from topoweb.fleet.models import (
    ApiToken,
    Benchmark,
    CollectorToken,
    Server,
    Snapshot,
    TopologyClass,
)


def _hash(token: str) -> str:
    from topoweb.fleet.services import hash_token

    return hash_token(token)


def active_collector_token(token: str) -> CollectorToken | None:
    found = CollectorToken.objects.filter(
        token_sha256=_hash(token), revoked_at__isnull=True
    ).first()
    if found is not None:
        found.last_used_at = timezone.now()
        found.save(update_fields=["last_used_at"])
    return found


def active_api_token(token: str) -> ApiToken | None:
    found = (
        ApiToken.objects.select_related("user")
        .filter(token_sha256=_hash(token), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if found is not None:
        found.last_used_at = timezone.now()
        found.save(update_fields=["last_used_at"])
    return found


@dataclass(frozen=True)
class ServerFilters:
    sku: str = ""
    gpu_model: str = ""
    gpu_count: int | None = None
    has_nvlink: bool | None = None
    health: str = ""  # ok, warning or unknown
    search: str = ""


def server_list(filters: ServerFilters) -> QuerySet[Server]:
    """Servers with their latest snapshot joined in: one query per page, whatever the filters."""
    qs = Server.objects.select_related("latest_snapshot", "topology_class").defer(
        "latest_snapshot__raw_text",
        "latest_snapshot__document",
        "latest_snapshot__nvml",
        "latest_snapshot__host",
        "topology_class__document",
    )
    if filters.sku:
        qs = qs.filter(sku_name__iexact=filters.sku)
    if filters.gpu_model:
        qs = qs.filter(latest_snapshot__gpu_model__icontains=filters.gpu_model)
    if filters.gpu_count is not None:
        qs = qs.filter(latest_snapshot__gpu_count=filters.gpu_count)
    if filters.has_nvlink is not None:
        qs = qs.filter(latest_snapshot__has_nvlink=filters.has_nvlink)
    if filters.health == "unknown":
        qs = qs.filter(latest_snapshot__isnull=True)
    elif filters.health == "warning":
        qs = qs.filter(latest_snapshot__isnull=False, differs_from_sku=True)
    elif filters.health == "ok":
        qs = qs.filter(latest_snapshot__isnull=False, differs_from_sku=False)
    if filters.search:
        term = filters.search
        qs = qs.filter(
            Q(hostname__icontains=term)
            | Q(sku_name__icontains=term)
            | Q(latest_snapshot__gpu_model__icontains=term)
        )
    return qs.order_by("hostname")


def server_health(server: Server) -> str:
    if server.latest_snapshot_id is None:
        return "unknown"
    return "warning" if server.differs_from_sku else "ok"


def server_findings(server: Server) -> list[dict[str, Any]]:
    """What is worth a look on this server. The health checks will add to this list."""
    findings: list[dict[str, Any]] = []
    if server.differs_from_sku:
        findings.append(
            {
                "code": "topology-differs-from-sku",
                "severity": "warning",
                "message": f"wired differently from the usual topology of SKU {server.sku_name!r}",
            }
        )
    return findings


def server_by_hostname(hostname: str) -> Server:
    """The server for a detail page; Http404 (answered as the JSON error) when there is none."""
    server = (
        Server.objects.select_related("latest_snapshot", "topology_class")
        .filter(hostname=hostname)
        .first()
    )
    if server is None:
        raise Http404(f"no server named {hostname!r}")
    return server


def current_analysis(topology_class_id: int | None) -> Analysis | None:
    """The analysis at the current cost-model version, or failing that the newest older one."""
    if topology_class_id is None:
        return None
    analyses = Analysis.objects.filter(topology_class_id=topology_class_id)
    return (
        analyses.filter(cost_model_version=COST_MODEL_VERSION).first()
        or analyses.order_by("-cost_model_version").first()
    )


def snapshot_history(server: Server) -> QuerySet[Snapshot]:
    return (
        Snapshot.objects.filter(server=server)
        .select_related("topology_class")
        .defer("raw_text", "document", "nvml", "host", "topology_class__document")
        .order_by("-captured_at", "-id")
    )


def snapshot_by_id(snapshot_id: int) -> Snapshot:
    snapshot = (
        Snapshot.objects.select_related("server", "topology_class").filter(pk=snapshot_id).first()
    )
    if snapshot is None:
        raise Http404(f"no snapshot {snapshot_id}")
    return snapshot


def benchmark_list(*, hostname: str = "", kind: str = "") -> QuerySet[Benchmark]:
    qs = Benchmark.objects.select_related("server").defer("raw_text", "document")
    if hostname:
        qs = qs.filter(server__hostname=hostname)
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("-captured_at", "-id")


def benchmark_by_id(benchmark_id: int) -> Benchmark:
    benchmark = Benchmark.objects.select_related("server").filter(pk=benchmark_id).first()
    if benchmark is None:
        raise Http404(f"no benchmark {benchmark_id}")
    return benchmark


def sku_list() -> QuerySet[Server, dict[str, Any]]:
    """Each SKU name with its server count and how many distinct wirings its servers show."""
    return (
        Server.objects.exclude(sku_name="")
        .values("sku_name")
        .annotate(
            server_count=Count("id"),
            topology_class_count=Count("topology_class", distinct=True),
            differing_count=Count("id", filter=Q(differs_from_sku=True)),
        )
        .order_by("sku_name")
    )


def sku_members(sku_name: str) -> QuerySet[Server]:
    members = server_list(ServerFilters(sku=sku_name))
    if not members.exists():
        raise Http404(f"no SKU named {sku_name!r}")
    return members


def topology_class_list() -> QuerySet[TopologyClass]:
    return (
        TopologyClass.objects.defer("document")
        .annotate(server_count=Count("servers"))
        .order_by("sku_name", "id")
    )


def topology_class_by_fingerprint(fingerprint: str) -> TopologyClass:
    found = (
        TopologyClass.objects.annotate(server_count=Count("servers"))
        .filter(fingerprint=fingerprint)
        .first()
    )
    if found is None:
        raise Http404(f"no topology class {fingerprint!r}")
    return found


def graph_elements(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Cytoscape elements for a topology document: one node per device, one edge per link
    except the farthest (SYS) ones, which every pair has and which would hide the structure.

    Stand-in until core.export offers the same; the API calls only this function."""
    nodes = [
        {
            "data": {
                "id": d["id"],
                "label": d.get("nic_name") or d["id"],
                "kind": d["kind"],
                "index": d["index"],
                "numa_affinity": d.get("numa_affinity"),
                "cpu_affinity": d.get("cpu_affinity"),
            }
        }
        for d in document.get("devices", [])
    ]
    edges = [
        {
            "data": {
                "id": f"{link['a']}--{link['b']}",
                "source": link["a"],
                "target": link["b"],
                "link_class": link["class"],
                "nvlinks": link.get("nvlinks", 0),
            }
        }
        for link in document.get("links", [])
        if link["class"] != "SYS"
    ]
    return {"nodes": nodes, "edges": edges}
