"""Writes of analyses: what to compute for a topology class, claiming and finishing that work,
and the sweep that recovers work lost to a dead broker or a dead worker.

`build_analysis_result` is the one place where the core's computations enter the service."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from topoweb.analysis import selectors
from topoweb.analysis.models import Analysis
from topoweb.core.costs import (
    COLLECTIVES,
    STANDARD_SIZES,
    Calibration,
    CostModel,
    build_model,
    calibrate_from_nccl,
    calibrate_from_p2p,
    calibrated,
    collective_cost,
    curve,
    p2p_matrix,
)
from topoweb.core.fingerprint import describe_links
from topoweb.core.health import check_health
from topoweb.core.ledger import Layout
from topoweb.core.model import DocumentError, NcclRun, P2PResult, Topology, link_class_rank
from topoweb.core.placement import affinity, best_group, place
from topoweb.fleet.models import TopologyClass

log = logging.getLogger(__name__)

# Bump when build_analysis_result computes something new: every topology class then gets a
# fresh analysis from the sweep, and the old result stays readable until the new one is done.
COST_MODEL_VERSION = 2

# Message sizes of the per-group cost tables (the full set gets a curve over STANDARD_SIZES).
TABLE_SIZES = (1 << 20, 64 << 20, 1 << 30)
# Wall-clock budget of all layout searches of one analysis together: a 72-GPU class has 60
# factorisations, and the task's soft limit is 120 s.
LAYOUT_BUDGET_S = 12.0
LAYOUT_SEARCH_MAX_S = 0.3

# A benchmark to calibrate from: the topology it was measured on (its own GPU numbering), that
# server's GPU model, and the parsed run.
CalibrationInput = tuple[Topology, str, NcclRun | P2PResult]


def build_analysis_result(
    topology: Topology, gpu_model: str, benchmarks: Sequence[CalibrationInput] = ()
) -> dict[str, Any]:
    """Everything stored as the analysis of one topology class (JSON-serialisable).
    `benchmarks` are the measured runs of the class's servers, for calibrated figures."""
    model = build_model(topology, gpu_model or None)
    result: dict[str, Any] = {
        "summary": summary_of(model, gpu_model),
        "warnings": list(topology.warnings),
        # What the wiring alone shows; per-server findings live with each server's health.
        "findings": [f.to_document() for f in check_health(topology)],
    }
    # --- costs and placement: structure, hardware, cost tables, layouts, affinity, p2p ---
    result.update(cost_and_placement_result(model, benchmarks))
    return result


def summary_of(model: CostModel, gpu_model: str) -> dict[str, Any]:
    """The few facts lists and comparisons show, from the topology and its recovered structure."""
    topology = model.topo
    gpu_pairs = Counter(link.link_class for link in topology.gpu_links())
    nearest_nic = {}
    for gpu in topology.gpus:
        classes = [topology.link_class(gpu.id, nic.id) for nic in topology.nics]
        nearest_nic[gpu.id] = min(classes, key=link_class_rank) if classes else None
    domains = [len(d.gpus) for d in model.hierarchy.nvlink_domains]
    return {
        "gpu_model": gpu_model,
        "gpu_count": len(topology.gpus),
        "nic_count": len(topology.nics),
        "gpu_pair_classes": dict(sorted(gpu_pairs.items(), key=lambda kv: link_class_rank(kv[0]))),
        # A GPU without NVLink is a domain of one.
        "largest_nvlink_domain": max(domains, default=min(1, len(topology.gpus))),
        "nearest_nic_class": nearest_nic,
        "description": describe_links(topology),
    }


def calibration_from(
    benchmarks: Sequence[CalibrationInput],
) -> tuple[Calibration | None, list[str]]:
    """Measured corrections from the runs, each fitted on the topology it ran on (a
    Calibration is per link class, so it carries over to every server of the class). Runs
    that cannot calibrate (one GPU, another node's GPUs, no table) are named in the notes."""
    found: Calibration | None = None
    notes: list[str] = []
    for topo, model_name, run in benchmarks:
        try:
            base = build_model(topo, model_name or None)
            if isinstance(run, NcclRun):
                cal = calibrate_from_nccl(base, run)
            else:
                cal = calibrate_from_p2p(base, run)
        except ValueError as exc:
            kind = "nccl-tests" if isinstance(run, NcclRun) else "p2pBandwidthLatencyTest"
            notes.append(f"{kind} run skipped: {exc}")
            continue
        found = cal if found is None else found.merged(cal)
    return found, notes


