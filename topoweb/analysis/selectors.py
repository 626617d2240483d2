"""Reads of analyses and the synchronous cost/placement queries: a server's cost model (built
once per topology, GPU model and calibration, then cached in-process), and the answers the REST
API gives from it and from the stored analysis of the server's topology class."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS
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
from topoweb.config.answers import answer_once
from topoweb.config.limits import LimitExceeded
from topoweb.core.analysis import COST_MODEL_VERSION, Fitted
from topoweb.core.costs import (
    Calibration,
    CostModel,
    build_model,
    calibrated,
    collective_cost,
    options_from_facts,
    with_options,
)
from topoweb.core.formats.nvml import NvmlFactsError, read_host, read_nvml
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.model import NcclRun, Topology
from topoweb.core.numbering import canonical_gpus, in_server_order
from topoweb.core.placement import (
    DEFAULT_SHAPE,
    SELECTION_BYTES,
    ServerPool,
    affinity,
    place,
    recommend,
    select_gpus,
    select_job,
)
from topoweb.core.placement.serving import serve
from topoweb.core.steptime import GpuSpec, gpu_spec, valid_layout_problem
from topoweb.fleet.fabric_selectors import server_fabric_places
from topoweb.fleet.models import Benchmark, Server, Snapshot, TopologyClass
from topoweb.fleet.selectors import models_note

log = logging.getLogger(__name__)

MODEL_CACHE_SIZE = 256
PLACEMENT_BUDGET_S = 0.3  # the synchronous search's budget for servers beyond the exact limit
SELECT_TOP = 5
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
class _ModelKey:
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
    benchmarks: str  # with_calibration's identity of the calibrating benchmarks
    load: Callable[[], tuple[Topology, Calibration | None]] = field(
        compare=False, hash=False, repr=False
    )


@functools.lru_cache(maxsize=MODEL_CACHE_SIZE)
def _cached_model(key: _ModelKey) -> CostModel:
    topology, calibration = key.load()
    model = build_model(topology, key.gpu_model or None)
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


def with_calibration(servers: QuerySet[Server]) -> QuerySet[Server]:
    """Servers annotated with `calibration`: which benchmarks `server_benchmarks` would
    calibrate each one's model with (its own, else its class's), without a query per server."""
    own = Benchmark.objects.filter(server=OuterRef("pk")).values("server")
    same_class = Benchmark.objects.filter(server__topology_class=OuterRef("topology_class")).values(
        "server__topology_class"
    )
    return servers.annotate(
        calibration=Coalesce(_benchmark_set(own), _benchmark_set(same_class), Value(""))
    )


_SERVER_FIELDS = ("id", "hostname", "topology_class_id", "latest_snapshot_id")
_SNAPSHOT_FIELDS = (
    "id",
    "server_id",
    "content_sha256",
    "wiring_sha256",
    "gpu_count",
    "gpu_model",
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
    "latest_snapshot__gpu_memory_bytes",
    "latest_snapshot__nvlink_domain",
    "calibration",
)


def _runs_by(group: str) -> QuerySet[Benchmark, tuple[Any, ...]]:
    """Benchmarks grouped by `group` (a server, or its class), as (own, count, sum and largest
    id, fitted by the current model): benchmark_set_identity's parts, `own` 1 for a server's."""
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
        .values_list("own", "n", "total", "last", "fitted")
    )
    return cast(QuerySet[Benchmark, tuple[Any, ...]], runs)


# Built once: each question copies them with its server's filter (building the aggregates is
# most of what asking them costs).
_QUESTION_ROWS = Server.objects.order_by().values_list(*_QUESTION_COLUMNS[:-1])
_OWN_RUNS = _runs_by("server_id")
_CLASS_RUNS = _runs_by("server__topology_class")


def _question_server(hostname: str) -> tuple[Any, ...] | None:
    """A _QUESTION_COLUMNS row of one server. Its calibration is asked in a query of its own:
    its runs' and its class's runs' figures in one union of plain aggregates, cheaper than
    with_calibration's subqueries, which pay off over many servers, not one."""
    row = _QUESTION_ROWS.filter(hostname=hostname).first()
    if row is None:
        return None
    pk, _, class_id = row[:3]
    runs = _OWN_RUNS.filter(server_id=pk)
    if class_id is not None:
        runs = runs.union(_CLASS_RUNS.filter(server__topology_class=class_id), all=True)
    found = {own: figures for own, *figures in runs}
    # Its own benchmarks, else its class's: as with_calibration writes it ("" for none).
    n, total, last, fitted = found.get(1) or found.get(0) or (0, None, None, 0)
    return (*row, f"{n}:{total}:{last}:{fitted}" if n else "")


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
    columns, so that a question over ten thousand servers neither loads their snapshots nor
    builds three model objects a server."""
    servers = with_calibration(Server.objects.all()).order_by("hostname")
    if hostnames is None:
        servers = servers.filter(latest_snapshot__isnull=False)
    else:
        servers = servers.filter(hostname__in=hostnames)
    extra = ("labels", "topology_class__fingerprint") if rails else ()
    found = []
    for row in servers.values_list(*_QUESTION_COLUMNS, *extra):
        server = _question_server_from(row[: len(_QUESTION_COLUMNS)])
        if rails:
            server.labels, fingerprint = row[len(_QUESTION_COLUMNS) :]
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


def model_key(server: Server) -> _ModelKey:
    """What identifies the server's cost model (see _ModelKey). The benchmarks come from the
    server's `calibration` annotation when it has one (`with_calibration`), else from a query.
    404 when the server has no topology yet."""
    snapshot: Snapshot | None = server.latest_snapshot
    if snapshot is None:
        raise Http404(f"{server.hostname!r} has no topology yet")
    limits.check_query_gpus(server.hostname, snapshot.gpu_count)
    calibration = getattr(server, "calibration", None)
    if calibration is None:
        calibration = with_calibration(Server.objects.filter(pk=server.pk)).values_list(
            "calibration",  # type: ignore[misc]  # an annotation the plugin does not see
            flat=True,
        )[0]

    def load() -> tuple[Topology, Calibration | None]:
        return snapshot.to_domain(), stored_calibration(server_benchmarks(server))

    wiring = snapshot.wiring_sha256 or "content:" + snapshot.content_sha256
    return _ModelKey(server.topology_class_id, wiring, snapshot.gpu_model, calibration, load)


def server_cost_model(server: Server) -> CostModel:
    """The server's latest topology as a cost model, calibrated by its benchmarks (or its
    class's); 404 when the server has no topology yet."""
    return _cached_model(model_key(server))


