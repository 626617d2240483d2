"""Reads of the fleet: token lookups, the filtered server list, per-server detail, SKUs and
topology classes (with the usual wiring of a SKU), and the graph elements the front end draws."""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

from django.core.cache import cache
from django.db import connection
from django.db.models import (
    Count,
    F,
    Model,
    Q,
    QuerySet,
)
from django.http import Http404
from django.utils import timezone

import topoweb.core as core_package
from topoweb.config import limits
from topoweb.core.costs import pcie_capability
from topoweb.core.export import graph_document
from topoweb.core.formats import TOPOLOGY_FORMATS, ParseError, detect_format, parse_text
from topoweb.core.formats.ibnet import IbnetCapture
from topoweb.core.formats.nvml import NvmlFactsError, read_nvml
from topoweb.core.model import NcclRun, NvbandwidthRun, P2PResult, Topology
from topoweb.core.scheduling import nvlink_domain_of, topology_conf
from topoweb.core.steptime import mixed_models_note
from topoweb.fleet import cached_tokens, statements, work
from topoweb.fleet.models import (
    LARGE_COLUMNS,
    ApiToken,
    Benchmark,
    CollectorToken,
    Server,
    Snapshot,
    TopologyClass,
    legacy_key,
)

T = TypeVar("T", CollectorToken, ApiToken)

LAST_USED_RESOLUTION = timedelta(minutes=1)

# A server's stored assessment documents (health.models.ServerHealth): the list and detail
# show only its counts and snapshot, so a row does not carry the documents (the page's is the
# largest column of all) from the database.
HEALTH_DOCUMENTS = (
    "health__acceptance",
    "health__expectations",
    "health__document",
    "health__gauges",
)


def _fields(model: type[Model]) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def _active(kind: type[T], token: str) -> T | None:
    """The token of this kind that the presented `token` opens, found and verified by the
    package's manager (`get_from_key`: usable keys only, by prefix; an API token with its
    active user; on PostgreSQL a collector token by the same rule written out, as a new
    collector's first report reads it: fleet.statements), through the cache
    (fleet.cached_tokens); None when it opens none or has expired."""
    key = legacy_key(token)

    def read() -> T | None:
        if issubclass(kind, CollectorToken) and connection.vendor == "postgresql":
            return cast(T, statements.usable_collector_token(key))
        try:
            return cast(T, kind.objects.get_from_key(key))
        except kind.DoesNotExist:
            return None

    found = cached_tokens.active_token(kind, key, read)
    return None if found is None or found.has_expired else found


def active_collector_token(token: str, mark: bool = True) -> CollectorToken | None:
    """The collector token (kept in the cache; else one query); marked used unless `mark` is
    False (the caller then marks it, with `needs_mark` and `mark_used`)."""
    found = _active(CollectorToken, token)
    if mark:
        mark_used(found)
    return found


def active_api_token(token: str, mark: bool = True) -> ApiToken | None:
    """The API token with its user (kept in the cache; else one query); marked used unless
    `mark` is False."""
    found = _active(ApiToken, token)
    if mark:
        mark_used(found)
    return found


def needs_mark(token: CollectorToken | ApiToken, now: datetime) -> bool:
    # At most one write a minute per token: a scheduler polling the API should not turn every
    # read into a write.
    return token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION


def mark_used(token: CollectorToken | ApiToken | None) -> None:
    now = timezone.now()
    if token is not None and needs_mark(token, now):
        token.last_used_at = now
        token.save(update_fields=["last_used_at"])


@dataclass(frozen=True)
class ServerFilters:
    sku: str = ""
    gpu_model: str = ""
    gpu_count: int | None = None
    has_nvlink: bool | None = None
    search: str = ""
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
    """Servers with their latest snapshot joined in: one query per page, whatever the filters.
    The health filters (health.selectors.filter_by_health) apply on top of this queryset."""
    qs = Server.objects.select_related("latest_snapshot", "topology_class", "health").defer(
        "latest_snapshot__raw_text",
        "latest_snapshot__document",
        "latest_snapshot__nvml",
        "latest_snapshot__host",
        "topology_class__document",
        *HEALTH_DOCUMENTS,
    )
    return _filtered(qs, filters)


