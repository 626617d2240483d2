"""Writes of the health checks: evaluate one server (findings + acceptance report, stored in one
transaction), enqueue that after an ingest commits, mark and clear collector_silent, and save
staff's SKU expectations."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import orjson
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from topoweb.config import metrics
from topoweb.core.analysis import COST_MODEL_VERSION
from topoweb.core.costs import pcie_capability
from topoweb.core.health import (
    COLLECTOR_SILENT,
    Expectations,
    Figures,
    Finding,
    Thresholds,
    acceptance_report,
    check_health,
    collector_silence,
    expectations_from_model,
    judged_pairs,
    measured_figures,
    median_figures,
    server_gauges,
    silence_window,
)
from topoweb.core.model import Topology
from topoweb.fleet import changes, drawings, work
from topoweb.fleet import selectors as fleet_selectors
from topoweb.fleet.models import Benchmark, Server, Snapshot
from topoweb.fleet.services import NewSnapshot
from topoweb.fleet.statements import column_name, execute_for_ids, table_name
from topoweb.health import selectors
from topoweb.health.assessment import assessment_document, bounded_acceptance
from topoweb.health.models import HealthFinding, ServerHealth, SkuExpectation

log = logging.getLogger(__name__)


def evaluate_server(server_id: int) -> ServerHealth | None:
    """Recompute a server's findings and acceptance report from what is stored now. Idempotent:
    a re-run replaces the previous evaluation; None for a server with no topology yet."""
    # The time its inputs are read from: an input that changes while this runs leaves the
    # stored assessment stale (requested_at later), and its queued evaluation runs next.
    started = timezone.now()
    # What asked for it is being read now; an input that changes from here on asks again.
    ServerHealth.objects.filter(server_id=server_id).update(requested_at=None)
    server = (
        Server.objects.select_related("latest_snapshot__topology_class")
        .filter(pk=server_id)
        .first()
    )
    inputs = selectors.health_inputs(server) if server is not None else None
    if server is None or inputs is None:
        return None
    # The graph and the exports, drawn here once per snapshot rather than by a request, and
    # first: they need only the topology, and a 576-GPU assessment takes far longer. The
    # graph is kept for the graph API and SVG and read back (not drawn again) below.
    snapshot = server.latest_snapshot
    assert snapshot is not None  # health_inputs gave None otherwise
    fleet_selectors.warm_graph(snapshot, inputs.topology)
    drawings.store_exports(server, snapshot, inputs.topology)
    row = selectors.sku_expectation(server.sku_name)
    gpu_model = server.latest_snapshot.gpu_model if server.latest_snapshot else ""
    expectations = expectations_for(
        inputs.topology, gpu_model, row, pcie_capability(inputs.nvml), inputs.cpu_model
    )
    siblings = {
        host: figures
        for host, figures in selectors.sku_figures(server.sku_name, expectations.thresholds).items()
        if host != server.hostname
    }
    medians = (
        median_figures(siblings.values())
        if len(siblings) >= selectors.MIN_SIBLINGS_FOR_MEDIAN
        else None
    )
    findings = check_health(
        inputs.topology,
        previous=inputs.previous,
        sku_reference=inputs.sku_reference,
        fingerprint=inputs.fingerprint,
        sku_fingerprint=inputs.sku_fingerprint,
        nvml=inputs.nvml,
        p2p=inputs.p2p,
        nccl_runs=inputs.nccl_runs,
        expectations=expectations,
        sku_medians=medians,
        network=inputs.network,
    )
    # The pairs' expectations as the findings judged them, judged once: the acceptance rows
    # and the matrix show the same.
    measured = measured_figures(inputs.p2p, inputs.nccl_runs, expectations.thresholds)
    pairs = judged_pairs(inputs.topology, expectations, findings, measured, medians)
    report = acceptance_report(
        inputs.topology,
        expectations,
        findings,
        p2p=inputs.p2p,
        nccl_runs=inputs.nccl_runs,
        sku_medians=medians,
        pairs=pairs,
    )
    report["hostname"] = server.hostname
    report["sku"] = server.sku_name
    report["expectation_version"] = row.version if row is not None else None
    report["unread_facts"] = list(inputs.unread_facts)
    now = timezone.now()
    silence = silence_of(server, now)
    if silence is not None:  # kept through a re-evaluation (staff's edit) while it lasts
        findings = (*findings, silence)
    graph = fleet_selectors.graph_elements(snapshot, inputs.topology, in_request=False)
    document = assessment_document(server, inputs.topology, expectations, pairs, findings, graph)
    with transaction.atomic():
        changes.lock_servers([server.pk])  # before its health row (fleet.changes)
        health, _ = ServerHealth.objects.update_or_create(
            server=server,
            defaults={
                "snapshot": server.latest_snapshot,
                "computed_at": started,
                "document": orjson.dumps(document).decode(),
                "cost_model_version": COST_MODEL_VERSION,
                "expectation_version": row.version if row is not None else None,
                "expectations": expectations.to_document(),
                "acceptance": bounded_acceptance(report),
                "gauges": server_gauges(inputs.nvml, report),
                "critical_count": sum(f.severity == "critical" for f in findings),
                "warning_count": sum(f.severity == "warning" for f in findings),
            },
        )
        HealthFinding.objects.filter(server=server).delete()
        HealthFinding.objects.bulk_create(
            HealthFinding(server=server, **f.to_document()) for f in findings
        )
        changes.servers_changed([server.pk])  # its badge, counts and findings
    return health


def expectations_for(
    topology: Topology,
    gpu_model: str,
    row: SkuExpectation | None,
    pcie: tuple[int, int] | None = None,
    cpu_model: str | None = None,
) -> Expectations:
    """The cost model's figures for this wiring (on the PCIe links NVML reports, `pcie`, and
    the socket link of the host's CPU, `cpu_model`), with staff's SKU figures (and thresholds)
    taking precedence wherever they give one."""
    thresholds = row.thresholds() if row is not None else Thresholds()
    model = expectations_from_model(
        topology, gpu_model or None, thresholds, pcie=pcie, cpu_model=cpu_model
    )
    if row is None:
        return model
    staff = row.to_domain(topology)
    # The model's expectations with staff's direct figures over them; the rest (the staged
    # copies a pair without P2P is judged against, the PCIe link assumed) stays the model's.
    return replace(
        model,
        figures=Figures(
            {**model.figures.p2p_gbps, **staff.figures.p2p_gbps},
            {**model.figures.busbw_gbps, **staff.figures.busbw_gbps},
        ),
        basis=f"{staff.basis}; other figures from the {model.basis}",
        # The model's bands stay on the figures it still gives; staff's figures carry none.
        p2p_bands={k: v for k, v in model.p2p_bands.items() if k not in staff.figures.p2p_gbps},
        busbw_bands={
            k: v for k, v in model.busbw_bands.items() if k not in staff.figures.busbw_gbps
        },
    )


HEALTH = "health"  # the kind of work, in fleet.work
HEALTH_TASK = "health.evaluate"


def request_assessments(server_ids: Sequence[int], *, mark_stale: bool = True) -> None:
    """These servers' assessments are out of date: mark them (served `stale` meanwhile; not
    for servers that have none yet, `mark_stale` False), give their evaluations their full
    tries again (fleet.work) and send each once the caller commits, unless one is already
    queued: one queued evaluation per server at most."""
    if mark_stale:
        _mark_requested(server_ids, timezone.now())
    work.request(HEALTH, server_ids, HEALTH_TASK, renew=True)


def _mark_requested(server_ids: Sequence[int], now: datetime) -> None:
    """Their assessments' `requested_at` is `now` where none was: a statement written out,
    since every new report runs it (the ORM builds its query anew each time), in parts of a
    bounded number of parameters (a SKU's thousands of servers)."""
    requested = column_name(ServerHealth, "requested_at")
    server = column_name(ServerHealth, "server")
    execute_for_ids(
        f"UPDATE {table_name(ServerHealth)} SET {requested} = %s "
        f"WHERE {requested} IS NULL AND {server} IN ({{ids}})",
        server_ids,
        [connection.ops.adapt_datetimefield_value(now)],
    )


def enqueue_health(server_id: int) -> bool:
    """Send the task unless one is queued or it was given up; a broker that is down is
    logged, not raised: the sweep sends it later."""
    return work.send(HEALTH, server_id, HEALTH_TASK)


def run_evaluation(server_id: int) -> bool:
    """One attempt of the worker's evaluation (fleet.work: counted, given up past its tries
    with the reason); whether the server was evaluated."""
    return work.attempt(HEALTH, server_id, lambda: evaluate_server(server_id)) is not None


def on_new_snapshot(stored: NewSnapshot) -> None:
    """The fleet stored a snapshot (fleet.services calls this, registered by
    HealthConfig.ready): the server needs a fresh assessment. A server the report made has
    none to mark stale."""
    request_assessments([stored.server.pk], mark_stale=not stored.new_server)


def on_new_report(server: Server, stored: Snapshot | Benchmark) -> None:
    """The fleet stored a snapshot or a benchmark: the server needs a fresh assessment, and
    for a benchmark so do its SKU siblings, whose medians include it (fleet.services calls
    this, registered by HealthConfig.ready)."""
    ids = [server.pk]
    if isinstance(stored, Benchmark) and server.sku_name:
        siblings = Server.objects.filter(sku_name=server.sku_name, latest_snapshot__isnull=False)
        ids += siblings.exclude(pk=server.pk).values_list("pk", flat=True)
    request_assessments(ids)


def on_class_analysed(topology_class_id: int) -> None:
    """A class analysis finished: its servers' assessments show it (curves, layouts,
    affinity), so they are out of date (analysis.services calls this, registered by
    HealthConfig.ready)."""
    members = Server.objects.filter(topology_class_id=topology_class_id)
    request_assessments(list(members.values_list("pk", flat=True)))


def stale_servers() -> list[int]:
    """Servers never evaluated, evaluated against an older snapshot than their latest or an
    older cost model, or asked for again and not picked up for a minute (a lost message);
    but for those whose evaluation was given up (until new input asks again)."""
    lost = timezone.now() - timedelta(seconds=60)
    return list(
        Server.objects.filter(latest_snapshot__isnull=False)
        .filter(
            Q(health__isnull=True)
            | ~Q(health__snapshot_id=F("latest_snapshot_id"))
            | ~Q(health__cost_model_version=COST_MODEL_VERSION)
            | Q(health__requested_at__lt=lost)
        )
        .exclude(pk__in=work.given_up_keys(HEALTH))
        .values_list("pk", flat=True)
    )


def silence_of(server: Server, now: datetime) -> Finding | None:
    """collector_silent for a server a collector reports (not one only people upload to)."""
    if not selectors.collector_fed().filter(pk=server.pk).exists():
        return None
    return collector_silence(
        server.last_seen_at,
        now,
        settings.TOPOWEB_COLLECTOR_INTERVAL_S,
        settings.TOPOWEB_COLLECTOR_SILENT_AFTER,
    )


def sweep_silent_collectors(now: datetime | None = None) -> tuple[list[str], list[str]]:
    """Mark the servers whose collector went silent by `now` and clear those that reported
    again (a duplicate report makes no new snapshot, so no evaluation clears it): the
    hostnames (marked, cleared). Run by the health sweep, every TOPOWEB_SWEEP_EVERY_S."""
    now = now or timezone.now()
    interval = settings.TOPOWEB_COLLECTOR_INTERVAL_S
    missed = settings.TOPOWEB_COLLECTOR_SILENT_AFTER
    cutoff = now - silence_window(interval, missed)
    marked = HealthFinding.objects.filter(kind=COLLECTOR_SILENT)
    newly = list(
        selectors.collector_fed()
        .filter(last_seen_at__lt=cutoff)
        .exclude(Exists(marked.filter(server=OuterRef("pk"))))
        .values_list("pk", "hostname", "last_seen_at")
    )
    back = list(
        marked.filter(server__last_seen_at__gte=cutoff).values_list(
            "pk", "server_id", "server__hostname"
        )
    )
    with transaction.atomic():
        changes.lock_servers([row[0] for row in newly] + [row[1] for row in back])
        rows = []
        for server_id, _, last_seen in newly:
            finding = collector_silence(last_seen, now, interval, missed)
            assert finding is not None  # last_seen is before the cutoff
            rows.append(HealthFinding(server_id=server_id, **finding.to_document()))
        HealthFinding.objects.bulk_create(rows)
        ServerHealth.objects.filter(server_id__in=[row[0] for row in newly]).update(
            warning_count=F("warning_count") + 1
        )
        HealthFinding.objects.filter(pk__in=[row[0] for row in back]).delete()
        ServerHealth.objects.filter(server_id__in=[row[1] for row in back]).update(
            warning_count=F("warning_count") - 1
        )
        # Their pages read the findings from the assessment: it follows.
        request_assessments([row[0] for row in newly] + [row[1] for row in back])
        changes.servers_changed([row[0] for row in newly] + [row[1] for row in back])
    return [row[1] for row in newly], [row[2] for row in back]


def save_expectation(
    expectation: SkuExpectation, *, changed: bool, user: User | None = None
) -> SkuExpectation:
    """Store staff's edit, bumping the version when a figure or threshold changed, and queue
    the SKU's servers for re-evaluation against it."""
    fields: list[str] = []
    if expectation.pk is None:
        expectation.updated_by = user
        expectation.save()
    else:
        if changed:
            expectation.version = F("version") + 1
            fields.append("version")
        expectation.updated_by = user
        fields += [
            "bandwidth_ratio",
            "sku_median_ratio",
            "large_message_bytes",
            "p2p_min_gain",
            "p2p_gbps_by_class",
            "busbw_gbps",
            "notes",
            "updated_by",
            "updated_at",
        ]
        expectation.save(update_fields=fields)
        expectation.refresh_from_db(fields=["version"])
    members = Server.objects.filter(sku_name=expectation.sku_name)
    request_assessments(list(members.values_list("pk", flat=True)))
    return expectation


def publish_fleet_gauges() -> None:
    """The fleet's gauges for /metrics (which reads them from the cache, never the database).
    A cache that is down costs the figures, never the sweep."""
    families = selectors.fleet_gauges()
    try:
        metrics.publish_fleet_gauges(families)
    except Exception:
        log.warning("the fleet gauges were not published for /metrics", exc_info=True)