# --- queries (their answers kept by config.answers) ------------------------------------------


def _as_is(doc: dict[str, Any]) -> Any:
    """A kept answer's document served as it is (the default `form` of a query)."""
    return doc


def cost_of(
    server: Server,
    collective: str,
    gpus: Sequence[int],
    nbytes: int,
    algorithm: str | None,
    **options: Any,
) -> dict[str, Any]:
    """core.costs.collective_cost's document; ValueError (a 400) for GPUs the server lacks or
    an algorithm that does not apply. `options`: p2p, nodes, nic_gbps, nics_per_node,
    nvlink_nodes, bidirectional; the server's own facts (P2P status, PCIe, NICs) fill what the
    query leaves out."""
    model = server_cost_model(server)
    facts = _facts_options(server.latest_snapshot)
    nic = options.get("nic_gbps") or facts.get("nic_gbits")
    model = with_options(
        model,
        p2p=options.get("p2p") or "auto",
        p2p_status=facts.get("p2p_status"),
        nodes=options.get("nodes") or 1,
        nic_gbits=nic,
        nics_per_node=options.get("nics_per_node") or facts.get("nics_per_node"),
        nvlink_nodes=bool(options.get("nvlink_nodes")),
        pcie_gen=facts.get("pcie_gen"),
        pcie_width=facts.get("pcie_width"),
    )
    return collective_cost(
        model,
        collective,
        gpus,
        nbytes,
        algorithm,
        bidirectional=bool(options.get("bidirectional")),
    ).to_document()


