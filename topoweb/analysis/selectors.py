"""Reads of analyses and of what a question needs: a server's cost model (built once per
topology, GPU model and calibration, then kept in-process; analysis.questions asks it), the
servers a question names, and the stored analysis of a server's topology class in its own
GPU numbering."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Concat
from django.http import Http404

from topoweb.analysis.models import Analysis
from topoweb.config import limits
from topoweb.core.analysis import COST_MODEL_VERSION, Fitted, advice
from topoweb.core.costs import (
    Calibration,
    CostModel,
    build_model,
    calibrated,
)
from topoweb.core.ledger import PRESETS
from topoweb.core.model import NcclRun, Topology
from topoweb.core.numbering import canonical_gpus, in_server_order
from topoweb.fleet.models import Benchmark, Server, Snapshot, TopologyClass
from topoweb.fleet.statements import column_name, table_name

log = logging.getLogger(__name__)

MODEL_CACHE_SIZE = 256
T = TypeVar("T")


# --- calibration inputs ---------------------------------------------------------------------


def class_benchmarks(topology_class: TopologyClass | int) -> QuerySet[Benchmark]:
    """Measured runs of every server of the class, oldest first (later ones win a merge)."""
    runs = Benchmark.objects.filter(server__topology_class=topology_class)
    return runs.order_by("captured_at", "id")


def server_benchmarks(server: Server) -> QuerySet[Benchmark]:
    """The server's own runs; failing that, those of its topology class."""
    own = Benchmark.objects.filter(server=server).order_by("captured_at", "id")
    if own.exists() or server.topology_class_id is None:
        return own
    return class_benchmarks(server.topology_class_id)


# --- the cached cost model ------------------------------------------------------------------


@dataclass(frozen=True)
class ModelKey:
    """What identifies a built model: the topology (its class plus its wiring as the server
    numbers it, since servers of one class may number their GPUs differently), GPU model and
    the benchmarks calibrating it. Servers wired, numbered and calibrated alike share one
    model, however their reports differ otherwise (a fleet's reports all do: serial numbers,
    kernels), so a question over a thousand servers builds a model per kind of server, not
    per server. The loader only runs on a cache miss. The class is named by its id: a class
    row keeps the fingerprint it was made for, and the id needs no join."""

    topology_class_id: int | None
    wiring: str  # the snapshot's wiring_sha256 ("content:" + its content hash before it had one)
    gpu_model: str
    cpu_model: str
    benchmarks: str  # benchmark_set_identity of the calibrating benchmarks (_calibrations)
    load: Callable[[], tuple[Topology, Calibration | None]] = field(
        compare=False, hash=False, repr=False
    )


@functools.lru_cache(maxsize=MODEL_CACHE_SIZE)
def cached_model(key: ModelKey) -> CostModel:
    topology, calibration = key.load()
    model = build_model(topology, key.gpu_model or None, cpu_model=key.cpu_model or None)
    return calibrated(model, calibration) if calibration is not None else model


def stored_calibration(benchmarks: QuerySet[Benchmark]) -> Calibration | None:
    """The runs' calibrations merged in order (later ones win), read back from the reduced
    form each benchmark stored at ingest (fitted there once; never fitted again here)."""
    return fitted_calibration(benchmarks).calibration


def fitted_calibration(benchmarks: QuerySet[Benchmark]) -> Fitted:
    """stored_calibration with the notes on runs that did not calibrate and the ids of those
    that did: what a class analysis is calibrated with and names."""
    found: Calibration | None = None
    notes: list[str] = []
    used: list[int] = []
    for pk, kind, document in benchmarks.values_list("pk", "kind", "calibration"):
        if document is None:
            notes.append(f"{kind} run {pk} skipped: stored before its server had a topology")
        elif "scale" in document:
            cal = Calibration(
                dict(document["scale"]),
                dict(document.get("alpha_us", {})),
                tuple(document.get("sources", ())),
            )
            found = cal if found is None else found.merged(cal)
            used.append(pk)
        else:  # {"skipped": why}: this run cannot calibrate
            notes.append(f"{kind} run {pk} skipped: {document.get('skipped', '')}")
    return Fitted(found, tuple(notes), tuple(used))


