"""Writes of analyses: what to compute for a topology class, claiming and finishing that work,
and the sweep that recovers work lost to a dead broker or a dead worker.

What is computed is `topoweb.core.analysis.analyse`; this module only claims, calls and stores."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connections
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from topoweb.analysis import selectors
from topoweb.analysis.models import Analysis
from topoweb.config import metrics
from topoweb.core.analysis import COST_MODEL_VERSION, analyse
from topoweb.core.model import DocumentError
from topoweb.fleet import services as fleet_services
from topoweb.fleet import work
from topoweb.fleet.models import Benchmark, Server, TopologyClass
from topoweb.fleet.services import NewSnapshot
from topoweb.fleet.statements import column_name, table_name

log = logging.getLogger(__name__)


# Called with a topology class id whenever its analysis finishes: the apps above this one
# register what that asks of them (AppConfig.ready; this app never imports them).
_AFTER_ANALYSED: list[Callable[[int], None]] = []


def after_class_analysed(hook: Callable[[int], None]) -> None:
    """Call `hook(topology_class_id)` whenever a class analysis is stored."""
    if hook not in _AFTER_ANALYSED:
        _AFTER_ANALYSED.append(hook)


def current_analysis_for(topology_class: TopologyClass) -> Analysis:
    """The analysis of this class at the current cost-model version, created pending if new."""
    analysis, _ = Analysis.objects.get_or_create(
        topology_class=topology_class, cost_model_version=COST_MODEL_VERSION
    )
    return analysis


def _current_status(class_id: int) -> list[tuple[int, str, str]]:
    """What every new snapshot asks of its class's analysis: three columns (not the row with
    its result, the whole analysis document), in a statement written out once rather than a
    query the ORM builds on every report."""
    with connections["default"].cursor() as cursor:
        cursor.execute(_current_status_sql(), [class_id, COST_MODEL_VERSION])
        return [(pk, status, seen) for pk, status, seen in cursor.fetchall()]


@functools.cache
def _current_status_sql() -> str:
    id_, status, seen, class_id, version = (
        column_name(Analysis, f)
        for f in ("id", "status", "benchmark_set", "topology_class", "cost_model_version")
    )
    return (
        f"SELECT {id_}, {status}, {seen} FROM {table_name(Analysis)} "
        f"WHERE {class_id} = %s AND {version} = %s"
    )


def request_analysis(topology_class: TopologyClass, *, renamed: bool = False) -> None:
    """Make sure the class has a current analysis, and enqueue it once the caller commits;
    a finished one whose class's runs changed since (a run added or removed), or whose class
    learned the GPU or CPU model it prices with (`renamed`), is analysed again, its result
    served meanwhile."""
    found = _current_status(topology_class.pk)
    if found:
        analysis_id, status, seen = found[0]
    else:
        analysis = current_analysis_for(topology_class)
        analysis_id, status, seen = analysis.pk, analysis.status, analysis.benchmark_set
    finished = (Analysis.Status.DONE, Analysis.Status.FAILED)
    again = False  # new input: its work gets its full tries again
    if status in finished and (renamed or seen != selectors.class_benchmark_set(topology_class.pk)):
        # Conditional: of two ingests racing here, one re-queues it.
        again = bool(
            Analysis.objects.filter(pk=analysis_id, status=status, benchmark_set=seen).update(
                status=Analysis.Status.PENDING, attempts=0, updated_at=timezone.now()
            )
        )
        status = Analysis.Status.PENDING if again else status
    if status == Analysis.Status.PENDING:
        work.request(ANALYSIS, [analysis_id], ANALYSIS_TASK, renew=again)


ANALYSIS = "analysis"  # the kind of work, in fleet.work
ANALYSIS_TASK = "analysis.run"


def enqueue_analysis(analysis_id: int) -> bool:
    """Send the task unless one is queued; a broker that is down is logged, not raised: the
    sweep sends it later."""
    return work.send(ANALYSIS, analysis_id, ANALYSIS_TASK)


def on_new_snapshot(stored: NewSnapshot) -> None:
    """The fleet stored a snapshot (fleet.services calls this, registered by
    AnalysisConfig.ready): a new class needs its analysis, and one whose runs changed (the
    report carried some, or the server brought its own from another class) or that learned
    its GPU or CPU model is analysed again. Another report of a class's server changes
    nothing the analysis reads: the class keeps its document, and a current analysis it lacks
    (a new cost model) comes from the sweep."""
    topology_class = stored.snapshot.topology_class
    if topology_class is not None and (
        stored.new_class or stored.runs_changed or stored.class_learned
    ):
        request_analysis(topology_class, renamed=stored.class_learned)


def on_new_benchmark(server: Server, _benchmark: Benchmark) -> None:
    """The fleet stored a run on its own: its server's class is calibrated anew."""
    if server.topology_class is not None:
        request_analysis(server.topology_class)


def _stale_claims(now: datetime) -> Q:
    """Running work whose worker stopped beating (killed, or its host gone)."""
    before = now - timedelta(seconds=settings.TOPOWEB_STALE_CLAIM_AFTER_S)
    return Q(status=Analysis.Status.RUNNING) & (
        Q(heartbeat_at__lt=before) | Q(heartbeat_at__isnull=True, claimed_at__lt=before)
    )


def claim_analysis(analysis_id: int) -> datetime | None:
    """Take pending work for this worker, or running work whose worker died (its heartbeat
    stopped); None when someone else has it or it is finished."""
    now = timezone.now()
    claimed = (
        Analysis.objects.filter(pk=analysis_id)
        .filter(Q(status=Analysis.Status.PENDING) | _stale_claims(now))
        .update(
            status=Analysis.Status.RUNNING,
            claimed_at=now,
            heartbeat_at=now,
            updated_at=now,
            attempts=F("attempts") + 1,
        )
    )
    return now if claimed else None


