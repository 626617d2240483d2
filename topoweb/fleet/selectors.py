"""Reads of the fleet: token lookups, the filtered server list, per-server detail, SKUs and
topology classes, and the graph elements the front end draws."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, F, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from topoweb.analysis.models import Analysis
from topoweb.core.analysis import COST_MODEL_VERSION
from topoweb.core.export import cytoscape_elements
from topoweb.core.formats import parse_text
from topoweb.core.model import NcclRun, Topology
from topoweb.fleet.models import (
    ApiToken,
    Benchmark,
    CollectorToken,
    Server,
    Snapshot,
    TopologyClass,
)
from topoweb.health.selectors import filter_by_health, health_findings

LAST_USED_RESOLUTION = timedelta(minutes=1)


def _hash(token: str) -> str:
    from topoweb.fleet.services import hash_token

    return hash_token(token)


def active_collector_token(token: str) -> CollectorToken | None:
    found = CollectorToken.objects.filter(
        token_sha256=_hash(token), revoked_at__isnull=True
    ).first()
    _mark_used(found)
    return found


def active_api_token(token: str) -> ApiToken | None:
    found = (
        ApiToken.objects.select_related("user")
        .filter(token_sha256=_hash(token), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    _mark_used(found)
    return found


def _mark_used(token: CollectorToken | ApiToken | None) -> None:
    # At most one write a minute per token: a scheduler polling the API should not turn every
    # read into a write.
    now = timezone.now()
    if token is not None and (
        token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION
    ):
        token.last_used_at = now
        token.save(update_fields=["last_used_at"])


@dataclass(frozen=True)
class ServerFilters:
    sku: str = ""
    gpu_model: str = ""
    gpu_count: int | None = None
    has_nvlink: bool | None = None
    health: str = ""  # ok, warning or unknown
    search: str = ""
    finding: str = ""  # a core.health finding kind
    severity: str = ""  # critical, warning or info
    no_critical: bool = False  # evaluated and free of critical findings: safe to schedule on
    ordering: str = "hostname"  # one of ORDERINGS


# Sort keys of the server list and the columns they read; "-" in front sorts descending.
_ORDER_FIELDS = {
    "hostname": "hostname",
    "last_seen_at": "last_seen_at",
    "gpu_count": "latest_snapshot__gpu_count",
    "sku": "sku_name",
}
ORDERINGS = tuple(f"{sign}{key}" for key in _ORDER_FIELDS for sign in ("", "-"))


def server_list(filters: ServerFilters) -> QuerySet[Server]:
    """Servers with their latest snapshot joined in: one query per page, whatever the filters."""
    qs = Server.objects.select_related("latest_snapshot", "topology_class", "health").defer(
        "latest_snapshot__raw_text",
        "latest_snapshot__document",
        "latest_snapshot__nvml",
        "latest_snapshot__host",
        "topology_class__document",
        "health__acceptance",
        "health__expectations",
    )
    if filters.sku:
        qs = qs.filter(sku_name__iexact=filters.sku)
    if filters.gpu_model:
        qs = qs.filter(latest_snapshot__gpu_model__icontains=filters.gpu_model)
    if filters.gpu_count is not None:
        qs = qs.filter(latest_snapshot__gpu_count=filters.gpu_count)
    if filters.has_nvlink is not None:
        qs = qs.filter(latest_snapshot__has_nvlink=filters.has_nvlink)
    if filters.health:
        qs = qs.filter(_HEALTH_STATES[filters.health])
    if filters.search:
        term = filters.search
        qs = qs.filter(
            Q(hostname__icontains=term)
            | Q(sku_name__icontains=term)
            | Q(latest_snapshot__gpu_model__icontains=term)
        )
    qs = filter_by_health(
        qs, finding=filters.finding, severity=filters.severity, no_critical=filters.no_critical
    )
    return qs.order_by(*_order_by(filters.ordering))


def _order_by(ordering: str) -> list[Any]:
    """The sort key, then hostname so pages stay stable; servers without a value (no snapshot
    yet, never seen) go last in both directions, on PostgreSQL and SQLite alike."""
    descending = ordering.startswith("-")
    field = _ORDER_FIELDS[ordering.removeprefix("-")]
    key = F(field).desc(nulls_last=True) if descending else F(field).asc(nulls_last=True)
    return [key] if field == "hostname" else [key, "hostname"]


HEALTH_STATES = ("ok", "warning", "critical", "unknown")

# The list filter and `server_health` must agree: a server is unknown without a snapshot,
# critical with a critical finding, warning with a warning finding or a wiring that differs
# from its SKU's (known at ingest, before the health checks ran), and ok otherwise.
_NOT_CRITICAL = Q(health__isnull=True) | Q(health__critical_count=0)
_HEALTH_STATES = {
    "unknown": Q(latest_snapshot__isnull=True),
    "critical": Q(health__critical_count__gt=0),
    "warning": Q(latest_snapshot__isnull=False)
    & _NOT_CRITICAL
    & (Q(health__warning_count__gt=0) | Q(differs_from_sku=True)),
    "ok": Q(latest_snapshot__isnull=False, differs_from_sku=False)
    & (Q(health__isnull=True) | Q(health__critical_count=0, health__warning_count=0)),
}


def server_health(server: Server) -> str:
    if server.latest_snapshot_id is None:
        return "unknown"
    health = getattr(server, "health", None)
    if health is not None and health.critical_count:
        return "critical"
    if (health is not None and health.warning_count) or server.differs_from_sku:
        return "warning"
    return "ok"


def server_findings(server: Server) -> list[dict[str, Any]]:
    """What is worth a look on this server: the health checks' findings once they ran, and
    until then what ingest already knows (a wiring that differs from the SKU's)."""
    if getattr(server, "health", None) is not None:
        return [f | {"code": f["kind"]} for f in health_findings(server)]
    if not server.differs_from_sku:
        return []
    return [
        {
            "code": "topology-differs-from-sku",
            "severity": "warning",
            "message": f"wired differently from the usual topology of SKU {server.sku_name!r}",
        }
    ]


def findings_count(server: Server) -> int:
    """The list's count, from columns already joined in (no query per row)."""
    health = getattr(server, "health", None)
    if health is None:
        return int(server.differs_from_sku)
    return int(health.critical_count + health.warning_count)


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


def graph_elements(snapshot: Snapshot) -> dict[str, list[dict[str, Any]]]:
    """Cytoscape elements of a snapshot's topology, as core.export draws it: devices inside
    NUMA nodes, the recovered PCIe tree, NVLink pairs or one NVSwitch node per fabric."""
    return {"elements": cytoscape_elements(snapshot.to_domain())}


def upload_preview(text: str) -> dict[str, Any]:
    """What an upload of `text` would store, read but not stored: its kind, a one-line
    summary and, for a topology, the graph the server page will draw. ParseError (with its
    line) when the text is none of the formats."""
    parsed = parse_text(text)
    if isinstance(parsed, Topology):
        nv = sorted({lnk.link_class for lnk in parsed.gpu_links() if lnk.is_nvlink})
        summary = f"nvidia-smi topo -m: {len(parsed.gpus)} GPUs, {len(parsed.nics)} NICs, " + (
            f"NVLink {'/'.join(nv)}" if nv else "no NVLink"
        )
        if parsed.warnings:
            n = len(parsed.warnings)
            summary += f" ({n} reader warning{'s' if n > 1 else ''})"
        return {"kind": "topology", "summary": summary, "elements": cytoscape_elements(parsed)}
    if isinstance(parsed, NcclRun):
        summary = f"nccl-tests {parsed.collective or ''}: {len(parsed.rows)} sizes"
        if parsed.avg_busbw_gbps is not None:
            summary += f", average bus bandwidth {parsed.avg_busbw_gbps:g} GB/s"
        if parsed.errors:
            summary += f", {len(parsed.errors)} error(s) reported"
        return {"kind": "nccl-tests", "summary": summary, "elements": []}
    summary = f"p2pBandwidthLatencyTest: {len(parsed.gpus)} GPUs, matrices: " + (
        ", ".join(sorted(parsed.matrices)) or "none"
    )
    return {"kind": "p2p-bandwidth-latency", "summary": summary, "elements": []}