def servers(filters: ServerFilters) -> QuerySet[Server]:
    """The servers the filters match, in their order, with nothing joined but what a filter or
    the ordering reads: for a caller that takes its own columns (the list's stored rows)."""
    return _filtered(Server.objects.all(), filters)


def _named_model(term: str) -> Q:
    """Servers whose GPUs include a model named like `term`: the priced one, or any part of a
    mixed server (Snapshot.gpu_models' names, searched as the JSON text of that list: a term
    of digits alone may also meet a count there)."""
    return Q(latest_snapshot__gpu_model__icontains=term) | Q(
        latest_snapshot__gpu_models__models__icontains=term
    )


def _filtered(qs: QuerySet[Server, Any], filters: ServerFilters) -> QuerySet[Server, Any]:
    if filters.sku:
        qs = qs.filter(sku_name__iexact=filters.sku)
    if filters.gpu_model:
        qs = qs.filter(_named_model(filters.gpu_model))
    if filters.gpu_count is not None:
        qs = qs.filter(latest_snapshot__gpu_count=filters.gpu_count)
    if filters.has_nvlink is not None:
        qs = qs.filter(latest_snapshot__has_nvlink=filters.has_nvlink)
    if filters.search:
        term = filters.search
        qs = qs.filter(
            Q(hostname__icontains=term) | Q(sku_name__icontains=term) | _named_model(term)
        )
    return qs.order_by(*_order_by(filters.ordering))


def _order_by(ordering: str) -> list[Any]:
    """The sort key, then hostname so pages stay stable; servers without a value (no snapshot
    yet, never seen) go last in both directions, on PostgreSQL and SQLite alike."""
    descending = ordering.startswith("-")
    field = _ORDER_FIELDS[ordering.removeprefix("-")]
    key = F(field).desc(nulls_last=True) if descending else F(field).asc(nulls_last=True)
    return [key] if field == "hostname" else [key, "hostname"]


def server_by_hostname(hostname: str) -> Server:
    """The server with its latest snapshot's columns and class, without their large columns
    (documents, raw text, facts: read on first use); Http404 (answered as the JSON error) when
    there is none."""
    server = (
        Server.objects.select_related("latest_snapshot", "topology_class")
        .defer(*LARGE_COLUMNS)
        .filter(hostname=hostname)
        .first()
    )
    if server is None:
        raise Http404(f"no server named {hostname!r}")
    return server


def usual_topology_class_id(sku_name: str) -> int | None:
    """The SKU's most common wiring; None without a SKU, or with a tie for first place (then
    there is no "usual" wiring to differ from)."""
    if not sku_name:
        return None
    ranked = list(
        Server.objects.filter(sku_name=sku_name, topology_class__isnull=False)
        .values("topology_class")
        .annotate(n=Count("id"))
        .order_by("-n", "topology_class")[:2]
    )
    if not ranked or (len(ranked) == 2 and ranked[0]["n"] == ranked[1]["n"]):
        return None
    return int(ranked[0]["topology_class"])


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


def topology_class_by_fingerprint(fingerprint: str, *, document: bool = True) -> TopologyClass:
    """The class with its server count; without `document`, its topology document is left in
    the database until first used (an export kept in the cache never reads it)."""
    classes = TopologyClass.objects.annotate(server_count=Count("servers"))
    if not document:
        classes = classes.defer("document")
    found = classes.filter(fingerprint=fingerprint).first()
    if found is None:
        raise Http404(f"no topology class {fingerprint!r}")
    return found


# Past this many GPUs a request never draws a graph (seconds of work): it waits for the
# worker's drawing (warm_graph, after each report).
DRAW_IN_REQUEST_UP_TO_GPUS = 64


