"""Reads of the health checks: a server's inputs (previous snapshot, SKU reference, benchmarks,
expectations, sibling figures), its stored findings and reports, the fleet-list filters and
the health badge (one rule for the badge and the filter)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import orjson
from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Sum
from django.http import Http404

from topoweb.analysis.selectors import benchmark_set_identity
from topoweb.config.answers import answer_once
from topoweb.config.metrics import GaugeFamily
from topoweb.core.analysis import COST_MODEL_VERSION
from topoweb.core.costs import options_from_facts
from topoweb.core.formats.nvml import NvmlFacts, NvmlFactsError, read_host, read_nvml
from topoweb.core.health import (
    COLLECTOR_SILENT,
    TOPOLOGY_DRIFT,
    Figures,
    Finding,
    Network,
    Thresholds,
    measured_figures,
    sku_distribution,
)
from topoweb.core.health.groups import group_documents
from topoweb.core.model import NcclRun, P2PResult, Topology
from topoweb.fleet.models import LARGE_COLUMNS, Benchmark, Server, Snapshot, Source, TopologyClass
from topoweb.fleet.selectors import usual_topology_class_id
from topoweb.health.assessment import ASSESSMENT_KEYS
from topoweb.health.models import HealthFinding, ServerHealth, SkuExpectation

# A SKU median means something only with a few servers behind it.
MIN_SIBLINGS_FOR_MEDIAN = 2
# The newest runs of each kind that count as a server's current measurements.
_BENCHMARKS_PER_SERVER = 20


@dataclass(frozen=True)
class HealthInputs:
    """Everything core.health.check_health reads for one server, loaded from the database."""

    topology: Topology
    previous: Topology | None
    sku_reference: Topology | None
    fingerprint: str | None
    sku_fingerprint: str | None
    nvml: NvmlFacts | None
    p2p: P2PResult | None
    nccl_runs: tuple[NcclRun, ...]
    # The RDMA NICs the collector reported (count and rate), for multi-node runs' expectation.
    network: Network | None = None
    # The host's CPU model as the collector read it (Snapshot.cpu_model): the socket link.
    cpu_model: str | None = None
    # Stored facts that could not be read (stored before ingest checked their shape): the
    # server is judged on everything else, and the acceptance report says what was left out.
    unread_facts: tuple[str, ...] = ()


def usual_topology_class(sku_name: str) -> TopologyClass | None:
    """The SKU's most common wiring (fleet.selectors.usual_topology_class_id), loaded."""
    usual_id = usual_topology_class_id(sku_name)
    return TopologyClass.objects.get(pk=usual_id) if usual_id is not None else None


def current_benchmarks(
    benchmarks: list[Benchmark],
) -> tuple[P2PResult | None, tuple[NcclRun, ...]]:
    """The newest p2p result, and the newest nccl-tests run of each collective (newest first in)."""
    p2p: P2PResult | None = None
    runs: dict[str | None, NcclRun] = {}
    for b in benchmarks:
        parsed = b.to_domain()
        if isinstance(parsed, P2PResult):
            p2p = p2p or parsed
        elif parsed.collective not in runs:
            runs[parsed.collective] = parsed
    return p2p, tuple(runs.values())


def _newest_benchmarks(server_ids: list[int]) -> dict[int, list[Benchmark]]:
    by_server: dict[int, list[Benchmark]] = {sid: [] for sid in server_ids}
    # The parsed documents are read, never the raw text (tens of kilobytes a run).
    runs = Benchmark.objects.filter(server_id__in=server_ids).defer("raw_text")
    for b in runs.order_by("-captured_at", "-id"):
        if len(by_server[b.server_id]) < _BENCHMARKS_PER_SERVER:
            by_server[b.server_id].append(b)
    return by_server