@contextmanager
def _heartbeat(analysis_id: int, claimed_at: datetime) -> Iterator[None]:
    """While the body runs, renew the claim's heartbeat from a thread of this process: a
    worker killed mid-task stops beating, and its claim goes stale within
    TOPOWEB_STALE_CLAIM_AFTER_S instead of waiting for a time limit."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(settings.TOPOWEB_ANALYSIS_HEARTBEAT_S):
                try:
                    Analysis.objects.filter(
                        pk=analysis_id, status=Analysis.Status.RUNNING, claimed_at=claimed_at
                    ).update(heartbeat_at=timezone.now())
                except DatabaseError:
                    log.warning("analysis %s: heartbeat not written", analysis_id, exc_info=True)
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"analysis-{analysis_id}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def run_analysis(analysis_id: int) -> str:
    """Compute one analysis if it is still pending (or its worker died). Returns what happened,
    for logs and tests: "busy" when another live worker has it.

    The result is written by one conditional UPDATE, so a worker killed before it leaves the
    row `running` with no result; its heartbeat stops, and a redelivered message (acks late)
    or the sweep hands it out again."""
    claimed_at = claim_analysis(analysis_id)
    if claimed_at is None:
        running = Analysis.objects.filter(pk=analysis_id, status=Analysis.Status.RUNNING)
        return "busy" if running.exists() else "skipped"
    analysis = Analysis.objects.select_related("topology_class").get(pk=analysis_id)
    started = time.monotonic()
    mine = Analysis.objects.filter(
        pk=analysis_id, status=Analysis.Status.RUNNING, claimed_at=claimed_at
    )
    if analysis.attempts > settings.TOPOWEB_ANALYSIS_MAX_ATTEMPTS:
        # Taken over from workers that died on it every time (killed for memory, say).
        _mark_failed(mine, "gave up: the worker stopped before finishing on every attempt", started)
        return "failed"
    try:
        topology_class = analysis.topology_class
        with _heartbeat(analysis_id, claimed_at):
            # The class's runs as they are now, each calibration fitted once at ingest (and
            # again here when a newer cost model came since).
            fleet_services.refit_calibrations(selectors.class_benchmarks(topology_class))
            benchmark_set = selectors.class_benchmark_set(topology_class.pk)
            fitted = selectors.fitted_calibration(selectors.class_benchmarks(topology_class))
            result = analyse(
                topology_class.to_domain(),
                topology_class.gpu_model,
                fitted=fitted,
                cpu_model=topology_class.cpu_model,
            ).to_document()
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
        benchmark_set=benchmark_set,
    )
    if not written:
        return "lost-claim"
    for hook in _AFTER_ANALYSED:
        hook(analysis.topology_class_id)
    request_analysis(topology_class)  # a run stored while this one ran: analyse again
    return "done"


def run_attempt(analysis_id: int) -> str:
    """One attempt of the worker's task (fleet.work: counted, given up past its tries): what
    run_analysis returns, or "given-up", the analysis then marked failed with the reason."""
    outcome = work.attempt(ANALYSIS, analysis_id, lambda: run_analysis(analysis_id))
    if outcome is None:
        reason = work.given_up(ANALYSIS, [analysis_id]).get(analysis_id, "given up")
        now = timezone.now()
        Analysis.objects.filter(pk=analysis_id).exclude(status=Analysis.Status.DONE).update(
            status=Analysis.Status.FAILED, error=reason, finished_at=now, updated_at=now
        )
        return "given-up"
    return str(outcome)


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
    created = [
        current_analysis_for(topology_class).pk
        for topology_class in TopologyClass.objects.exclude(
            analyses__cost_model_version=COST_MODEL_VERSION
        )
    ]
    stale = Analysis.objects.filter(_stale_claims(now))
    # A worker that died on it every time (killed for memory, say) has had its tries.
    stale.filter(attempts__gte=settings.TOPOWEB_ANALYSIS_MAX_ATTEMPTS).update(
        status=Analysis.Status.FAILED,
        error="gave up: the worker stopped before finishing on every attempt",
        finished_at=now,
        updated_at=now,
    )
    stale.update(status=Analysis.Status.PENDING, claimed_at=None, updated_at=now - pending_after)
    # Finished before the class's runs changed (their ingest's request lost): analyse again.
    behind = list(selectors.analyses_behind_their_runs().values_list("pk", flat=True))
    Analysis.objects.filter(pk__in=behind, status=Analysis.Status.DONE).update(
        status=Analysis.Status.PENDING, attempts=0, updated_at=now - pending_after
    )
    due = created + list(
        Analysis.objects.filter(
            status=Analysis.Status.PENDING, updated_at__lte=now - pending_after
        ).values_list("pk", flat=True)
    )
    # Touch before sending, so that the next sweep does not send the same work again at once.
    Analysis.objects.filter(pk__in=due).update(updated_at=now)
    return [pk for pk in due if enqueue_analysis(pk)]


def publish_analysis_counts() -> dict[str, int]:
    """Count analyses by status for /metrics (which reads them from the cache, never the
    database). A cache that is down costs the figures, never the sweep."""
    counts = dict(
        Analysis.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    oldest = (
        Analysis.objects.filter(status=Analysis.Status.PENDING)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    try:
        metrics.publish_analysis_counts(counts, oldest.timestamp() if oldest else None)
    except Exception:
        log.warning("the analysis counts were not published for /metrics", exc_info=True)
    return counts