class GraphNotDrawn(Exception):
    """The graph of a large snapshot is not drawn yet: the worker draws it after the report."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(
            f"the graph of these {snapshot.gpu_count} GPUs is drawn by the worker after each "
            "report and is not drawn yet; ask again in a moment"
        )


# The worker's drawings of a snapshot (its graph, its exports: fleet.drawings.draw_latest),
# asked for by a request that finds them missing (a cache emptied since the report, a deploy
# that changed the core): one queued per server at most (fleet.work).
DRAWING = "drawing"
DRAW_TASK = "fleet.draw"


def request_drawing(server_id: int) -> bool:
    """Queue the worker's drawing of the server's latest snapshot unless one is queued (or was
    given up); whether one was sent."""
    return work.send(DRAWING, server_id, DRAW_TASK)


def graph_elements(
    snapshot: Snapshot, topology: Topology | None = None, *, in_request: bool = True
) -> dict[str, Any]:
    """The graph of a snapshot's topology, as core.export draws it: Cytoscape elements at their
    computed positions (devices inside NUMA nodes, the recovered PCIe tree, NVLink pairs or one
    NVSwitch node per fabric), each GPU's paths to its peers, and the NIC groups.

    Drawn once per snapshot content and core version (a 576-GPU drawing takes seconds): the
    health worker draws it after each report (`warm_graph`), and requests read it from the
    cache. A miss (a cold or unreachable cache) draws it on the spot, from `topology` when the
    caller has already read the snapshot's, except in a request past
    DRAW_IN_REQUEST_UP_TO_GPUS, which queues the worker's drawing (once) and raises
    GraphNotDrawn instead."""
    key = _graph_key(snapshot)
    try:
        found = cache.get(key)
    except Exception:  # noqa: BLE001 - a cache that is down costs a drawing, never an answer
        found = None
    if found is not None:
        return cast(dict[str, Any], found)
    if in_request and snapshot.gpu_count > DRAW_IN_REQUEST_UP_TO_GPUS:
        request_drawing(snapshot.server_id)  # not drawn, or no longer kept: draw it again
        raise GraphNotDrawn(snapshot)
    topo = topology if topology is not None else snapshot.to_domain()
    return _drawn(snapshot, topo)


def _drawn(snapshot: Snapshot, topo: Topology) -> dict[str, Any]:
    """The snapshot's graph priced for its reported GPU model, the PCIe links its NVML facts
    report and its host's CPU (as its health expectations are)."""
    try:
        nvml = read_nvml(snapshot.nvml) if isinstance(snapshot.nvml, dict) else None
    except NvmlFactsError:  # the health checks name facts they cannot read
        nvml = None
    return graph_document(
        topo,
        gpu_model=snapshot.gpu_model,
        pcie=pcie_capability(nvml),
        cpu_model=snapshot.cpu_model or None,
    )


def warm_graph(snapshot: Snapshot, topology: Topology | None = None) -> None:
    """Draw a snapshot's graph and keep it for the requests that read it (worker side).
    `topology`: the snapshot's, already read by the caller (reading a 576-GPU one again
    costs about a CPU second)."""
    key = _graph_key(snapshot)
    try:
        if cache.get(key) is None:
            topo = topology if topology is not None else snapshot.to_domain()
            cache.set(key, _drawn(snapshot, topo), timeout=GRAPH_CACHE_S)
    except Exception:  # noqa: BLE001 - a cache that is down leaves requests to draw it
        return


# How long a drawn graph is kept; a snapshot's content never changes, so only space expires it.
GRAPH_CACHE_S = 7 * 24 * 3600


