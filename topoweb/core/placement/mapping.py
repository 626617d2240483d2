"""The best mapping of one layout on a server's free GPUs (`place`: exact, bounded, or past
the exact sizes a proven or locally improved start), and every layout of a model ranked by
predicted step time with memory fit (`recommend`)."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.costs import CostModel
from topoweb.core.ledger import Layout, LedgerEntry, ModelShape, price
from topoweb.core.placement.exact import OutOfTime, exact_remembered
from topoweb.core.placement.large import local_search
from topoweb.core.placement.objective import (
    DEFAULT_SHAPE,
    DimensionResult,
    Groups,
    StepCost,
    is_uniform,
    rank_groups,
)
from topoweb.core.placement.selection import LEFTOVER_CANDIDATES, candidate_subsets, quality
from topoweb.core.steptime import (
    ACHIEVED_FRACTION,
    GpuSpec,
    MemoryFit,
    NoFit,
    Settings,
    StepTime,
    first_fit,
    gpu_spec,
    layouts_for,
    lever_steps,
    memory_fit,
    smallest_fit,
)

EXACT_LIMIT = 8  # GPUs up to which the mapping search is exhaustive, whatever it takes
BOUNDED_LIMIT = 16  # up to which it is tried within the time budget (exact if it finishes)
SUBSET_LIMIT = 256  # free-GPU subsets tried exhaustively; past it, hierarchy windows
TIE = 1e-6  # relative step-time difference below which two answers are equal


@dataclass(frozen=True)
class Placement:
    layout: Layout
    shape: ModelShape
    mapping: tuple[int, ...]  # GPU of each rank
    groups: Groups = field(hash=False)
    step_comm_us: float  # every collective of the step, before any overlap
    naive_step_comm_us: float
    per_dimension: tuple[DimensionResult, ...]
    search: str  # "exact" or "local search (n evaluations)"
    calibrated: bool
    assumption: str
    step: StepTime
    naive_step_us: float  # the step time of GPU index order
    memory: MemoryFit
    spec: GpuSpec
    uniform: bool  # every mapping of these GPUs costs the same
    free: tuple[int, ...] = ()  # the free GPUs asked about
    leftover: tuple[int, ...] = ()  # free GPUs this job leaves
    leftover_busbw_gbps: float = 0.0  # what they still reach together (all_reduce, 256 MiB)
    choice: str = ""  # why these GPUs, when the job is smaller than the free set
    levers: tuple[str, ...] = ()  # memory levers pulled beyond what was asked (`pull_levers`)

    @property
    def step_us(self) -> float:
        return self.step.total_us

    @property
    def improvement(self) -> float:
        """Fraction of the naive order's step time saved."""
        if self.naive_step_us <= 0:
            return 0.0
        return max(0.0, 1 - self.step_us / self.naive_step_us)

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted(self.mapping))

    def to_document(self) -> dict[str, Any]:
        return {
            "layout": self.layout.__dict__,
            "model": self.shape.name,
            "gpus": list(self.gpus),
            "mapping": list(self.mapping),
            "groups": {k: [list(g) for g in v] for k, v in self.groups.items()},
            "predicted_step_time_us": round(self.step_us, 1),
            "naive_step_time_us": round(self.naive_step_us, 1),
            "breakdown": self.step.to_document(),
            "memory": self.memory.to_document(),
            "fits": self.memory.fits,
            "gpu": self.spec.to_document(),
            "assumed": list(self.spec.assumed),
            "predicted_step_comm_us": round(self.step_comm_us, 3),
            "naive_step_comm_us": round(self.naive_step_comm_us, 3),
            "improvement": round(self.improvement, 4),
            "uniform": self.uniform,
            "per_dimension": [d.to_document() for d in self.per_dimension],
            "search": self.search,
            "calibrated": self.calibrated,
            "assumption": self.assumption,
            "free": list(self.free),
            "leftover": list(self.leftover),
            "leftover_busbw_gbps": round(self.leftover_busbw_gbps, 3),
            "choice": self.choice,
            "levers": list(self.levers),
        }