def class_benchmark_set(topology_class_id: int) -> str:
    """benchmark_set_identity of the class's runs ("" without any): what its analysis was
    calibrated from, compared to decide when to analyse it again."""
    found = Benchmark.objects.filter(server__topology_class_id=topology_class_id).aggregate(
        identity=benchmark_set_identity(), runs=Count("id")
    )
    return str(found["identity"]) if found["runs"] else ""


# Runs whose stored calibration the current cost model fitted (fleet.services stamps each).
_FITTED_NOW = Q(calibration__cost_model_version=COST_MODEL_VERSION)


def benchmark_set_identity() -> Concat:
    """Which benchmarks a group holds, as text: count, sum and largest of their ids (an
    aggregate over the group's rows), and how many of their calibrations the current cost
    model fitted. Ids only grow and a benchmark changes only when a newer model fits its
    calibration again, so any change to the group or to what it calibrates changes this."""
    return Concat(
        Cast(Count("id"), CharField()),
        Value(":"),
        Cast(Sum("id"), CharField()),
        Value(":"),
        Cast(Max("id"), CharField()),
        Value(":"),
        Cast(Count("id", filter=_FITTED_NOW), CharField()),
        output_field=CharField(),
    )


def _benchmark_set(benchmarks: QuerySet[Benchmark, Any]) -> Subquery:
    """benchmark_set_identity of a group of benchmarks, as a subquery of an outer query."""
    return Subquery(
        benchmarks.order_by().annotate(identity=benchmark_set_identity()).values("identity")[:1]
    )


def analyses_behind_their_runs() -> QuerySet[Analysis]:
    """Finished current analyses whose class's runs changed since they were computed (the
    sweep queues them again, should an ingest's request have been lost)."""
    runs = Benchmark.objects.filter(server__topology_class=OuterRef("topology_class")).values(
        "server__topology_class"
    )
    return (
        Analysis.objects.filter(status=Analysis.Status.DONE, cost_model_version=COST_MODEL_VERSION)
        .annotate(runs_now=Coalesce(_benchmark_set(runs), Value("")))
        .exclude(benchmark_set=F("runs_now"))
    )


_SERVER_FIELDS = ("id", "hostname", "topology_class_id", "latest_snapshot_id")
_SNAPSHOT_FIELDS = (
    "id",
    "server_id",
    "content_sha256",
    "wiring_sha256",
    "gpu_count",
    "gpu_model",
    "cpu_model",
    "gpu_memory_bytes",
    "nvlink_domain",
)
# What a question needs of a server: the columns `model_key` reads, and its calibration.
_QUESTION_COLUMNS = (
    *_SERVER_FIELDS,
    "latest_snapshot__content_sha256",
    "latest_snapshot__wiring_sha256",
    "latest_snapshot__gpu_count",
    "latest_snapshot__gpu_model",
    "latest_snapshot__cpu_model",
    "latest_snapshot__gpu_memory_bytes",
    "latest_snapshot__nvlink_domain",
    "calibration",
)


def _runs_by(group: str) -> QuerySet[Benchmark, tuple[Any, ...]]:
    """Benchmarks grouped by `group` (a server, or its class), as (own, the group's id, count,
    sum and largest id, fitted by the current model): benchmark_set_identity's parts, `own` 1
    for a server's."""
    runs = (
        Benchmark.objects.order_by()
        .values(group)
        .annotate(
            own=Value(int(group == "server_id")),
            n=Count("id"),
            total=Sum("id"),
            last=Max("id"),
            fitted=Count("id", filter=_FITTED_NOW),
        )
        .values_list("own", group, "n", "total", "last", "fitted")
    )
    return cast(QuerySet[Benchmark, tuple[Any, ...]], runs)


# Built once: each question copies them with its servers' filter (building the aggregates is
# most of what asking them costs).
_QUESTION_ROWS = Server.objects.order_by().values_list(*_QUESTION_COLUMNS[:-1])
_OWN_RUNS = _runs_by("server_id")
_CLASS_RUNS = _runs_by("server__topology_class")