def _core_version() -> str:
    """Every source file of topoweb.core, hashed: a deploy that changes the drawing (or
    anything it reads) never serves an old one."""
    digest = hashlib.sha256()
    for path in sorted(Path(core_package.__file__).resolve().parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


CORE_VERSION = _core_version()


def _graph_key(snapshot: Snapshot) -> str:
    return f"graph:{CORE_VERSION}:{snapshot.pk}:{snapshot.content_sha256}"


def hostname_match(hostname: str) -> dict[str, Any]:
    """Whether a server of this name exists, and else the closest existing name (a typo such
    as `hgx-h200-a0l` for `hgx-h200-a01`), or None when nothing is close."""
    if not hostname or Server.objects.filter(hostname=hostname).exists():
        return {"hostname": hostname, "known": bool(hostname), "suggestion": None}
    names = list(Server.objects.values_list("hostname", flat=True))
    close = difflib.get_close_matches(hostname, names, n=1, cutoff=0.8)
    return {"hostname": hostname, "known": False, "suggestion": close[0] if close else None}


def upload_preview(text: str, gpu_model: str = "") -> dict[str, Any]:
    """What an upload of `text` would store, read but not stored: its kind, a one-line
    summary and, for a topology, the graph the server page will draw (for `gpu_model`, the
    person's word where the output names none). ParseError (with its line) when the text is
    none of the formats."""
    if detect_format(text) not in TOPOLOGY_FORMATS:
        limits.check_benchmark_text(text)
    else:
        limits.check_topology_text(text)
    parsed = parse_text(text)
    if isinstance(parsed, Topology):
        limits.check_topology(parsed)
        nv = sorted({lnk.link_class for lnk in parsed.gpu_links() if lnk.is_nvlink})
        source = "NCCL topology XML" if parsed.details else "nvidia-smi topo -m"
        summary = f"{source}: {len(parsed.gpus)} GPUs, {len(parsed.nics)} NICs, " + (
            f"NVLink {'/'.join(nv)}" if nv else "no NVLink"
        )
        if parsed.warnings:
            n = len(parsed.warnings)
            summary += f" ({n} reader warning{'s' if n > 1 else ''})"
        graph = graph_document(parsed, gpu_model=gpu_model or None)
        return {
            "kind": "topology",
            "summary": summary,
            "warnings": list(parsed.warnings),
            "elements": graph["elements"],
            "nic_groups": graph["nic_groups"],
        }
    if isinstance(parsed, IbnetCapture):
        raise ParseError(
            "an ibnetdiscover capture describes a fabric, not one server: upload it as a fabric "
            "(the Fabrics page or POST /api/v1/fabrics/)"
        )
    limits.check_benchmark(parsed)
    kind, summary = _benchmark_summary(parsed)
    return {"kind": kind, "summary": summary, "warnings": list(parsed.warnings), "elements": []}


def _benchmark_summary(parsed: NcclRun | NvbandwidthRun | P2PResult) -> tuple[str, str]:
    """A benchmark's kind and the one line the upload preview says of what was read."""
    if isinstance(parsed, NcclRun):
        name = " ".join(filter(None, ("nccl-tests", parsed.collective)))
        summary = f"{name}: {len(parsed.rows)} sizes"
        if parsed.avg_busbw_gbps is not None:
            summary += f", average bus bandwidth {parsed.avg_busbw_gbps:g} GB/s"
        if parsed.errors:
            summary += f", {len(parsed.errors)} error(s) reported"
        return "nccl-tests", summary
    if isinstance(parsed, NvbandwidthRun):
        # A testcase filtered down to its SUM line (`| grep SUM`) was measured too.
        done = [t.name for t in parsed.testcases if t.matrix or t.sum is not None]
        name = " ".join(filter(None, ("nvbandwidth", parsed.version)))
        summary = f"{name}: {len(done)} testcase(s) measured"
        if parsed.errors:
            summary += f", {len(parsed.errors)} error(s) reported"
        return "nvbandwidth", summary
    summary = f"p2pBandwidthLatencyTest: {len(parsed.gpus)} GPUs, matrices: " + (
        ", ".join(sorted(parsed.matrices)) or "none"
    )
    return "p2p-bandwidth-latency", summary


def fleet_topology_conf() -> str:
    """Slurm topology.conf blocks for the multi-node NVLink domains NVML reports (fabric cluster
    UUID and clique of each server's GPUs), from every server's latest snapshot."""
    domains: dict[str, list[str]] = {}
    rows = Server.objects.filter(latest_snapshot__isnull=False).values_list(
        "hostname", "latest_snapshot__nvml"
    )
    for hostname, nvml in rows:
        domain = nvlink_domain_of(nvml)
        if domain is not None:
            domains.setdefault(domain, []).append(hostname)
    return topology_conf(domains)


def models_note(snapshot: Snapshot | None) -> str:
    """Where a server's GPUs differ (Snapshot.gpu_models), what its advice says of the one
    model it priced; "" where they do not."""
    mixed = (snapshot.gpu_models if snapshot is not None else None) or {}
    models = [(str(n), int(c)) for n, c in mixed.get("models", ())]
    if snapshot is None or not models:
        return ""
    return mixed_models_note(models, snapshot.gpu_model)