def comm_us(objective: StepCost, mapping: Sequence[int]) -> float:
    """Every collective of the step (count x time), no overlap: the ledger's total."""
    groups = rank_groups(mapping, objective.layout, objective.dimensions)
    times = objective.times(groups)
    m = objective.plan.micro_batches
    return sum(
        times[(d, c)] * count * (1 if d == "dp" else m)
        for d, c, _b, count in objective.plan.collectives
    )


def place(
    model: CostModel,
    layout: Layout,
    free: Sequence[int] | None = None,
    shape: ModelShape | None = None,
    time_budget_s: float = 0.3,
    seed: int = 0,
    *,
    spec: GpuSpec | None = None,
    zero: int = 1,
    achieved: float = ACHIEVED_FRACTION,
    recompute: str = "selective",
    pull_levers: bool = False,
) -> Placement:
    """Best rank->GPU mapping for a TP x PP x DP (x EP) job on `free` GPUs (default all),
    by predicted step time. With `pull_levers`, a layout that does not fit as asked is judged
    under the first memory levers that make it fit, in practitioners' order (`lever_steps`),
    and the answer names them. A job smaller than the free set takes the subset with the lowest
    step time; among equals, the one that leaves the other free GPUs best connected.

    Exact for up to EXACT_LIMIT GPUs (branch and bound over every mapping, modulo the server's
    GPU symmetries and relabelling TP positions and DP replicas, which change no cost; not
    reading the pipeline backwards, which can); up to BOUNDED_LIMIT the same search within
    `time_budget_s` (exact when it finishes, else the best mapping it found); beyond, the
    best of the naive order and the hierarchy order with each nesting of TP, DP and PP,
    exact when a bound over what crosses between two NUMA nodes proves nothing beats it
    (`cut_bound_proves`), else improved by swaps; all within `time_budget_s`, never worse
    than naive."""
    shape = shape or DEFAULT_SHAPE
    spec = spec or gpu_spec(None, model.hardware.generation.name)
    levers: tuple[str, ...] = ()
    if pull_levers:
        found = first_fit(lever_steps(shape, zero, recompute), [layout], spec)
        if found is not None:
            settings = found[0]
            shape, zero, recompute, levers = (
                settings.shape, settings.zero, settings.recompute, settings.levers
            )  # fmt: skip
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    if layout.size > len(pool):
        raise ValueError(
            f"TP x PP x DP = {layout.tp} x {layout.pp} x {layout.dp} = "
            f"{layout.size} needs more than the {len(pool)} free GPUs"
        )
    objective = StepCost(model, layout, shape, spec, achieved, recompute=recompute, zero=zero)
    choice = ""
    if layout.size < len(pool):
        gpus, choice = _choose_subset(objective, pool, time_budget_s, seed)
    else:
        gpus = pool
    naive = tuple(gpus)
    naive_us = objective(naive)
    uniform = objective.uniform(gpus)
    if uniform:
        best, best_us = naive, naive_us
        search = "exact (one NVSwitch domain: every mapping costs the same)"
    elif len(gpus) <= EXACT_LIMIT:
        best, best_us = exact_remembered(objective, gpus)
        search = "exact"
    elif len(gpus) <= BOUNDED_LIMIT:
        try:
            best, best_us = exact_remembered(objective, gpus, time.perf_counter() + time_budget_s)
            search = "exact"
        except OutOfTime as stop:
            best, best_us = stop.best, stop.best_us
            search = (
                f"branch and bound stopped at the {time_budget_s * 1e3:.0f} ms budget "
                "(the best mapping found, not proven optimal)"
            )
    else:
        best, best_us, evals, proven = local_search(
            objective, model, list(gpus), time_budget_s, seed
        )
        search = (
            "exact (no mapping can beat it: a bound over what crosses between the NUMA nodes)"
            if proven
            else f"local search ({evals} evaluations)"
        )
    if best_us > naive_us:  # only rounding can do this; never advise worse than naive
        best, best_us = naive, naive_us
    groups = {k: v for k, v in rank_groups(best, layout).items() if v and len(v[0]) > 1}
    m = objective.plan.micro_batches
    entries = [
        LedgerEntry(d, c, b, count * (1 if d == "dp" else m), "")
        for d, c, b, count in objective.plan.collectives
    ]
    per_dim = tuple(
        DimensionResult(
            p.entry.dimension,
            p.entry.collective,
            p.entry.bytes,
            p.entry.count,
            p.each_us,
            p.total_us,
            p.bottleneck,
            p.bottleneck_class,
        )
        for p in price(model, entries, groups)
    )
    leftover = tuple(g for g in pool if g not in set(best))
    left_bw = quality(model, leftover)[0] if len(leftover) >= 2 else 0.0
    return Placement(
        layout,
        shape,
        best,
        rank_groups(best, layout),
        comm_us(objective, best),
        comm_us(objective, naive),
        per_dim,
        search,
        any(model.is_calibrated(d.bottleneck_class) for d in per_dim),
        model.hardware.assumption,
        objective.step(best),
        naive_us,
        memory_fit(
            shape, layout, spec.memory_bytes, zero, recompute=recompute, reserve=spec.reserve
        ),
        spec,
        uniform,
        pool,
        leftover,
        left_bw,
        choice,
        levers,
    )