def health_inputs(server: Server) -> HealthInputs | None:
    """The inputs of a server's evaluation; None before its first topology snapshot."""
    snapshot = server.latest_snapshot
    if snapshot is None:
        return None
    previous = (
        Snapshot.objects.filter(server=server, captured_at__lte=snapshot.captured_at)
        .exclude(pk=snapshot.pk)
        .order_by("-captured_at", "-id")
        .first()
    )
    usual = usual_topology_class(server.sku_name)
    differs = usual is not None and usual.pk != snapshot.topology_class_id
    p2p, runs = current_benchmarks(_newest_benchmarks([server.pk])[server.pk])
    nvml: NvmlFacts | None = None
    unread: tuple[str, ...] = ()
    try:
        nvml = read_nvml(snapshot.nvml) if snapshot.nvml is not None else None
    except NvmlFactsError as exc:
        unread = (f"NVML facts not read: {exc}",)
    # Host facts are descriptive: read_host takes what it can and leaves the rest unknown.
    facts = options_from_facts(None, read_host(snapshot.host))
    network = Network(facts.get("nics_per_node"), facts.get("nic_gbits")) if facts else None
    return HealthInputs(
        topology=snapshot.to_domain(),
        previous=previous.to_domain() if previous is not None else None,
        sku_reference=usual.to_domain() if differs and usual is not None else None,
        fingerprint=snapshot.topology_class.fingerprint,
        sku_fingerprint=usual.fingerprint if usual is not None else None,
        nvml=nvml,
        p2p=p2p,
        nccl_runs=runs,
        network=network,
        cpu_model=snapshot.cpu_model or None,
        unread_facts=unread,
    )


def sku_expectation(sku_name: str) -> SkuExpectation | None:
    if not sku_name:
        return None
    return SkuExpectation.objects.filter(sku_name=sku_name).first()


def _sku_state(sku_name: str) -> tuple[Any, ...]:
    """What changes whenever a SKU's member figures can: who its members are (their count,
    the sum of their ids, and the newest snapshot among them: a server joins a SKU with a new
    snapshot) and which benchmarks they hold (benchmark_set_identity)."""
    members = Server.objects.filter(sku_name=sku_name).aggregate(
        count=Count("id"), ids=Sum("id"), newest=Max("latest_snapshot_id")
    )
    runs = Benchmark.objects.filter(server__sku_name=sku_name).aggregate(
        identity=benchmark_set_identity()
    )
    return (*members.values(), runs["identity"])


def sku_figures(sku_name: str, thresholds: Thresholds) -> dict[str, Figures]:
    """Each SKU member's measured figures by hostname (members that measured nothing left
    out): two aggregate queries while the SKU's members and benchmarks stay the same."""
    if not sku_name:
        return {}
    # Kept per state of the SKU (_sku_state) and thresholds: evaluating one server reads its
    # siblings' figures, and reading every member's runs each time would make an evaluation
    # cost in proportion to its SKU.
    key = ("sku figures", sku_name, thresholds, _sku_state(sku_name))
    return dict(answer_once(key, lambda: _sku_figures(sku_name, thresholds)))


def _sku_figures(sku_name: str, thresholds: Thresholds) -> dict[str, Figures]:
    members = dict(Server.objects.filter(sku_name=sku_name).values_list("pk", "hostname"))
    out = {}
    for server_id, benchmarks in _newest_benchmarks(list(members)).items():
        p2p, runs = current_benchmarks(benchmarks)
        figures = measured_figures(p2p, runs, thresholds)
        if figures.p2p_gbps or figures.busbw_gbps:
            out[members[server_id]] = figures
    return out


def server_with_health(hostname: str) -> Server:
    server = (
        Server.objects.select_related("latest_snapshot", "topology_class", "health")
        .defer(*LARGE_COLUMNS, *(f"health__{c}" for c in LARGE_HEALTH_COLUMNS))
        .filter(hostname=hostname)
        .first()
    )
    if server is None:
        raise Http404(f"no server named {hostname!r}")
    return server


# A server's stored health row without its large columns (the assessment document, the
# expectations of every pair: megabytes at 576 GPUs), read only by those who serve them.
LARGE_HEALTH_COLUMNS = ("document", "expectations", "gauges")


def stored_health(server: Server) -> ServerHealth | None:
    return ServerHealth.objects.filter(server=server).defer(*LARGE_HEALTH_COLUMNS).first()


def health_findings(server: Server) -> list[dict[str, Any]]:
    """The server's stored findings, most severe first (as core.health ordered them)."""
    return [f.to_document() for f in HealthFinding.objects.filter(server=server).order_by("id")]