def _facts_options(snapshot: Snapshot | None) -> dict[str, Any]:
    if snapshot is None:
        return {}
    host = snapshot.host if isinstance(snapshot.host, dict) else None
    topo_p2p = (host or {}).get("topo_p2p")
    text = topo_p2p.get("read") if isinstance(topo_p2p, dict) else None
    try:
        nvml = read_nvml(snapshot.nvml) if isinstance(snapshot.nvml, dict) else None
        host_facts = read_host(host) if host is not None else None
    except NvmlFactsError:
        nvml, host_facts = None, None
    return options_from_facts(nvml, host_facts, text if isinstance(text, str) else None)


def resolve_shape(
    model: str | dict[str, Any] | None, overrides: dict[str, Any] | None = None
) -> ModelShape | None:
    """A preset name or a full shape, with seq / global_batch / micro_batch overrides; None
    for the default preset without overrides."""
    if model is None and not overrides:
        return None
    if model is None:
        model = "llama-7b"
    if isinstance(model, str):
        if model not in PRESETS:
            raise ValueError(
                f"unknown model preset {model!r}; expected one of {', '.join(sorted(PRESETS))}"
            )
        shape = PRESETS[model]
    else:
        shape = ModelShape(**model)
    return dataclasses.replace(shape, **overrides) if overrides else shape


def server_gpu_spec(server: Server, model: CostModel) -> GpuSpec:
    """Peak and memory of the server's GPUs: its GPU model's catalogue entry, NVML's memory
    total where the collector sent one."""
    snapshot = server.latest_snapshot
    name, memory = (snapshot.gpu_model, snapshot.gpu_memory_bytes) if snapshot else ("", None)
    spec = gpu_spec(name or None, model.hardware.generation.name, memory)
    note = models_note(snapshot)
    return dataclasses.replace(spec, assumed=(note, *spec.assumed)) if note else spec


def check_layout(server: Server, layout: Layout, shape: ModelShape | None) -> None:
    """ValueError naming why the layout cannot run the model on this server (TP not dividing
    the heads, PP the layers, TP or EP not fitting whole in the server), before any search."""
    snapshot = server.latest_snapshot
    gpus = snapshot.gpu_count if snapshot is not None else layout.size
    problem = valid_layout_problem(shape or DEFAULT_SHAPE, layout, gpus)
    if problem is not None:
        raise ValueError(f"{(shape or DEFAULT_SHAPE).name}: {problem}")


def placement_for(
    server: Server,
    layout: Layout,
    free: Sequence[int] | None,
    shape: ModelShape | None,
    zero: int = 1,
    form: Callable[[dict[str, Any]], Any] = _as_is,
) -> Any:
    """The placement document, in the `form` the caller serves it (a module-level function:
    it is part of the cache key), computed once per model and question."""
    key = model_key(server)

    def compute() -> Any:
        model = _cached_model(key)
        spec = server_gpu_spec(server, model)
        budget = PLACEMENT_BUDGET_S
        placed = place(model, layout, free, shape, budget, spec=spec, zero=zero, pull_levers=True)
        return form(placed.to_document())

    free_key = tuple(free) if free is not None else None
    # It also reads the GPUs' memory and models (server_gpu_spec), not in the model key.
    memory = server.latest_snapshot.gpu_memory_bytes  # type: ignore[union-attr]  # model_key: set
    gpus = (memory, models_note(server.latest_snapshot))
    return answer_once(("placement", key, gpus, layout, free_key, shape, zero, form), compute)


def recommendation_for(
    server: Server, free: Sequence[int] | None, shape: ModelShape | None, zero: int = 1
) -> dict[str, Any]:
    model = server_cost_model(server)
    doc = recommend(
        model,
        shape,
        free,
        spec=server_gpu_spec(server, model),
        zero=zero,
        time_budget_s=PLACEMENT_BUDGET_S,
    ).to_document()
    return {"hostname": server.hostname, **doc}


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


def analysis_result_for(server: Server, result: dict[str, Any] | None) -> dict[str, Any] | None:
    """A class's stored result in this server's own GPU numbering."""
    snapshot = server.latest_snapshot
    if not result or snapshot is None:
        return result
    return in_server_order(result, snapshot_gpu_order(snapshot))