def _choose_subset(
    objective: StepCost, pool: tuple[int, ...], budget_s: float, seed: int
) -> tuple[tuple[int, ...], str]:
    """The k free GPUs where the job runs fastest; among equals (within TIE), the choice whose
    remaining free GPUs reach the highest all_reduce bandwidth (fragmentation-aware)."""
    model, k = objective.model, objective.layout.size
    if math.comb(len(pool), k) <= SUBSET_LIMIT:
        candidates = list(itertools.combinations(pool, k))
    else:
        candidates = candidate_subsets(model, pool, k)
    scored = []
    for subset in candidates:
        if is_uniform(model, subset) or k == 1:
            us = objective(subset)
        elif k <= EXACT_LIMIT:
            us = exact_remembered(objective, subset)[1]
        else:
            us = local_search(objective, model, list(subset), budget_s / 8, seed)[1]
        scored.append((us, subset))
    best_us = min(us for us, _ in scored)
    tied = [s for us, s in scored if us <= best_us * (1 + TIE)]
    ranked = []
    for subset in tied[:LEFTOVER_CANDIDATES]:
        left = tuple(g for g in pool if g not in subset)
        ranked.append((-(quality(model, left)[0] if len(left) >= 2 else 0.0), subset))
    ranked.sort()
    chosen = ranked[0][1]
    why = (
        f"{len(candidates)} choices of {k} of the {len(pool)} free GPUs tried; "
        f"{len(tied)} tie on step time"
        + ("; the one leaving the remaining free GPUs best connected" if len(tied) > 1 else "")
    )
    return chosen, why


@dataclass(frozen=True)
class Recommendation:
    """Every layout of a shape on some GPUs, fastest first; the best fitting one, or why none
    fits and the smallest number of such servers that would. `settings`: the micro-batch,
    recomputation and ZeRO stage the layouts were judged under, with the levers pulled to
    get there from what was asked."""

    shape: ModelShape
    spec: GpuSpec
    placements: tuple[Placement, ...]  # by predicted step time, fitting ones first
    no_fit: NoFit | None
    zero: int
    achieved: float
    # Layouts left unpriced when pricing ran past RECOMMEND_OVERRUN x the budget (huge servers).
    unpriced: int = 0
    settings: Settings | None = None

    @property
    def best(self) -> Placement | None:
        return self.placements[0] if self.placements and self.placements[0].memory.fits else None

    def to_document(self) -> dict[str, Any]:
        n = len(self.placements[0].mapping) if self.placements else 0
        best = self.best
        settings = self.settings or Settings(self.shape, self.zero, "selective")
        return {
            "model": self.shape.to_document(),
            "gpu": self.spec.to_document(),
            "zero": settings.zero,
            "recompute": settings.recompute,
            "micro_batch": settings.shape.micro_batch,
            "levers": list(settings.levers),
            "achieved_fraction_of_peak": self.achieved,
            "recommended": best.to_document() if best else None,
            "fits": best is not None,
            "no_fit": self.no_fit.to_document(self.spec, n) if self.no_fit else None,
            "layouts": [p.to_document() for p in self.placements],
            "assumptions": STEP_ASSUMPTIONS,
            "assumed": list(self.spec.assumed),
        } | ({"unpriced_layouts": self.unpriced} if self.unpriced else {})