def is_stale(server: Server, health: ServerHealth, expectation_version: int | None) -> bool:
    """Whether a stored assessment is older than what it depends on: the server has a newer
    snapshot, an input changed since it was computed (a run, a sibling's figures, the class
    analysis: `requested_at`, its evaluation queued), the SKU's expectations or the cost
    model changed. The stored one is served meanwhile, marked `stale`."""
    return (
        health.snapshot_id != server.latest_snapshot_id
        or (health.requested_at is not None and health.requested_at > health.computed_at)
        or health.expectation_version != expectation_version
        or health.cost_model_version != COST_MODEL_VERSION
    )


def acceptance_document(server: Server) -> dict[str, Any]:
    """The acceptance report as last computed, read only: `stale` is true when the server has
    a newer snapshot or its SKU's expectations changed since (is_stale: its evaluation is
    queued by whatever changed), and a server never evaluated gets a "pending" report of the
    same shape. Http404 for a server with no topology yet."""
    if server.latest_snapshot_id is None:
        raise Http404(f"server {server.hostname!r} has no topology snapshot yet")
    health = stored_health(server)
    row = sku_expectation(server.sku_name)
    version = row.version if row is not None else None
    if health is None:
        return {
            "hostname": server.hostname,
            "sku": server.sku_name,
            "verdict": "pending",
            "reasons": ["not evaluated yet: the evaluation is queued"],
            "basis": "",
            "thresholds": (row.thresholds() if row is not None else Thresholds()).to_document(),
            "rows": [],
            "not_measured": [],
            "findings": [],
            "groups": [],
            "summary": {
                "critical": 0,
                "warning": 0,
                "info": 0,
                "compared": 0,
                "below": 0,
                "not_measured": 0,
            },
            "expectation_version": version,
            "computed_at": None,
            "stale": True,
        }
    return dict(health.acceptance) | {
        "groups": group_documents(health.acceptance.get("findings") or []),
        "computed_at": health.computed_at.isoformat(),
        "stale": is_stale(server, health, version),
    }


PENDING = "not assessed yet: the worker computes it after each report"


def assessment(server: Server) -> tuple[str, bool, bool]:
    """The server's stored assessment document (health.assessment.ASSESSMENT_KEYS) as JSON
    text, never decoded here; whether it is stale (is_stale); whether its findings judge the
    current snapshot. Before the first assessment: a pending document of the same keys, with
    what ingest already knows as findings."""
    health = (
        ServerHealth.objects.filter(server=server)
        .defer("acceptance", "expectations", "gauges")
        .first()
    )
    if health is not None:
        server.health = health  # the summary's badge reads it: no second query of the row
    if health is None or health.document in ("", "{}"):
        pending: dict[str, Any] = dict.fromkeys(ASSESSMENT_KEYS)
        known = _ingest_findings(server.differs_from_sku, server.sku_name)
        pending |= {
            "findings": known,
            "groups": group_documents(known),
            "reader_warnings": [],
            "best_layouts": [],
            "recommendations": {},
            "step_assumptions": "",
            "plot": {"series": [], "note": PENDING if server.latest_snapshot_id else ""},
            # A host known only by its benchmarks has nothing to assess until a topology comes.
            "left_out": {"assessment": PENDING} if server.latest_snapshot_id else {},
        }
        return orjson.dumps(pending).decode(), True, False
    row = sku_expectation(server.sku_name)
    stale = is_stale(server, health, row.version if row is not None else None)
    return health.document, stale, health.snapshot_id == server.latest_snapshot_id


def stored_matrix(server: Server) -> dict[str, Any] | None:
    """The matrix of the server's stored assessment (None before the first one)."""
    text = ServerHealth.objects.filter(server=server).values_list("document", flat=True).first()
    matrix = orjson.loads(text).get("matrix") if text else None
    return cast(dict[str, Any] | None, matrix)