def factorisations(n: int) -> list[Layout]:
    """Every TP x PP x DP with product n, TP varying slowest."""
    return [
        Layout(tp, pp, n // (tp * pp))
        for tp in range(1, n + 1)
        if n % tp == 0
        for pp in range(1, n // tp + 1)
        if (n // tp) % pp == 0
    ]


def group_sizes(n: int) -> list[int]:
    """2, 4, 8, ... below n, then n itself."""
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n] if n >= 2 else []


def cost_tables(model: CostModel) -> dict[str, Any]:
    """Each collective on the best-connected group of each size: a curve over STANDARD_SIZES
    for all GPUs, TABLE_SIZES for the smaller groups. Columns, not rows, to keep it compact."""
    groups = {k: list(best_group(model, k)) for k in group_sizes(len(model.gpu_ids))}
    everyone = sorted(model.gpu_ids)
    curves: dict[str, Any] = {}
    table: dict[str, Any] = {}
    for collective in COLLECTIVES:
        if len(everyone) >= 2:
            points = curve(model, collective, everyone)
            curves[collective] = {
                "time_us": [round(c.time_us, 3) for c in points],
                "algbw_gbps": [round(c.algbw_gbps, 3) for c in points],
                "busbw_gbps": [round(c.busbw_gbps, 3) for c in points],
                "algorithm": [c.algorithm for c in points],
                "bottleneck": points[-1].bottleneck,
                "bottleneck_class": points[-1].bottleneck_class,
            }
        rows = []
        for k, gpus in groups.items():
            for nbytes in TABLE_SIZES:
                c = collective_cost(model, collective, gpus, nbytes)
                rows.append(
                    [
                        k,
                        nbytes,
                        round(c.time_us, 3),
                        round(c.busbw_gbps, 3),
                        c.algorithm,
                        c.bottleneck_class,
                    ]
                )
        table[collective] = rows
    return {
        "calibrated": bool(model.calibration.scale),
        "sizes": list(STANDARD_SIZES),
        "curve_gpus": everyone,
        "curves": curves,
        "groups": {str(k): g for k, g in groups.items()},
        "table_columns": [
            "group_size",
            "bytes",
            "time_us",
            "busbw_gbps",
            "algorithm",
            "bottleneck_class",
        ],
        "table": table,
    }


def layout_advice(model: CostModel, budget_s: float = LAYOUT_BUDGET_S) -> list[dict[str, Any]]:
    """Placement of the default model preset for every factorisation of the GPU count."""
    layouts = factorisations(len(model.gpu_ids))
    each = min(LAYOUT_SEARCH_MAX_S, budget_s / max(1, len(layouts)))
    out = []
    for layout in layouts:
        doc = place(model, layout, time_budget_s=each).to_document()
        doc.pop("assumption")  # stored once, with the hardware
        out.append(doc)
    return out


def cost_and_placement_result(
    model: CostModel, benchmarks: Sequence[CalibrationInput] = ()
) -> dict[str, Any]:
    """The cost model's part of an analysis; calibrated copies where runs were measured."""
    out: dict[str, Any] = {
        "structure": model.hierarchy.to_document(),
        "hardware": model.hardware.describe(),
        "costs": cost_tables(model),
        "layouts": layout_advice(model),
        "affinity": affinity(model).to_document(),
        "p2p_prediction": p2p_matrix(model),
    }
    calibration, notes = calibration_from(benchmarks)
    out["calibration"] = {
        "applied": calibration is not None,
        **(
            calibration.to_document()
            if calibration
            else {"scale": {}, "alpha_us": {}, "sources": []}
        ),
        "skipped": notes,
    }
    if calibration is not None:
        measured = calibrated(model, calibration)
        out["calibrated_costs"] = cost_tables(measured)
        out["calibrated_p2p_prediction"] = p2p_matrix(measured)
    return out


def current_analysis_for(topology_class: TopologyClass) -> Analysis:
    """The analysis of this class at the current cost-model version, created pending if new."""
    analysis, _ = Analysis.objects.get_or_create(
        topology_class=topology_class, cost_model_version=COST_MODEL_VERSION
    )
    return analysis


def request_analysis(topology_class: TopologyClass) -> Analysis:
    """Make sure the class has a current analysis, and enqueue it once the caller commits."""
    analysis = current_analysis_for(topology_class)
    if analysis.status == Analysis.Status.PENDING:
        analysis_id = analysis.pk
        transaction.on_commit(lambda: enqueue_analysis(analysis_id))
    return analysis


def enqueue_analysis(analysis_id: int) -> bool:
    """Send the task; a broker that is down is logged, not raised: the sweep sends it later."""
    from topoweb.analysis.tasks import run_analysis

    try:
        run_analysis.apply_async(args=[analysis_id])
    except Exception:  # kombu and redis raise several unrelated types for "broker down"
        log.warning("analysis %s stays pending: the broker refused it", analysis_id, exc_info=True)
        return False
    return True


def claim_analysis(analysis_id: int) -> datetime | None:
    """Take pending work for this worker; None when someone else has it or it is finished."""
    now = timezone.now()
    claimed = Analysis.objects.filter(pk=analysis_id, status=Analysis.Status.PENDING).update(
        status=Analysis.Status.RUNNING, claimed_at=now, updated_at=now, attempts=F("attempts") + 1
    )
    return now if claimed else None


def run_analysis(analysis_id: int) -> str:
    """Compute one analysis if it is still pending. Returns what happened, for logs and tests.

    The result is written by one conditional UPDATE, so a worker killed before it leaves the
    row `running` with no result, and the sweep hands it out again."""
    claimed_at = claim_analysis(analysis_id)
    if claimed_at is None:
        return "skipped"
    analysis = Analysis.objects.select_related("topology_class").get(pk=analysis_id)
    started = time.monotonic()
    mine = Analysis.objects.filter(
        pk=analysis_id, status=Analysis.Status.RUNNING, claimed_at=claimed_at
    )
    try:
        topology_class = analysis.topology_class
        result = build_analysis_result(
            topology_class.to_domain(),
            topology_class.gpu_model,
            selectors.calibration_inputs(selectors.class_benchmarks(topology_class)),
        )
    except (DocumentError, ValueError, KeyError) as exc:
        # Bad stored data will not get better by retrying.
        _mark_failed(mine, f"{type(exc).__name__}: {exc}", started)
        return "failed"
    except BaseException as exc:
        # A time limit or a lost database: give the work back so a retry or the sweep runs it,
        # unless it has had its tries (a class that always times out must not loop for ever).
        if analysis.attempts >= settings.TOPOWEB_ANALYSIS_MAX_ATTEMPTS:
            error = f"gave up after {analysis.attempts} attempts: {type(exc).__name__}: {exc}"
            _mark_failed(mine, error, started)
        else:
            mine.update(status=Analysis.Status.PENDING, claimed_at=None, updated_at=timezone.now())
        raise
    finished = timezone.now()
    written = mine.update(
        status=Analysis.Status.DONE,
        result=result,
        error="",
        finished_at=finished,
        updated_at=finished,
        duration_s=time.monotonic() - started,
    )
    return "done" if written else "lost-claim"


def _mark_failed(mine: QuerySet[Analysis], error: str, started: float) -> None:
    """End the claimed run as failed with ERROR; the sweep does not send failed work again."""
    finished = timezone.now()
    mine.update(
        status=Analysis.Status.FAILED,
        error=error,
        finished_at=finished,
        updated_at=finished,
        duration_s=time.monotonic() - started,
    )


def sweep(now: datetime | None = None) -> list[int]:
    """Re-enqueue pending work nobody sent (broker was down) and running work whose worker died;
    create analyses for classes without one at the current cost-model version."""
    now = now or timezone.now()
    pending_after = timedelta(seconds=settings.TOPOWEB_SWEEP_PENDING_AFTER_S)
    stale_after = timedelta(seconds=settings.TOPOWEB_STALE_CLAIM_AFTER_S)
    created = [
        current_analysis_for(topology_class).pk
        for topology_class in TopologyClass.objects.exclude(
            analyses__cost_model_version=COST_MODEL_VERSION
        )
    ]
    stale = Analysis.objects.filter(
        status=Analysis.Status.RUNNING, claimed_at__lt=now - stale_after
    )
    # A worker that died on it every time (killed for memory, say) has had its tries.
    stale.filter(attempts__gte=settings.TOPOWEB_ANALYSIS_MAX_ATTEMPTS).update(
        status=Analysis.Status.FAILED,
        error="gave up: the worker stopped before finishing on every attempt",
        finished_at=now,
        updated_at=now,
    )
    stale.update(status=Analysis.Status.PENDING, claimed_at=None, updated_at=now - pending_after)
    due = created + list(
        Analysis.objects.filter(
            status=Analysis.Status.PENDING, updated_at__lte=now - pending_after
        ).values_list("pk", flat=True)
    )
    # Touch before sending, so that the next sweep does not send the same work again at once.
    Analysis.objects.filter(pk__in=due).update(updated_at=now)
    return [pk for pk in due if enqueue_analysis(pk)]