STEP_ASSUMPTIONS = (
    "1F1B pipeline, m = global batch / (micro-batch x DP) micro-batches; compute at the "
    "stated fraction of the GPU's dense bf16 peak; TP, EP and pipeline sends not overlapped; "
    "the DP gradient reduction overlaps the last micro-batch's backward pass (2/3 of its "
    "compute), at least 10 % exposed; memory: bf16 weights and grads, 12 bytes of Adam state "
    "per parameter (ZeRO shards it over DP), flash-attention activations; at least 10 % of "
    "each GPU kept back for the CUDA context, fragmentation and NCCL buffers (15 % of an "
    "assumed memory size); when nothing fits, levers in practitioners' order: micro-batch "
    "down to 1, selective then full activation recomputation, ZeRO-1, 2, 3, then more GPUs"
)


def recommend(
    model: CostModel,
    shape: ModelShape | None = None,
    free: Sequence[int] | None = None,
    *,
    spec: GpuSpec | None = None,
    zero: int = 1,
    achieved: float = ACHIEVED_FRACTION,
    time_budget_s: float = 0.3,
    recompute: str = "selective",
) -> Recommendation:
    """Every valid layout of `shape` on all `free` GPUs (default all) placed at its best
    mapping and ranked by predicted step time; layouts that do not fit in memory rank after
    every one that does and are never recommended. When none fits as asked, the levers are
    pulled in order (`lever_steps`) until one does; when none fits even then, the smallest
    number of such servers that would is said (`smallest_fit`)."""
    shape = shape or DEFAULT_SHAPE
    spec = spec or gpu_spec(None, model.hardware.generation.name)
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    layouts = layouts_for(shape, len(pool))
    steps = lever_steps(shape, zero, recompute)
    found_fit = first_fit(steps, layouts, spec)
    settings = found_fit[0] if found_fit else steps[0]
    each = time_budget_s / max(1, len(layouts))
    if len(pool) > BOUNDED_PAST:
        # Pricing alone can outgrow the budget (one layout of 576 GPUs costs about a second):
        # the likeliest first (fits in memory, shallowest pipeline, narrowest TP), and past
        # RECOMMEND_OVERRUN x the budget the rest are counted, not priced.
        layouts.sort(key=lambda lay: (not settings.fit(lay, spec).fits, lay.pp))
    deadline = time.perf_counter() + RECOMMEND_OVERRUN * time_budget_s
    found: list[Placement] = []
    for lay in layouts:
        if found and len(pool) > BOUNDED_PAST and time.perf_counter() > deadline:
            break
        found.append(
            place(
                model,
                lay,
                pool,
                settings.shape,
                each,
                spec=spec,
                zero=settings.zero,
                achieved=achieved,
                recompute=settings.recompute,
            )
        )
    found.sort(key=lambda p: (not p.memory.fits, p.step_us, p.layout.pp, -p.layout.tp))
    no_fit = None
    if not any(p.memory.fits for p in found):
        no_fit = smallest_fit(
            shape, spec, len(pool), zero, recompute=recompute, server_gpus=len(model.gpu_ids)
        )
    return Recommendation(
        settings.shape,
        spec,
        tuple(found),
        no_fit,
        settings.zero,
        achieved,
        len(layouts) - len(found),
        settings,
    )


# How far past its time budget a recommendation may run before its remaining layouts are left
# unpriced (servers over BOUNDED_PAST GPUs only: smaller ones always price every layout).
RECOMMEND_OVERRUN = 2.0
BOUNDED_PAST = 16