def sku_acceptance(sku_name: str) -> dict[str, Any]:
    """Per-SKU view: each member's verdict and findings count, and the distribution of every
    figure measured across the SKU with its outliers named."""
    members = list(
        Server.objects.filter(sku_name=sku_name)
        .exclude(sku_name="")
        .select_related("health")
        .defer(*(f"health__{c}" for c in LARGE_HEALTH_COLUMNS))
        .order_by("hostname")
    )
    if not members:
        raise Http404(f"no SKU named {sku_name!r}")
    expectation = sku_expectation(sku_name)
    thresholds = expectation.thresholds() if expectation else Thresholds()
    servers = []
    for s in members:
        health: ServerHealth | None = getattr(s, "health", None)
        servers.append(
            {
                "hostname": s.hostname,
                "verdict": health.acceptance["verdict"] if health else None,
                "critical": health.critical_count if health else None,
                "warning": health.warning_count if health else None,
                "computed_at": health.computed_at.isoformat() if health else None,
            }
        )
    return {
        "sku": sku_name,
        "expectation_version": expectation.version if expectation else None,
        "thresholds": thresholds.to_document(),
        "servers": servers,
        "distribution": sku_distribution(
            sku_figures(sku_name, thresholds), thresholds.sku_median_ratio
        ),
    }


def filter_by_health(
    qs: QuerySet[Server],
    *,
    health: str = "",
    finding: str = "",
    severity: str = "",
    no_critical: bool = False,
) -> QuerySet[Server]:
    """Fleet-list filters on top of fleet.selectors.server_list: servers in one health state
    (HEALTH_STATES), with a finding of this kind and/or severity, or servers a scheduler may
    use (evaluated, and no critical finding)."""
    if health:
        qs = qs.filter(_HEALTH_STATES[health])
    if finding or severity:
        match = Q()
        if finding:
            match &= Q(kind=finding)
        if severity:
            match &= Q(severity=severity)
        qs = qs.filter(pk__in=HealthFinding.objects.filter(match).values("server_id"))
    if no_critical:
        qs = qs.filter(health__isnull=False, health__critical_count=0)
    return qs


# --- the health badge of a server ------------------------------------------------------------

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


def findings_checked(server: Server) -> bool:
    """Whether the health checks have judged the server's current snapshot: until then an
    empty findings list means "not checked yet", not "nothing wrong"."""
    health = getattr(server, "health", None)
    return (
        health is not None
        and server.latest_snapshot_id is not None
        and health.snapshot_id == server.latest_snapshot_id
    )


def server_findings(server: Server) -> list[dict[str, Any]]:
    """What is worth a look on this server, as findings of core.health's shape: the health
    checks' findings once they ran, and until then what ingest already knows (a wiring that
    differs from the usual one of its SKU)."""
    if _evaluated(server):
        return health_findings(server)
    return _ingest_findings(server.differs_from_sku, server.sku_name)


def _evaluated(server: Server) -> bool:
    """Whether the server has a health row: the one its caller joined in, else looked up
    without reading the row (its documents are megabytes at 576 GPUs)."""
    if Server.health.is_cached(server):
        return getattr(server, "health", None) is not None
    return ServerHealth.objects.filter(server=server).exists()


def _ingest_findings(differs_from_sku: bool, sku_name: str) -> list[dict[str, Any]]:
    if not differs_from_sku:
        return []
    return [
        Finding(
            kind=TOPOLOGY_DRIFT,
            severity="warning",
            devices=(),
            evidence={"against": "SKU"},
            advice="Compare this server's matrix with a sibling of the same SKU.",
            message=f"wired differently from the usual topology of SKU {sku_name!r}",
        ).to_document()
    ]


def findings_count(server: Server) -> int:
    """The list's count, from columns already joined in (no query per row)."""
    health = getattr(server, "health", None)
    if health is None:
        return int(server.differs_from_sku)
    return int(health.critical_count + health.warning_count)


def collector_fed() -> QuerySet[Server]:
    """Servers a collector reported at least once: only they are expected to keep reporting."""
    return Server.objects.filter(
        Exists(Snapshot.objects.filter(server=OuterRef("pk"), source=Source.COLLECTOR))
    )


# dcgm-exporter's label names, so that PromQL can join topoweb's series with its own
# (`on (Hostname, gpu)` or `on (UUID)`).
HOST, GPU_LABELS = ["Hostname"], ["Hostname", "gpu", "UUID", "modelName"]
_GBPS = 1e9  # the figures are GB/s; Prometheus wants bytes per second