def _calibrations(
    rows: Sequence[Sequence[Any]], runs: Iterable[Sequence[Any]]
) -> list[tuple[Any, ...]]:
    """The rows (_QUESTION_COLUMNS but the last) with their `calibration` appended: the
    benchmark_set_identity of the server's own runs, else of its class's ("" for none), from
    `runs`, _OWN_RUNS and _CLASS_RUNS rows covering them. Grouped once per question rather
    than asked per server: a class's runs, asked beside each of its servers, cost a pass over
    the class's servers per server."""
    own: dict[int, tuple[Any, ...]] = {}
    by_class: dict[int, tuple[Any, ...]] = {}
    for is_own, group, *figures in runs:
        (own if is_own else by_class)[group] = tuple(figures)
    found = []
    for row in rows:
        pk, _, class_id = row[:3]
        kept = own.get(pk) or (by_class.get(class_id) if class_id is not None else None)
        n, total, last, fitted = kept or (0, None, None, 0)
        found.append((*row, f"{n}:{total}:{last}:{fitted}" if n else ""))
    return found


def _runs_of(pk: int, class_id: int | None) -> QuerySet[Benchmark, tuple[Any, ...]]:
    """One server's runs' and its class's runs' figures, as _calibrations reads them: one
    union of plain aggregates."""
    runs = _OWN_RUNS.filter(server_id=pk)
    if class_id is not None:
        runs = runs.union(_CLASS_RUNS.filter(server__topology_class=class_id), all=True)
    return runs


def _question_server(hostname: str) -> tuple[Any, ...] | None:
    """A _QUESTION_COLUMNS row of one server: its columns, then its calibration."""
    row = _QUESTION_ROWS.filter(hostname=hostname).first()
    if row is None:
        return None
    pk, _, class_id = row[:3]
    return _calibrations([row], _runs_of(pk, class_id))[0]


def _question_server_from(row: Sequence[Any]) -> Server:
    """A server of a _QUESTION_COLUMNS row: only those columns are loaded (the rest, the
    topology document included, on first use)."""
    pk, name, class_id, snapshot_id, *snapshot, calibration = row
    server = Server.from_db(DEFAULT_DB_ALIAS, _SERVER_FIELDS, (pk, name, class_id, snapshot_id))
    if snapshot_id is not None:
        server.latest_snapshot = Snapshot.from_db(
            DEFAULT_DB_ALIAS, _SNAPSHOT_FIELDS, (snapshot_id, pk, *snapshot)
        )
    server.calibration = calibration  # type: ignore[attr-defined]
    return server


def server_for_questions(hostname: str) -> Server:
    """The server a cost or placement question names, with what identifies its model
    (`model_key`), in one query. Http404 when there is none."""
    row = _question_server(hostname)
    if row is None:
        raise Http404(f"no server named {hostname!r}")
    return _question_server_from(row)


def servers_for_questions(hostnames: Sequence[str] | None, *, rails: bool = False) -> list[Server]:
    """The named servers in that order (Http404 naming the first unknown one), or every
    server with a topology by hostname, each as `server_for_questions` gives it, and with
    `rails` what `rail_group` reads too (labels, the class's fingerprint): one query of a few
    columns and one of their runs grouped by server and by class, so that a question over ten
    thousand servers neither loads their snapshots nor builds three model objects a server."""
    servers = Server.objects.order_by("hostname")
    if hostnames is None:
        servers = servers.filter(latest_snapshot__isnull=False)
        own, by_class = _OWN_RUNS, _CLASS_RUNS
    else:
        servers = servers.filter(hostname__in=hostnames)
        own = _OWN_RUNS.filter(server__hostname__in=hostnames)
        by_class = _CLASS_RUNS.filter(
            server__topology_class__in=Server.objects.filter(hostname__in=hostnames).values(
                "topology_class"
            )
        )
    extra = ("labels", "topology_class__fingerprint") if rails else ()
    width = len(_QUESTION_COLUMNS) - 1
    rows = list(servers.values_list(*_QUESTION_COLUMNS[:-1], *extra))
    with_runs = _calibrations([row[:width] for row in rows], own.union(by_class, all=True))
    found = []
    for row, question_row in zip(rows, with_runs, strict=True):
        server = _question_server_from(question_row)
        if rails:
            server.labels, fingerprint = row[width:]
            if server.topology_class_id is not None:
                server.topology_class = TopologyClass.from_db(
                    DEFAULT_DB_ALIAS, ["id", "fingerprint"], [server.topology_class_id, fingerprint]
                )
        found.append(server)
    if hostnames is None:
        return found
    by_name = {s.hostname: s for s in found}
    for name in hostnames:
        if name not in by_name:
            raise Http404(f"no server named {name!r}")
    return [by_name[name] for name in hostnames]