def selection(
    k: int,
    wanted: Sequence[tuple[str, Sequence[int] | None]] | None,
    collective: str,
    form: Callable[[dict[str, Any]], Any] = _as_is,
) -> Any:
    """The best k GPUs over the named servers (free masks) or every server with a topology
    (all GPUs free), ranked by predicted bus bandwidth of `collective` at 256 MiB, in the
    `form` the caller serves it; computed once per servers' models and question. The core
    ranks by all_reduce with a fragmentation tie-break; another collective re-ranks its
    shortlist."""
    candidates: list[tuple[Server, Sequence[int] | None]]
    if wanted is None:
        candidates = [(s, None) for s in servers_for_questions(None)]
    elif len(wanted) == 1:
        candidates = [(server_for_questions(wanted[0][0]), wanted[0][1])]
    else:
        found = servers_for_questions([name for name, _ in wanted])
        candidates = [(server, free) for server, (_, free) in zip(found, wanted, strict=True)]
    # Each server's model key, or why it is left out (too large, no topology yet).
    asked: list[tuple[str, _ModelKey | str, Sequence[int] | None]] = []
    for server, free in candidates:
        try:
            if server.latest_snapshot is not None:
                limits.check_select_gpus(server.hostname, server.latest_snapshot.gpu_count)
            asked.append((server.hostname, model_key(server), free))
        except LimitExceeded as exc:
            asked.append((server.hostname, exc.message, free))
        except Http404 as exc:
            asked.append((server.hostname, str(exc), free))

    def compute() -> Any:
        return form(_select(asked, k, collective))

    question = tuple(
        (name, key, tuple(free) if free is not None else None) for name, key, free in asked
    )
    # Kept under a digest of the question: the answer is small, but a question over a
    # thousand servers is a model key and free set a server, each key holding its server, and
    # a scheduler asks a new one every time. The repr shows everything a key compares.
    digest = hashlib.sha256(repr(question).encode()).hexdigest()
    return answer_once(("selection", k, collective, digest, form), compute)


def _select(
    asked: list[tuple[str, _ModelKey | str, Sequence[int] | None]], k: int, collective: str
) -> dict[str, Any]:
    skipped: list[dict[str, str]] = []
    pools: dict[str, tuple[CostModel, Sequence[int]]] = {}
    for hostname, key, free in asked:
        if isinstance(key, str):
            skipped.append({"hostname": hostname, "reason": key})
            continue
        # One server whose model cannot be built (bad stored data) is reported and left out;
        # it never breaks the answer about the others.
        try:
            model = _cached_model(key)
        except Exception as exc:
            log.exception("selection: the cost model of %s failed", hostname)
            skipped.append({"hostname": hostname, "reason": f"its cost model failed: {exc}"})
            continue
        pools[hostname] = (model, sorted(model.gpu_ids) if free is None else free)
    shortlist = select_gpus(
        pools, k, top=SELECT_TOP * 4 if collective != "all_reduce" else SELECT_TOP
    )
    ranked = []
    for rank, choice in enumerate(shortlist):
        model = pools[choice.server][0]
        doc = choice.to_document()
        doc["hostname"] = doc.pop("server")
        cost = (
            collective_cost(model, collective, choice.gpus, SELECTION_BYTES).to_document()
            if k >= 2
            else None
        )
        doc["cost"] = cost
        ranked.append((-(cost["busbw_gbps"] if cost else 0.0), rank, doc))
    ranked.sort(key=lambda item: (item[0], item[1]))
    return {
        "k": k,
        "collective": collective,
        "bytes": SELECTION_BYTES,
        "selections": [doc for _, _, doc in ranked[:SELECT_TOP]],
        "skipped": skipped,
    }


def rail_group(server: Server) -> str:
    """Servers whose NIC i sits on the same leaf switch, where no fabric capture places the
    server (job_selection reads its leaf group then): the `rail_group` label (or `pod`) where
    the fleet sets one, else servers of one topology class are taken as cabled alike."""
    labels = server.labels if isinstance(server.labels, dict) else {}
    for key in ("rail_group", "pod"):
        if labels.get(key):
            return f"{key}={labels[key]}"
    fingerprint = server.topology_class.fingerprint if server.topology_class else ""
    return f"class={fingerprint[:12]}"