def _family(name: str, help_text: str, labels: list[str]) -> GaugeFamily:
    return GaugeFamily(name=name, help=help_text, labels=labels, samples=[])


def fleet_gauges() -> list[GaugeFamily]:
    """The per-server and per-GPU gauges /metrics serves, labelled as dcgm-exporter labels its
    series: a handful of queries over the fleet, and each server's small gauges document
    (ServerHealth.gauges, written at evaluation), never its acceptance report."""
    health = _family(
        "topoweb_server_health",
        "1 for the server's health state (the fleet page's badge), 0 for the others.",
        [*HOST, "state"],
    )
    silent = _family(
        "topoweb_server_collector_silent",
        "1 when the server's collector missed TOPOWEB_COLLECTOR_SILENT_AFTER reports in a row "
        "(the collector_silent finding), else 0; servers a collector reports only.",
        HOST,
    )
    last = _family(
        "topoweb_server_last_report_timestamp_seconds",
        "When the server last reported (a duplicate report counts), Unix time.",
        HOST,
    )
    gpus = _family("topoweb_server_gpus", "GPUs in the server's latest topology.", HOST)
    nics = _family("topoweb_server_nics", "NICs in the server's latest topology.", HOST)
    findings = _family(
        "topoweb_server_findings",
        "Findings of the server's latest evaluation, by kind and severity.",
        [*HOST, "kind", "severity"],
    )
    nvlinks = _family("topoweb_gpu_nvlinks_up", "NVLinks NVML reported up on the GPU.", GPU_LABELS)
    expected = _family(
        "topoweb_server_bandwidth_expected_bytes_per_second",
        "Expected bandwidth of a figure (a collective's busbw, or a GPU pair class's copy).",
        [*HOST, "figure"],
    )
    measured = _family(
        "topoweb_server_bandwidth_measured_bytes_per_second",
        "Measured bandwidth of a figure (for a pair class, its worst measured pair).",
        [*HOST, "figure"],
    )
    fed = set(collector_fed().values_list("pk", flat=True))
    marked = set(
        HealthFinding.objects.filter(kind=COLLECTOR_SILENT).values_list("server_id", flat=True)
    )
    servers = (
        Server.objects.select_related("health", "latest_snapshot")
        .only(
            "hostname",
            "last_seen_at",
            "differs_from_sku",
            "latest_snapshot__gpu_count",
            "latest_snapshot__nic_count",
            "health__critical_count",
            "health__warning_count",
            "health__gauges",
        )
        .order_by("hostname")
    )
    for server in servers.iterator(chunk_size=2000):
        host = [server.hostname]
        state = server_health(server)  # the badge's rule
        for each in _HEALTH_STATES:
            health["samples"].append(([*host, each], float(each == state)))
        if server.pk in fed:
            silent["samples"].append((host, float(server.pk in marked)))
        if server.last_seen_at is not None:
            last["samples"].append((host, server.last_seen_at.timestamp()))
        if server.latest_snapshot is not None:
            gpus["samples"].append((host, float(server.latest_snapshot.gpu_count)))
            nics["samples"].append((host, float(server.latest_snapshot.nic_count)))
        stored = getattr(server, "health", None)
        document = (stored.gauges if stored is not None else None) or {}
        for gpu in document.get("gpus", ()):
            labels = [*host, gpu["gpu"], gpu["uuid"], gpu["model"]]
            nvlinks["samples"].append((labels, float(gpu["nvlinks_up"])))
        for figure in document.get("bandwidth", ()):
            for family, key in ((expected, "expected_gbps"), (measured, "measured_gbps")):
                if figure[key] is not None:
                    family["samples"].append(([*host, figure["figure"]], figure[key] * _GBPS))
    counted = (
        HealthFinding.objects.values_list("server__hostname", "kind", "severity")
        .annotate(n=Count("id"))
        .order_by("server__hostname", "kind", "severity")
    )
    for hostname, kind, severity, n in counted:
        findings["samples"].append(([hostname, kind, severity], float(n)))
    return [health, silent, last, gpus, nics, findings, nvlinks, expected, measured]