def model_key(server: Server) -> ModelKey:
    """What identifies the server's cost model (see ModelKey). The benchmarks come from the
    server's `calibration` when it was read with it (`servers_for_questions`), else from a query.
    404 when the server has no topology yet."""
    snapshot: Snapshot | None = server.latest_snapshot
    if snapshot is None:
        raise Http404(f"{server.hostname!r} has no topology yet")
    limits.check_query_gpus(server.hostname, snapshot.gpu_count)
    calibration = getattr(server, "calibration", None)
    if calibration is None:
        pk, class_id = server.pk, server.topology_class_id
        (row,) = _calibrations([(pk, server.hostname, class_id)], _runs_of(pk, class_id))
        calibration = row[-1]

    def load() -> tuple[Topology, Calibration | None]:
        return snapshot.to_domain(), stored_calibration(server_benchmarks(server))

    wiring = snapshot.wiring_sha256 or "content:" + snapshot.content_sha256
    return ModelKey(
        server.topology_class_id, wiring, snapshot.gpu_model, snapshot.cpu_model, calibration, load
    )


def server_cost_model(server: Server) -> CostModel:
    """The server's latest topology as a cost model, calibrated by its benchmarks (or its
    class's); 404 when the server has no topology yet."""
    return cached_model(model_key(server))


# --- stored results in a server's own numbering -----------------------------------------


@functools.lru_cache(maxsize=4096)
def _gpu_order(content_sha256: str, load: Callable[[], Topology]) -> tuple[int, ...]:
    return canonical_gpus(load())


def snapshot_gpu_order(snapshot: Snapshot) -> tuple[int, ...]:
    """The snapshot's GPU indices in its class's canonical order, computed once per content
    (a few milliseconds each: not on every page view)."""
    return _gpu_order(snapshot.content_sha256, _Loader(snapshot))


@dataclass(frozen=True)
class _Loader:
    """Loads a snapshot's topology on a cache miss; equal for every snapshot (the cache key
    is the content hash beside it)."""

    snapshot: Snapshot = field(compare=False, hash=False)

    def __call__(self) -> Topology:
        return self.snapshot.to_domain()


def prices_own_models(server: Server) -> bool:
    """Whether the class analysis was priced for this server's own GPU and CPU models (those
    its class names). A class holds every server wired alike, and boards wired alike carry
    other GPUs (H100 and H200, A100 40 and 80 GB) in hosts of other CPUs."""
    snapshot, topology_class = server.latest_snapshot, server.topology_class
    if snapshot is None or topology_class is None:
        return True
    own = (snapshot.gpu_model, snapshot.cpu_model)
    return own == (topology_class.gpu_model, topology_class.cpu_model)


def own_advice(server: Server) -> dict[str, Any]:
    """The class analysis's advice (core.analysis.advice: layouts, recommendations, what the
    step time assumes) priced for this server's own GPU and CPU models, in its numbering;
    worked out once per wiring and models (by the health worker, for the few servers whose
    models are not the ones their class analysis priced)."""
    snapshot = server.latest_snapshot
    assert snapshot is not None
    wiring = snapshot.wiring_sha256 or "content:" + snapshot.content_sha256
    return _own_advice(wiring, snapshot.gpu_model, snapshot.cpu_model, _Loader(snapshot))


@functools.lru_cache(maxsize=64)
def _own_advice(
    wiring: str, gpu_model: str, cpu_model: str, load: Callable[[], Topology]
) -> dict[str, Any]:
    model = build_model(load(), gpu_model or None, cpu_model=cpu_model or None)
    return advice(model, gpu_model)


def analysis_result_for(server: Server, result: dict[str, Any] | None) -> dict[str, Any] | None:
    """A class's stored result in this server's own GPU numbering."""
    snapshot = server.latest_snapshot
    if not result or snapshot is None:
        return result
    return in_server_order(result, snapshot_gpu_order(snapshot))


