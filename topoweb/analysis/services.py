"""Writes of analyses: what to compute for a topology class, claiming and finishing that work,
and the sweep that recovers work lost to a dead broker or a dead worker.

`build_analysis_result` is the one place where the core's computations enter the service."""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from topoweb.analysis.models import Analysis
from topoweb.core.fingerprint import describe_links
from topoweb.core.health import check_health
from topoweb.core.model import DocumentError, Topology, link_class_rank
from topoweb.fleet.models import TopologyClass

log = logging.getLogger(__name__)

# Bump when build_analysis_result computes something new: every topology class then gets a
# fresh analysis from the sweep, and the old result stays readable until the new one is done.
COST_MODEL_VERSION = 1


def build_analysis_result(topology: Topology, gpu_model: str) -> dict[str, Any]:
    """Everything stored as the analysis of one topology class (JSON-serialisable)."""
    gpu_ids = {g.id for g in topology.gpus}
    gpu_pairs = Counter(link.link_class for link in topology.gpu_links())
    # The largest set of GPUs joined by NVLink, found by walking NVLink edges only.
    neighbours: dict[str, set[str]] = {g: set() for g in gpu_ids}
    for link in topology.gpu_links():
        if link.is_nvlink:
            neighbours[link.a].add(link.b)
            neighbours[link.b].add(link.a)
    seen: set[str] = set()
    largest_domain = 0
    for start in sorted(gpu_ids):
        if start in seen:
            continue
        stack, size = [start], 0
        seen.add(start)
        while stack:
            node = stack.pop()
            size += 1
            for nxt in neighbours[node] - seen:
                seen.add(nxt)
                stack.append(nxt)
        largest_domain = max(largest_domain, size)
    nearest_nic = {}
    for gpu in topology.gpus:
        classes = [topology.link_class(gpu.id, nic.id) for nic in topology.nics]
        nearest_nic[gpu.id] = min(classes, key=link_class_rank) if classes else None
    return {
        "summary": {
            "gpu_model": gpu_model,
            "gpu_count": len(topology.gpus),
            "nic_count": len(topology.nics),
            "gpu_pair_classes": dict(
                sorted(gpu_pairs.items(), key=lambda kv: link_class_rank(kv[0]))
            ),
            "largest_nvlink_domain": largest_domain,
            "nearest_nic_class": nearest_nic,
            "description": describe_links(topology),
        },
        "warnings": list(topology.warnings),
        # What the wiring alone shows; per-server findings live with each server's health.
        "findings": [f.to_document() for f in check_health(topology)],
    }


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
        result = build_analysis_result(topology_class.to_domain(), topology_class.gpu_model)
    except (DocumentError, ValueError, KeyError) as exc:
        # Bad stored data will not get better by retrying.
        finished = timezone.now()
        mine.update(
            status=Analysis.Status.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            finished_at=finished,
            updated_at=finished,
            duration_s=time.monotonic() - started,
        )
        return "failed"
    except BaseException:
        # A time limit or a lost database: give the work back so a retry or the sweep runs it.
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
    Analysis.objects.filter(
        status=Analysis.Status.RUNNING, claimed_at__lt=now - stale_after
    ).update(status=Analysis.Status.PENDING, claimed_at=None, updated_at=now - pending_after)
    due = created + list(
        Analysis.objects.filter(
            status=Analysis.Status.PENDING, updated_at__lte=now - pending_after
        ).values_list("pk", flat=True)
    )
    # Touch before sending, so that the next sweep does not send the same work again at once.
    Analysis.objects.filter(pk__in=due).update(updated_at=now)
    return [pk for pk in due if enqueue_analysis(pk)]