def job_selection(
    wanted: Sequence[tuple[str, Sequence[int] | None]] | None,
    k: int | None,
    layout: Layout | None,
    shape: ModelShape | None,
    *,
    allow_tp_across_servers: bool = False,
) -> dict[str, Any]:
    """Where a job of k GPUs or a TP x PP x DP layout runs over the named servers (free
    masks) or the whole fleet: one server if any can hold it, else the fewest servers of one
    rail group; each answer names servers, GPUs, NICs and the predicted cost."""
    chosen: list[tuple[Server, Sequence[int] | None]]
    if wanted is None:
        chosen = [(s, None) for s in servers_for_questions(None, rails=True)]
    else:
        found = servers_for_questions([name for name, _ in wanted], rails=True)
        chosen = [(server, free) for server, (_, free) in zip(found, wanted, strict=True)]
    pools = {}
    places = server_fabric_places({server.hostname for server, _ in chosen})
    for server, free in chosen:
        model = server_cost_model(server)
        place = places.get(server.hostname)
        pools[server.hostname] = ServerPool(
            model,
            tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids)))),
            f"leaf={place.fabric}:{place.leaf_group}" if place else rail_group(server),
            server_gpu_spec(server, model),
            fabric=place,
            nvlink_domain=server.latest_snapshot.nvlink_domain if server.latest_snapshot else "",
        )
    picks = select_job(
        pools, k=k, layout=layout, shape=shape, allow_tp_across_servers=allow_tp_across_servers
    )
    return {
        "k": k if layout is None else layout.size,
        "layout": layout.__dict__ if layout else None,
        "selections": [p.to_document() for p in picks],
        # What each server's answer guessed (GPU model, generation, memory), by server.
        "assumed": [
            f"{name}: {guess}"
            for name, pool in pools.items()
            for guess in (pool.spec.assumed if pool.spec else ())
        ],
    }


def serving_for(
    server: Server,
    shape: ModelShape | None,
    context: int | None,
    concurrency: int,
    dtype: str,
    free: Sequence[int] | None = None,
) -> dict[str, Any]:
    """How the server would serve the model (core.placement.serving), computed once per model
    and question."""
    key = model_key(server)

    def compute() -> dict[str, Any]:
        model = _cached_model(key)
        spec = server_gpu_spec(server, model)
        return serve(model, shape, context, concurrency, dtype, spec=spec, free=free).to_document()

    memory = server.latest_snapshot.gpu_memory_bytes  # type: ignore[union-attr]  # model_key: set
    gpus = (memory, models_note(server.latest_snapshot))
    free_key = tuple(free) if free is not None else None
    question = ("serving", key, gpus, shape, context, concurrency, dtype, free_key)
    return {"hostname": server.hostname, **answer_once(question, compute)}


def fleet_serving(
    wanted: Sequence[tuple[str, Sequence[int] | None]] | None,
    shape: ModelShape | None,
    context: int | None,
    concurrency: int,
    dtype: str,
) -> dict[str, Any]:
    """Serving over the named servers (free masks) or the whole fleet: each server's answer,
    those holding the most replicas first, then the shortest time per output token."""
    chosen: list[tuple[Server, Sequence[int] | None]]
    if wanted is None:
        chosen = [(s, None) for s in servers_for_questions(None)]
    else:
        found = servers_for_questions([name for name, _ in wanted])
        chosen = [(server, free) for server, (_, free) in zip(found, wanted, strict=True)]
    answers = [serving_for(s, shape, context, concurrency, dtype, free) for s, free in chosen]

    def rank(doc: dict[str, Any]) -> tuple[Any, ...]:
        best = doc["recommended"] or {}
        return (
            best == {},
            -best.get("replicas", 0),
            best.get("time_per_output_token_ms", 0.0),
            doc["hostname"],
        )

    answers.sort(key=rank)
    return {"servers": answers}


def affinity_of(server: Server) -> dict[str, Any]:
    return {"hostname": server.hostname, **affinity(server_cost_model(server)).to_document()}


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
    if hostname:
        analyses = Analysis.objects.filter(topology_class__servers__hostname=hostname)
    elif topology_class_id is None:
        return None
    else:
        analyses = Analysis.objects.filter(topology_class_id=topology_class_id)
    rows = analyses.values_list("id", "updated_at", "cost_model_version")
    picked = min(rows, key=lambda r: (r[2] != COST_MODEL_VERSION, -r[2]), default=None)
    return None if picked is None else (picked[0], picked[1])


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