def current_analysis(
    topology_class_id: int | None, *, result_as_text: bool = False
) -> Analysis | None:
    """The analysis at the current cost-model version, or failing that the newest other one,
    in one query. With `result_as_text` the result is left undecoded, as `result_text`."""
    if topology_class_id is None:
        return None
    analyses = Analysis.objects.filter(topology_class_id=topology_class_id).annotate(
        _not_current=Case(When(cost_model_version=COST_MODEL_VERSION, then=0), default=1)
    )
    if result_as_text:
        analyses = analyses.defer("result").annotate(result_text=Cast("result", TextField()))
    return analyses.order_by("_not_current", "-cost_model_version").first()


def current_analysis_key(
    topology_class_id: int | None, *, hostname: str = ""
) -> tuple[int, datetime] | None:
    """current_analysis's pick, as its id and last update (what a text of it is kept by): one
    plain query of the class's few analyses (one per cost-model version), picked here by the
    same rule, cheaper to build than the ordered subquery of another query. With `hostname`:
    of the class of the server so named, in the same one query."""
    rows: Iterable[Sequence[Any]]
    if hostname:
        with connection.cursor() as cursor:
            cursor.execute(_HOST_ANALYSES, [hostname])
            rows = cursor.fetchall()
    elif topology_class_id is None:
        return None
    else:
        rows = Analysis.objects.filter(topology_class_id=topology_class_id).values_list(
            "id", "updated_at", "cost_model_version"
        )
    picked = min(rows, key=lambda r: (r[2] != COST_MODEL_VERSION, -r[2]), default=None)
    return None if picked is None else (picked[0], picked[1])


def _host_analyses() -> str:
    """The analyses of the class of the server named by the one parameter, as (id, last
    update, cost-model version): the statement written out once, on the public cursor API.
    The server detail asks it on every read (the rest of the detail is kept whole), and
    building and compiling this ORM query each time cost several times running it. Names come
    from the models' _meta, so a renamed table or column follows; tests/web/test_reads.py holds
    its answer to the ORM's for every server."""
    a, s = Analysis, Server
    return (
        f"SELECT a.{column_name(a, 'id')}, a.{column_name(a, 'updated_at')}, "
        f"a.{column_name(a, 'cost_model_version')} "
        f"FROM {table_name(a)} a JOIN {table_name(s)} s "
        f"ON s.{column_name(s, 'topology_class')} = a.{column_name(a, 'topology_class')} "
        f"WHERE s.{column_name(s, 'hostname')} = %s"
    )


_HOST_ANALYSES = _host_analyses()


def stored_costs(server: Server) -> dict[str, Any]:
    """The cost tables of the class's analysis (calibrated ones too, when measured), and the
    server's own nccl-tests curves beside them."""
    analysis = current_analysis(server.topology_class_id)
    result = analysis.result if analysis is not None and analysis.result else {}
    result = analysis_result_for(server, result) or {}
    measured = []
    for b in Benchmark.objects.filter(server=server, kind=Benchmark.Kind.NCCL).order_by(
        "captured_at", "id"
    ):
        run = b.to_domain()
        assert isinstance(run, NcclRun)
        rows = [r for r in run.rows if r.out_of_place.busbw_gbps is not None]
        measured.append(
            {
                "benchmark_id": b.pk,
                "collective": run.collective,
                "gpu_count": b.gpu_count,
                "bytes": [r.bytes for r in rows],
                "busbw_gbps": [r.out_of_place.busbw_gbps for r in rows],
                "algbw_gbps": [r.out_of_place.algbw_gbps for r in rows],
                "time_us": [r.out_of_place.time_us for r in rows],
            }
        )
    return {
        "hostname": server.hostname,
        "analysis_status": analysis.status if analysis is not None else None,
        "cost_model_version": analysis.cost_model_version if analysis is not None else None,
        "costs": result.get("costs"),
        "calibrated_costs": result.get("calibrated_costs"),
        "measured": measured,
    }


def model_presets() -> list[dict[str, Any]]:
    return [{"key": key, **shape.to_document()} for key, shape in sorted(PRESETS.items())]
