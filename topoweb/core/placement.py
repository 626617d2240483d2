"""Placement advice: the layout and rank->GPU mapping with the lowest predicted step time
that fits in memory (core/steptime.py), which free GPUs a smaller job should take
(fragmentation-aware), the best k GPUs over servers, and per-GPU NIC/NUMA affinity."""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topoweb.core.costs import (
    BOUND_MARGIN,
    CostModel,
    chain_time,
    chain_time_bound,
    collective_cost,
    ring_time_bound,
    slowest_group_us,
    solo_time_bound,
    with_options,
)
from topoweb.core.ledger import PRESETS, Layout, LedgerEntry, ModelShape, price
from topoweb.core.model import Device, link_class_rank
from topoweb.core.steptime import (
    ACHIEVED_FRACTION,
    GpuSpec,
    MemoryFit,
    NoFit,
    StepPlan,
    StepTime,
    gpu_spec,
    layouts_for,
    memory_fit,
    smallest_fit,
    step_plan,
)
from topoweb.core.symmetry import symmetry

EXACT_LIMIT = 8  # GPUs up to which the mapping search is exhaustive, whatever it takes
BOUNDED_LIMIT = 16  # up to which it is tried within the time budget (exact if it finishes)
DEFAULT_SHAPE = PRESETS["llama-7b"]
SELECTION_BYTES = 256 << 20  # the all_reduce size k-GPU selection ranks by
DIMENSIONS = ("tp", "ep", "dp", "pp")
SUBSET_LIMIT = 256  # free-GPU subsets tried exhaustively; past it, hierarchy windows
TIE = 1e-6  # relative step-time difference below which two answers are equal

Groups = dict[str, list[tuple[int, ...]]]


def rank_groups(
    mapping: Sequence[int], layout: Layout, dimensions: frozenset[str] = frozenset(DIMENSIONS)
) -> Groups:
    """Megatron order, TP fastest: rank = tp + TP * (dp + DP * pp); EP splits DP."""
    tp, pp, dp, ep = layout.tp, layout.pp, layout.dp, layout.ep
    stride = tp * dp
    out: Groups = {}
    if "tp" in dimensions:
        out["tp"] = [tuple(mapping[i : i + tp]) for i in range(0, len(mapping), tp)]
    if "dp" in dimensions:
        out["dp"] = [
            tuple(mapping[p * stride + t : (p + 1) * stride : tp])
            for p in range(pp)
            for t in range(tp)
        ]
    if "pp" in dimensions:
        out["pp"] = [tuple(mapping[j::stride]) for j in range(stride)]
    if "ep" in dimensions:
        out["ep"] = [
            tuple(mapping[p * stride + t + tp * b * ep : p * stride + t + tp * (b + 1) * ep : tp])
            for p in range(pp)
            for t in range(tp)
            for b in range(dp // ep)
        ]
    return out


def _key(dimension: str, groups: Sequence[tuple[int, ...]]) -> Any:
    """What a dimension's cost depends on: its groups as sets; pipeline chains as sequences
    (the cost model is not the same both ways: a send across sockets may be staged on one
    side, so neither one chain nor the whole pipeline read backwards costs the same)."""
    return frozenset(map(tuple if dimension == "pp" else frozenset, groups))


# Collective times per cost model, shared by every layout and shape asked of that model.
_TIMES: weakref.WeakKeyDictionary[CostModel, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


class StepCost:
    """Predicted step time (us) of a mapping (GPU of each rank): what `place` minimises.
    Collective times are memoised per dimension's group structure and message size, since
    many mappings share their TP partition, their DP partition..."""

    def __init__(
        self,
        model: CostModel,
        layout: Layout,
        shape: ModelShape | None = None,
        spec: GpuSpec | None = None,
        achieved: float = ACHIEVED_FRACTION,
    ):
        self.model = model
        self.layout = layout
        self.shape = shape or DEFAULT_SHAPE
        self.spec = spec or gpu_spec(None, model.hardware.generation.name)
        self.plan: StepPlan = step_plan(self.shape, layout, self.spec, achieved)
        self.memo = _TIMES.setdefault(model, {})
        self.dimensions = frozenset(d for d, *_ in self.plan.collectives)
        self.symmetric = False  # memoise groups under the server's symmetries (searches)

    def each_us(self, dimension: str, collective: str, nbytes: int, key: Any, groups: Any) -> float:
        memo_key = (dimension, collective, nbytes, key)
        t = self.memo.get(memo_key)
        if t is None:
            gs = [g for g in groups if len(g) > 1]
            # Groups a symmetry of the server maps onto these cost the same: priced once.
            # Not pipeline chains: a route per hop and one max-min share cost less than their
            # key (in their direction: n^2 atoms), and few chain sets recur under symmetry.
            class_key: Any = None
            if self.symmetric and gs and dimension != "pp":
                canon = symmetry(self.model).sets_key(gs)
                class_key = ("~", dimension, collective, nbytes, canon)
                t = self.memo.get(class_key)
            if t is None:
                t = (
                    slowest_group_us(self.model, collective, gs, nbytes, dimension == "pp")
                    if gs
                    else 0.0
                )
                if class_key is not None:
                    self.memo[class_key] = t
            self.memo[memo_key] = t
        return t

    def solo_us(
        self, dimension: str, collective: str, nbytes: int, group: tuple[int, ...]
    ) -> float:
        """One group's time with nothing else running: a lower bound of its time in company."""
        if len(group) < 2:
            return 0.0
        chain = dimension == "pp"
        key = tuple(group) if chain else frozenset(group)
        memo_key = ("solo", collective, nbytes, chain, key)
        t = self.memo.get(memo_key)
        if t is None:
            class_key: Any = None
            if self.symmetric and not chain:  # a chain alone is cheaper priced than keyed
                canon = symmetry(self.model).set_key(group)
                class_key = ("~solo", collective, nbytes, chain, canon)
                t = self.memo.get(class_key)
            if t is None:
                t = slowest_group_us(self.model, collective, [group], nbytes, chain)
                if class_key is not None:
                    self.memo[class_key] = t
            self.memo[memo_key] = t
        return t

    def solo_bound_us(
        self, dimension: str, collective: str, nbytes: int, group: tuple[int, ...]
    ) -> float:
        """A lower bound of `solo_us` without a ring search (costs.solo_time_bound), where
        that search is dear: groups of 4 GPUs or more with an NVLink pair, whose rings are
        searched again and again to pack NVLink capacity. 0.0 elsewhere: a group of up to 3
        GPUs is its own ring, a PCIe group's ring is one quick search (pricing costs about
        what bounding would), and pipeline chains need no ring."""
        if len(group) < 4 or dimension == "pp":
            return 0.0
        memo_key = ("bound", collective, nbytes, frozenset(group))
        t = self.memo.get(memo_key)
        if t is None and not any(
            self.model.hop_class((a, b)) == "nvlink" for a in group for b in group if a != b
        ):
            t = self.memo[memo_key] = 0.0
        if t is None:
            # Per class, as `solo_us` prices it: the class's representative bounds the time
            # the search will use for this group.
            class_key: Any = None
            if self.symmetric:
                class_key = ("~bound", collective, nbytes, symmetry(self.model).set_key(group))
                t = self.memo.get(class_key)
            if t is None:
                t = solo_time_bound(self.model, collective, group, nbytes)
                if class_key is not None:
                    self.memo[class_key] = t
            self.memo[memo_key] = t
        return t

    def times(self, groups: Groups) -> dict[tuple[str, str], float]:
        out = {}
        for dim, coll, nbytes, _count in self.plan.collectives:
            gs = groups[dim]
            out[(dim, coll)] = self.each_us(dim, coll, nbytes, _key(dim, gs), gs)
        return out

    def step(self, mapping: Sequence[int]) -> StepTime:
        return self.plan.step(self.times(rank_groups(mapping, self.layout, self.dimensions)))

    def __call__(self, mapping: Sequence[int]) -> float:
        return self.step(mapping).total_us

    def uniform(self, gpus: Sequence[int]) -> bool:
        """True when every mapping costs the same: all GPUs behind one NVSwitch domain."""
        return _uniform(self.model, gpus)


def _uniform(model: CostModel, gpus: Sequence[int]) -> bool:
    h = model.hierarchy
    domains = {h.domain_of(model.gpu_ids[g]) for g in gpus}
    only = next(iter(domains))
    return len(domains) == 1 and only is not None and only.fabric == "nvswitch"


@dataclass(frozen=True)
class DimensionResult:
    dimension: str
    collective: str
    bytes: int
    count: int
    each_us: float
    total_us: float
    bottleneck: str
    bottleneck_class: str

    def to_document(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


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
        }


def _comm_us(objective: StepCost, mapping: Sequence[int]) -> float:
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
) -> Placement:
    """Best rank->GPU mapping for a TP x PP x DP (x EP) job on `free` GPUs (default all),
    by predicted step time. A job smaller than the free set takes the subset with the lowest
    step time; among equals, the one that leaves the other free GPUs best connected.

    Exact for up to EXACT_LIMIT GPUs (branch and bound over every mapping, modulo the server's
    GPU symmetries and relabelling TP positions and DP replicas, which change no cost; not
    reading the pipeline backwards, which can); up to BOUNDED_LIMIT the same search within
    `time_budget_s` (exact when it finishes, else the best mapping it found); beyond, the
    best of the naive order and the hierarchy order with each nesting of TP, DP and PP,
    exact when a bound over what crosses between two NUMA nodes proves nothing beats it
    (`_cut_bound_proves`), else improved by swaps; all within `time_budget_s`, never worse
    than naive."""
    shape = shape or DEFAULT_SHAPE
    spec = spec or gpu_spec(None, model.hardware.generation.name)
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    if layout.size > len(pool):
        raise ValueError(
            f"TP x PP x DP = {layout.tp} x {layout.pp} x {layout.dp} = "
            f"{layout.size} needs more than the {len(pool)} free GPUs"
        )
    objective = StepCost(model, layout, shape, spec, achieved)
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
        best, best_us = _exact_cached(objective, gpus)
        search = "exact"
    elif len(gpus) <= BOUNDED_LIMIT:
        try:
            best, best_us = _exact_cached(objective, gpus, time.perf_counter() + time_budget_s)
            search = "exact"
        except _OutOfTime as stop:
            best, best_us = stop.best, stop.best_us
            search = (
                f"branch and bound stopped at the {time_budget_s * 1e3:.0f} ms budget "
                "(the best mapping found, not proven optimal)"
            )
    else:
        best, best_us, evals, proven = _local_search(
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
    left_bw = _quality(model, leftover)[0] if len(leftover) >= 2 else 0.0
    return Placement(
        layout,
        shape,
        best,
        rank_groups(best, layout),
        _comm_us(objective, best),
        _comm_us(objective, naive),
        per_dim,
        search,
        any(model.is_calibrated(d.bottleneck_class) for d in per_dim),
        model.hardware.assumption,
        objective.step(best),
        naive_us,
        memory_fit(shape, layout, spec.memory_bytes, zero),
        spec,
        uniform,
        pool,
        leftover,
        left_bw,
        choice,
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
        candidates = _candidate_subsets(model, pool, k)
    scored = []
    for subset in candidates:
        if _uniform(model, subset) or k == 1:
            us = objective(subset)
        elif k <= EXACT_LIMIT:
            us = _exact_cached(objective, subset)[1]
        else:
            us = _local_search(objective, model, list(subset), budget_s / 8, seed)[1]
        scored.append((us, subset))
    best_us = min(us for us, _ in scored)
    tied = [s for us, s in scored if us <= best_us * (1 + TIE)]
    ranked = []
    for subset in tied[:LEFTOVER_CANDIDATES]:
        left = tuple(g for g in pool if g not in subset)
        ranked.append((-(_quality(model, left)[0] if len(left) >= 2 else 0.0), subset))
    ranked.sort()
    chosen = ranked[0][1]
    why = (
        f"{len(candidates)} choices of {k} of the {len(pool)} free GPUs tried; "
        f"{len(tied)} tie on step time"
        + ("; the one leaving the remaining free GPUs best connected" if len(tied) > 1 else "")
    )
    return chosen, why


def _exact_cached(
    objective: StepCost, gpus: Sequence[int], deadline: float | None = None
) -> tuple[tuple[int, ...], float]:
    """`_exact`, remembered per cost model: the same question about a class answers at once
    (only a search that finished: one stopped by `deadline` raises _OutOfTime)."""
    plan = objective.plan
    key = ("exact", tuple(sorted(gpus)), plan.layout, plan.collectives, plan.compute_mb_us,
           plan.micro_batches)  # fmt: skip
    hit = objective.memo.get(key)
    if hit is None:
        hit = objective.memo[key] = _exact(objective, gpus, deadline)
    found: tuple[tuple[int, ...], float] = hit
    return found


class _OutOfTime(Exception):
    """The branch and bound ran past its deadline; `best` is the best mapping it had found."""

    best: tuple[int, ...] = ()
    best_us: float = math.inf


def _exact(
    objective: StepCost, gpus: Sequence[int], deadline: float | None = None
) -> tuple[tuple[int, ...], float]:
    """Branch and bound over rank->GPU mappings, built rank by rank in Megatron order with
    the relabellings that change no group fixed (TP positions of stage 0's first row and DP
    replicas of its first column ascending). A group's time alone
    is a lower bound of its time beside the other groups of its dimension (sharing only slows
    it), and the step time is monotone in each dimension's time: as soon as a group is
    complete its solo time raises its dimension's bound, as soon as a dimension is complete
    its contended time replaces the bound, and a partial mapping whose bound reaches the
    best step found is cut. Group costs are memoised per cost model, so the same group met
    in another branch (or another layout) costs a lookup."""
    gpus = tuple(sorted(gpus))
    layout, plan = objective.layout, objective.plan
    n = len(gpus)
    positions = rank_groups(tuple(range(n)), layout)
    wanted = {d: [(c, b, k) for dd, c, b, k in plan.collectives if dd == d] for d in DIMENSIONS}
    live = [d for d in DIMENSIONS if wanted[d] and positions[d] and len(positions[d][0]) > 1]
    slot = {d: i for i, d in enumerate(DIMENSIONS)}
    # What completes at each rank: (dimension slot, positions of the group), and the
    # dimensions whose last group completes there.
    # (itemgetter of the group's positions: its GPUs from the mapping, as a tuple)
    groups_at: list[list[tuple[int, str, Callable[[Any], Any]]]] = [[] for _ in range(n)]
    dims_at: list[list[tuple[int, str]]] = [[] for _ in range(n)]
    for d in live:
        for grp in positions[d]:
            groups_at[max(grp)].append((slot[d], d, operator.itemgetter(*grp)))
        dims_at[max(max(g) for g in positions[d])].append((slot[d], d))
    # Ranks where a group that `solo_bound` can bound without a ring search completes.
    bounded_at = [False] * n
    for d in live:
        if d != "pp" and len(positions[d][0]) >= 4:
            for grp in positions[d]:
                bounded_at[max(grp)] = True
    # A pipeline chain's first stages alone send over a subset of its hops: no faster link,
    # no lighter load, no lower latency class than the whole chain (see _chain_time), so
    # their time bounds the chain's before its last stage is placed (PP4, PP8 layouts).
    prefixes_at: list[list[tuple[int, str, Callable[[Any], Any]]]] = [[] for _ in range(n)]
    if "pp" in live:
        for grp in positions["pp"]:
            for i in range(1, len(grp) - 1):
                prefixes_at[grp[i]].append((slot["pp"], "pp", operator.itemgetter(*grp[: i + 1])))
    total = plan.total_us
    model = objective.model

    # A group's summed solo time and bound per dimension, kept for this search by the group's
    # GPUs in rank order: the same group meets the search in many branches, and these dicts
    # answer it without the cost memo's keys (frozensets, symmetry classes).
    def summed(
        price: Callable[[str, str, int, tuple[int, ...]], float],
    ) -> Callable[[str, tuple[int, ...]], float]:
        kept: dict[tuple[str, tuple[int, ...]], float] = {}

        def per_group(d: str, group: tuple[int, ...]) -> float:
            t = kept.get((d, group))
            if t is None:
                t = kept[(d, group)] = sum(k * price(d, c, b, group) for c, b, k in wanted[d])
            return t

        return per_group

    solo = summed(objective.solo_us)
    solo_bound = summed(objective.solo_bound_us)

    # What the complete pipeline chains load together bounds the pipeline's contended time
    # (costs.chain_time_bound) before its last chain is placed, and before its contended
    # time is priced once it is. (Groups of other dimensions would need their rings, which
    # pricing under symmetries often spares: a bound from them cost more than it cut.)
    shared: dict[str, Callable[[float], float]] = {}
    if "pp" in live:
        fs = [(k, chain_time_bound(model, b)) for _c, b, k in wanted["pp"]]
        if all(f is not None for _, f in fs):
            shared["pp"] = _summed([(k, f) for k, f in fs if f is not None])
    loads: dict[tuple[int, ...], tuple[list[tuple[int, float]], float]] = {}
    caps = model._caps

    def load(chain: tuple[int, ...]) -> tuple[list[tuple[int, float]], float]:
        """The chain's load on what other chains may also cross (`private` resources left
        out: the rate they give is no lower, so a bound from it still holds), and the least
        capacity / load over all of it (its rate alone)."""
        got = loads.get(chain)
        if got is None:
            ld = model.load(((chain[i], chain[i + 1]), 1.0) for i in range(len(chain) - 1))
            shareable = [(x, w) for x, w in ld.items() if not model.private(x)]
            got = loads[chain] = (shareable, min(caps[x] / w for x, w in ld.items()))
        return got

    # Per dimension, the GPUs of each of its groups from the mapping (tuples).
    members = {d: [operator.itemgetter(*grp) for grp in positions[d]] for d in live}

    def contended(d: str, mapping: Sequence[int]) -> float:
        gs = [gpus_of(mapping) for gpus_of in members[d]]
        key = _key(d, gs)
        return sum(k * objective.each_us(d, c, b, key, gs) for c, b, k in wanted[d])

    def cost(mapping: Sequence[int]) -> float:
        t = [0.0, 0.0, 0.0, 0.0]
        for d in live:
            t[slot[d]] = contended(d, mapping)
        return total(t[0] + t[1] + t[3], t[2])

    objective.symmetric = True
    order = _hierarchy_order(objective.model, list(gpus))
    best: tuple[int, ...] = gpus
    best_us = cost(gpus)
    hier_us = cost(order)
    if hier_us < best_us * (1 - 1e-12):
        best, best_us = tuple(order), hier_us
    tp, dp, ep = layout.tp, layout.dp, layout.ep
    # Symmetry breaking: only the lexicographically least mapping of each class of mappings
    # equal up to a server symmetry (GPUs relabelled) and a layout symmetry (TP positions
    # and, without EP, DP replicas permuted) is completed. Its
    # necessary conditions, each checked as soon as the ranks it names are placed:
    # - rank 0 holds the least GPU of its orbit, and no rank that a layout symmetry can move
    #   to rank 0 holds a GPU whose orbit has a smaller one;
    # - the layout symmetries that keep rank 0: TP positions 1.. and DP replicas 1..
    #   ascending;
    # - no listed server symmetry fixing the GPUs of ranks 0..r-1 maps rank r's GPU lower.
    sym = symmetry(objective.model)
    pos, least, perms = sym.position, sym.least, list(sym.perms)
    if len(gpus) < len(sym.gpus):
        # Only the listed symmetries that map these GPUs onto themselves relabel a mapping of
        # them into another; orbit minima among those.
        inside = {pos[g] for g in gpus}
        perms = [x for x in perms if all(x[q] in inside for q in inside)]
        least = tuple(min(x[q] for x in perms) for q in range(len(sym.gpus)))
    rank0_orbit = {t + tp * d for t in range(tp) for d in (range(dp) if ep == 1 else range(1))}
    mapping: list[int] = []
    used: set[int] = set()

    def dfs(
        r: int,
        lb: list[float],
        cb: list[float],
        together: list[dict[int, float]],
        rates: list[float],
        stab: list[tuple[int, ...]],
    ) -> None:
        """`lb`: per dimension slot, the priced times so far (solo, then contended), which a
        complete mapping sums; `cb`: the same raised by bounds, which cut branches;
        `together`: per slot, the summed load of its complete groups on what groups may
        share (see `load`), and `rates` the least capacity / load over it."""
        nonlocal best, best_us
        if deadline is not None and time.perf_counter() > deadline:
            raise _OutOfTime
        if r == n:
            us = total(lb[0] + lb[1] + lb[3], lb[2])
            if us < best_us * (1 - 1e-12):
                best, best_us = tuple(mapping), us
            return
        if r == 0:
            candidates = [g for g in order if least[pos[g]] == pos[g]]
        else:
            candidates = [g for g in order if g not in used]
            if r in rank0_orbit:
                first = pos[mapping[0]]
                candidates = [g for g in candidates if least[pos[g]] >= first]
            if 1 < r < tp:  # TP positions 1.. ascending
                candidates = [g for g in candidates if g > mapping[r - 1]]
            if ep == 1 and 2 * tp <= r < tp * dp and r % tp == 0:
                # DP replicas 1.. ascending by their first GPU
                candidates = [g for g in candidates if g > mapping[r - tp]]
            if len(stab) > 1:
                # No symmetry fixing the earlier ranks' GPUs maps this one lower.
                lowest = [min(c) for c in zip(*stab, strict=True)]
                candidates = [g for g in candidates if lowest[pos[g]] >= pos[g]]
        for g in candidates:
            q = pos[g]
            mapping.append(g)
            here, cut, together_r, rates_r = lb, cb, together, rates
            if prefixes_at[r]:
                here, cut = lb[:], cb[:]
                for s, d, gpus_of in prefixes_at[r]:
                    t = solo(d, gpus_of(mapping))
                    if t > here[s]:
                        here[s] = t
                    if t > cut[s]:
                        cut[s] = t
            if groups_at[r]:
                done = [(s, d, gpus_of(mapping)) for s, d, gpus_of in groups_at[r]]
                if bounded_at[r]:
                    # Bounds that need no ring search first: a branch they cut is never
                    # priced.
                    probe = cut[:]
                    for s, d, grp in done:
                        t = solo_bound(d, grp)
                        if t > probe[s]:
                            probe[s] = t
                    if total(probe[0] + probe[1] + probe[3], probe[2]) >= best_us * (1 - 1e-9):
                        mapping.pop()
                        continue
                here, cut, together_r, rates_r = here[:], cut[:], together[:], rates[:]
                for s, d, grp in done:
                    t = solo(d, grp)
                    if t > here[s]:
                        here[s] = t
                    if t > cut[s]:
                        cut[s] = t
                    f = shared.get(d)
                    if f is not None:
                        items, alone = load(grp)
                        before = rate = rates_r[s]
                        load_s = together_r[s] = dict(together_r[s])
                        for res, w in items:
                            x = load_s[res] = load_s.get(res, 0.0) + w
                            if caps[res] / x < rate:
                                rate = caps[res] / x
                        rates_r[s] = rate
                        # f falls as the rate rises, and cut[s] holds f(before) and this
                        # group's solo time (no less than f(alone)): only a rate below both
                        # (groups sharing a link) can raise it.
                        if rate < before and rate < alone:
                            t = f(rate)
                            if t > cut[s]:
                                cut[s] = t
                # Contended times only for what the cheaper bounds did not already cut.
                for s, d in dims_at[r]:
                    if total(cut[0] + cut[1] + cut[3], cut[2]) >= best_us * (1 - 1e-9):
                        break
                    t = contended(d, mapping)
                    if t > here[s]:
                        here[s] = t
                    if t > cut[s]:
                        cut[s] = t
            if total(cut[0] + cut[1] + cut[3], cut[2]) < best_us * (1 - 1e-9):
                used.add(g)
                nxt = [x for x in stab if x[q] == q] if len(stab) > 1 else stab
                dfs(r + 1, here, cut, together_r, rates_r, nxt)
                used.discard(g)
            mapping.pop()

    try:
        dfs(0, [0.0] * 4, [0.0] * 4, [{} for _ in range(4)], [math.inf] * 4, perms)
    except _OutOfTime as stop:
        stop.best, stop.best_us = best, best_us
        raise
    return best, best_us


def _summed(terms: Sequence[tuple[int, Callable[[float], float]]]) -> Callable[[float], float]:
    """rate -> the sum of count x bound over a dimension's collectives."""
    return lambda rate: sum(k * f(rate) for k, f in terms)


@dataclass(frozen=True)
class Recommendation:
    """Every layout of a shape on some GPUs, fastest first; the best fitting one, or why none
    fits and the smallest shape that would."""

    shape: ModelShape
    spec: GpuSpec
    placements: tuple[Placement, ...]  # by predicted step time, fitting ones first
    no_fit: NoFit | None
    zero: int
    achieved: float
    # Layouts left unpriced when pricing ran past RECOMMEND_OVERRUN x the budget (huge servers).
    unpriced: int = 0

    @property
    def best(self) -> Placement | None:
        return self.placements[0] if self.placements and self.placements[0].memory.fits else None

    def to_document(self) -> dict[str, Any]:
        n = len(self.placements[0].mapping) if self.placements else 0
        best = self.best
        return {
            "model": self.shape.to_document(),
            "gpu": self.spec.to_document(),
            "zero": self.zero,
            "achieved_fraction_of_peak": self.achieved,
            "recommended": best.to_document() if best else None,
            "fits": best is not None,
            "no_fit": self.no_fit.to_document(self.spec, n) if self.no_fit else None,
            "layouts": [p.to_document() for p in self.placements],
            "assumptions": STEP_ASSUMPTIONS,
        } | ({"unpriced_layouts": self.unpriced} if self.unpriced else {})


STEP_ASSUMPTIONS = (
    "1F1B pipeline, m = global batch / (micro-batch x DP) micro-batches; compute at the "
    "stated fraction of the GPU's dense bf16 peak; TP, EP and pipeline sends not overlapped; "
    "the DP gradient reduction overlaps the last micro-batch's backward pass (2/3 of its "
    "compute), at least 10 % exposed; memory: bf16 weights and grads, 12 bytes of Adam state "
    "per parameter (ZeRO shards it over DP), flash-attention activations, 8 % reserved"
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
) -> Recommendation:
    """Every layout of `shape` on all `free` GPUs (default all) placed at its best mapping and
    ranked by predicted step time; layouts that do not fit in memory rank after every one
    that does and are never recommended."""
    shape = shape or DEFAULT_SHAPE
    spec = spec or gpu_spec(None, model.hardware.generation.name)
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    layouts = layouts_for(shape, len(pool))
    each = time_budget_s / max(1, len(layouts))
    if len(pool) > BOUNDED_PAST:
        # Pricing alone can outgrow the budget (one layout of 576 GPUs costs about a second):
        # the likeliest first (fits in memory, shallowest pipeline, narrowest TP), and past
        # RECOMMEND_OVERRUN x the budget the rest are counted, not priced.
        layouts.sort(
            key=lambda lay: (not memory_fit(shape, lay, spec.memory_bytes, zero).fits, lay.pp)
        )
    deadline = time.perf_counter() + RECOMMEND_OVERRUN * time_budget_s
    found: list[Placement] = []
    for lay in layouts:
        if found and len(pool) > BOUNDED_PAST and time.perf_counter() > deadline:
            break
        found.append(place(model, lay, pool, shape, each, spec=spec, zero=zero, achieved=achieved))
    found.sort(key=lambda p: (not p.memory.fits, p.step_us, p.layout.pp, -p.layout.tp))
    no_fit = None
    if not any(p.memory.fits for p in found):
        no_fit = smallest_fit(shape, spec, len(pool), zero)
    return Recommendation(
        shape, spec, tuple(found), no_fit, zero, achieved, len(layouts) - len(found)
    )


# How far past its time budget a recommendation may run before its remaining layouts are left
# unpriced (servers over BOUNDED_PAST GPUs only: smaller ones always price every layout).
RECOMMEND_OVERRUN = 2.0
BOUNDED_PAST = 16


def _hierarchy_order(model: CostModel, gpus: list[int]) -> list[int]:
    """GPUs sorted so that neighbours share the nearest things: NVLink domain, then the PCIe
    tree from NUMA node down."""
    h = model.hierarchy

    def key(g: int) -> tuple[Any, ...]:
        gid = model.gpu_ids[g]
        domain = h.domain_of(gid)
        return (domain.gpus[0] if domain else "", tuple(reversed(h.chain(gid))), g)

    return sorted(gpus, key=key)


def _nested_orders(model: CostModel, gpus: Sequence[int], layout: Layout) -> list[tuple[int, ...]]:
    """Mappings that lay the ranks along the hierarchy order with one dimension's index
    varying fastest, then the next...: each nesting of TP, DP and PP in turn (TP, DP, PP
    first: Megatron's rank order itself). Whichever dimension is innermost gets whole groups
    in the smallest subtrees; which nesting is fastest depends on the layout and the server
    (on two sockets of four 9-GPU PCIe switches, TP2 PP4 DP9 runs fastest with each TP x PP
    block under one switch, not with Megatron's order, which sends every pipeline across the
    sockets)."""
    order = _hierarchy_order(model, list(gpus))
    sizes = {"tp": layout.tp, "dp": layout.dp, "pp": layout.pp}
    out: list[tuple[int, ...]] = []
    for nesting in itertools.permutations(("tp", "dp", "pp")):
        stride, step = {}, 1
        for d in nesting:
            stride[d] = step
            step *= sizes[d]
        mapping = tuple(
            order[t * stride["tp"] + d * stride["dp"] + p * stride["pp"]]
            for p in range(layout.pp)
            for d in range(layout.dp)
            for t in range(layout.tp)
        )  # rank t + TP * (d + DP * p), as rank_groups reads it
        if mapping not in out:
            out.append(mapping)
    return out


def _local_search(
    objective: StepCost, model: CostModel, gpus: list[int], budget_s: float, seed: int
) -> tuple[tuple[int, ...], float, int, bool]:
    """The best mapping found within `budget_s`: the best start, proven optimal when the
    bound over what crosses between NUMA nodes meets it (True), else improved by swaps."""
    deadline = time.perf_counter() + budget_s
    rng = random.Random(seed)
    # Starts: the index order, then the hierarchy order with each dimension in turn nearest
    # (the first of them is Megatron's own order laid along it); the later ones only while
    # the budget lasts, and only a strictly faster one replaces an earlier one.
    best = tuple(gpus)
    best_us = objective(best)
    evals = 1
    for start in _nested_orders(model, gpus, objective.layout):
        if evals > 1 and time.perf_counter() >= deadline:
            break
        us = objective(start)
        evals += 1
        if us < best_us:
            best, best_us = start, us
    if _cut_bound_proves(objective, gpus, best_us, deadline):
        return best, best_us, evals, True
    current, current_us = best, best_us
    n = len(gpus)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    while time.perf_counter() < deadline:
        improved = False
        rng.shuffle(pairs)
        for i, j in pairs:
            if time.perf_counter() >= deadline:
                break
            cand = list(current)
            cand[i], cand[j] = cand[j], cand[i]
            us = objective(cand)
            evals += 1
            if us < current_us * (1 - 1e-9):
                current, current_us, improved = tuple(cand), us, True
        if current_us < best_us:
            best, best_us = current, current_us
        if not improved:
            break  # a local optimum: every single swap is worse or equal
    return best, best_us, evals, False


# Past this many ways to split one DP replica's TP x PP ranks over two NUMA nodes, the cut
# bound is not tried (TP x PP = 8: 256 ways).
CUT_SPLITS_LIMIT = 4096
RING_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def _cut_bound_proves(
    objective: StepCost, gpus: Sequence[int], best_us: float, deadline: float
) -> bool:
    """True when no mapping of `gpus` runs faster than `best_us` (within 1e-9, as the branch
    and bound cuts), by a bound over what crosses between the two NUMA nodes: where a PCIe
    server's dimensions cannot all stay local, the price is paid there. False when it proves
    nothing, or runs past `deadline`.

    A TP or DP ring with GPUs on both nodes leaves each of them at least once, and a pipeline
    hop between them is one flow: each loads, at least, the links every path from one node to
    the other takes (host bridge, socket link), at their least weight. Under max-min sharing
    the slowest group of a dimension gets no more than capacity / load on any link (the first
    link to fill caps every group crossing it, and loads only grow as ranks are placed), nor
    more than the links every path out of one GPU take allow; NCCL's formulas at that rate
    (costs.ring_time_bound, costs.chain_time) bound the dimension's time, and the step time is
    monotone in each dimension's. The bound depends only on how each DP replica splits its
    TP x PP ranks over the nodes, not on which replica takes which split: multisets of splits
    are enumerated (modulo TP relabellings, and swapping the nodes when they mirror each
    other), branch and bound against `best_us`; a DP group seen on one node only must also
    cross when the replicas left cannot all put its rank there. Single PCIe servers of two
    NUMA nodes, without NVLink or calibration (the formulas are NCCL's uncalibrated ones);
    alltoall (EP) adds nothing to the bound."""
    model, layout, plan = objective.model, objective.layout, objective.plan
    if model.nodes > 1 or model.calibration.scale or model.hierarchy.nvlink_domains:
        return False
    tp, pp, dp, cells = layout.tp, layout.pp, layout.dp, layout.tp * layout.pp
    numa = {g: model.hierarchy.numa_of(model.gpu_ids[g]) for g in gpus}
    names = sorted(set(numa.values()))
    if len(names) != 2 or 2**cells > CUT_SPLITS_LIMIT:
        return False
    side = {g: names.index(numa[g]) for g in gpus}
    # The links every path from one node to the other takes, and the fastest rate any GPU's
    # paths out of it allow: per cost model and GPU set (every layout asked reuses them).
    key = ("cut", tuple(sorted(gpus)))
    tables = objective.memo.get(key)
    if tables is None:
        tables = _cut_tables(model, gpus, side, deadline)
        if tables is None:
            return False
        objective.memo[key] = tables
    fastest, cut = tables

    # A dimension's time once x of its flows leave node 0 and y leave node 1 (a ring across
    # the nodes: one each way; a pipeline hop: one), per TP/PP/DP term of the step plan.
    size = {"tp": tp, "pp": pp, "dp": dp, "ep": layout.ep}
    terms: dict[str, list[tuple[int, Callable[[float], float]]]] = {"tp": [], "pp": [], "dp": []}
    for dim, coll, nbytes, count in plan.collectives:
        if size[dim] < 2:
            continue
        if dim == "pp" and coll == "sendrecv":
            terms[dim].append((count, functools.partial(chain_time, nbytes, hop="pcie")))
        elif dim in ("tp", "dp") and coll in RING_COLLECTIVES:
            at = functools.partial(ring_time_bound, model, coll, size[dim], nbytes, hops=("pcie",))
            terms[dim].append((count, at))
    # Memoised per dimension on x + y * stride (x, y count flows: fewer than the GPUs).
    times: dict[str, dict[int, float]] = {"tp": {}, "pp": {}, "dp": {}}
    stride = len(gpus) + 1

    def dim_us(dim: str, x: int, y: int) -> float:
        rate = min([fastest, *(c / (x * a + y * b) for c, a, b in cut if x * a + y * b > 0)])
        rate *= 1 + BOUND_MARGIN
        got = times[dim][x + stride * y] = sum(count * at(rate) for count, at in terms[dim])
        return got

    tp_us, pp_us, dp_us = times["tp"], times["pp"], times["dp"]
    total_us = plan.total_us

    def bound(tp_x: int, pp_x: int, pp_y: int, on0: int, on1: int, room1: int, rest: int) -> float:
        """on0, on1: the DP groups (a bit per TP x PP rank) seen on node 0, on node 1."""
        rows = (on0 & on1).bit_count()
        if rest:  # groups on one node that the `rest` replicas left cannot all keep there
            room0 = rest * cells - room1
            rows += max(0, (on0 & ~on1).bit_count() - room0 // rest)
            rows += max(0, (on1 & ~on0).bit_count() - room1 // rest)
        t = tp_us.get(tp_x * (stride + 1))
        if t is None:
            t = dim_us("tp", tp_x, tp_x)
        p = pp_us.get(pp_x + stride * pp_y)
        if p is None:
            p = dim_us("pp", pp_x, pp_y)
        d = dp_us.get(rows * (stride + 1))
        if d is None:
            d = dim_us("dp", rows, rows)
        return total_us(t + p, d)

    # Each split (bit c: rank t + TP * p on node 1): its TP groups across the nodes, its
    # pipeline hops 0 -> 1 and 1 -> 0, and its ranks on node 1; those that alone leave the
    # bound under `best_us`, largest first.
    limit = best_us * (1 - 1e-9)
    full = (1 << cells) - 1
    room1 = sum(side[g] for g in gpus)
    mirrored = room1 * 2 == len(gpus) and sorted(cut) == sorted((c, b, a) for c, a, b in cut)
    relabel = [
        (perm, flip)
        for perm in (itertools.permutations(range(tp)) if tp <= 4 else [tuple(range(tp))])
        for flip in ((0, full) if mirrored else (0,))
    ]
    stage = (1 << tp) - 1
    splits = []
    for code in range(full, -1, -1):
        bit = [code >> c & 1 for c in range(cells)]
        tp_x = sum(0 < code >> (tp * p) & stage < stage for p in range(pp))
        hops = [(bit[t + tp * p], bit[t + tp * (p + 1)]) for t in range(tp) for p in range(pp - 1)]
        pp_x, pp_y = hops.count((0, 1)), hops.count((1, 0))
        ones = code.bit_count()
        if ones > room1 or cells - ones > len(gpus) - room1:
            continue
        if bound(tp_x, pp_x, pp_y, full ^ code, code, room1 - ones, dp - 1) >= limit:
            continue
        # Relabelling TP positions, or swapping mirrored nodes, changes no bound: of a multiset
        # and its images only one whose first (largest) split no image of it exceeds is tried.
        images = (
            sum(bit[t + tp * p] << (perm[t] + tp * p) for t in range(tp) for p in range(pp)) ^ flip
            for perm, flip in relabel
        )
        splits.append((code, tp_x, pp_x, pp_y, ones, all(code >= x for x in images)))

    # What a replica split over both nodes adds at the least: the replicas left must split
    # when node 1's room left is no multiple of TP x PP.
    mixed = {(tx, px, py) for _c, tx, px, py, ones, _k in splits if 0 < ones < cells}
    least_mixed = [
        m for m in mixed if not any(o != m and all(map(int.__le__, o, m)) for o in mixed)
    ]

    def proves(d: int, first: int, tp_x: int, pp_x: int, pp_y: int, on0: int, on1: int,
               room1: int) -> bool:  # fmt: skip
        """Every multiset of splits extending this one (splits from `first` on) is cut."""
        if time.perf_counter() > deadline:
            return False
        if (
            d
            and room1 % cells
            and all(
                bound(tp_x + tx, pp_x + px, pp_y + py, on0, on1, room1, dp - d) >= limit
                for tx, px, py in least_mixed
            )
        ):
            return True
        rest = dp - d - 1
        for i in range(first, len(splits)):
            code, tx, px, py, ones, canonical = splits[i]
            left1 = room1 - ones
            if left1 < 0 or left1 > rest * cells or (d == 0 and not canonical):
                continue
            a, b, c0, c1 = tp_x + tx, pp_x + px, on0 | (full ^ code), on1 | code
            if bound(a, b, pp_y + py, c0, c1, left1, rest) >= limit:
                continue
            if not rest or not proves(d + 1, i, a, b, pp_y + py, c0, c1, left1):
                return False  # a class the bound cannot rule out (or no time left)
        return True

    return proves(0, 0, 0, 0, 0, 0, 0, room1)


def _cut_tables(
    model: CostModel, gpus: Sequence[int], side: Mapping[int, int], deadline: float
) -> tuple[float, list[tuple[float, float, float]]] | None:
    """For `_cut_bound_proves`: the most any GPU's paths out of it allow (their common links'
    capacity over weight), and per link that every path from node 0 to node 1 or back takes:
    its capacity and least weight each way. None past `deadline` (O(GPUs^2) routes)."""
    least: list[dict[int, float] | None] = [None, None]
    fastest = 0.0
    for a in gpus:
        if time.perf_counter() > deadline:
            return None
        out: dict[int, float] | None = None
        for b in gpus:
            if a != b:
                load = model.load([((a, b), 1.0)])
                out = _common(out, load)
                if side[a] != side[b]:
                    least[side[a]] = _common(least[side[a]], load)
        caps_out = (model.resources[r].capacity_gbps / w for r, w in (out or {}).items())
        fastest = max(fastest, min(caps_out, default=math.inf))
    there, back = least[0] or {}, least[1] or {}
    links = sorted(set(there) | set(back))
    cut = [(model.resources[r].capacity_gbps, there.get(r, 0.0), back.get(r, 0.0)) for r in links]
    return fastest, cut


def _common(got: dict[int, float] | None, load: dict[int, float]) -> dict[int, float]:
    """The links in both (the first call: all of `load`), at their least weight."""
    if got is None:
        return dict(load)
    return {r: min(w, load[r]) for r, w in got.items() if r in load}


# --- k-GPU selection -----------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    server: str
    gpus: tuple[int, ...]
    busbw_gbps: float  # predicted all_reduce busbw at SELECTION_BYTES
    leftover_busbw_gbps: float  # the best the remaining free GPUs of that server can do
    reason: str

    def to_document(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "gpus": list(self.gpus),
            "busbw_gbps": round(self.busbw_gbps, 3),
            "leftover_busbw_gbps": round(self.leftover_busbw_gbps, 3),
            "reason": self.reason,
        }


MAX_SUBSETS = 3000  # past this many k-subsets per server, candidates come from the hierarchy
MAX_WINDOWS = 64  # and at most this many of its windows are priced (NVL72 and up)
# Leftover quality (a ring search over the remaining free GPUs) is only a tie-break, and on a
# 72-GPU server it costs ~0.1 s per candidate: it is computed for at most this many of each
# server's best-bandwidth candidates, in candidate order.
LEFTOVER_CANDIDATES = 12


def select_gpus(
    servers: Mapping[str, tuple[CostModel, Sequence[int]]], k: int, top: int = 5
) -> list[Selection]:
    """The best k free GPUs on any one server, ranked by predicted all_reduce bus bandwidth;
    among equals, the choice that leaves the remaining free GPUs best connected wins."""
    if k < 1:
        raise ValueError("k must be at least 1")
    found: list[Selection] = []
    for name, (model, free) in servers.items():
        free_t = tuple(sorted(model.check_gpus(free)))
        if len(free_t) < k:
            continue
        for gpus, bw, left_bw, why in _best_on(model, free_t, k, top):
            found.append(Selection(name, gpus, bw, left_bw, why))
    if not found:
        raise ValueError(f"no server has {k} free GPUs")
    found.sort(
        key=lambda s: (-round(s.busbw_gbps, 1), -round(s.leftover_busbw_gbps, 1), s.server, s.gpus)
    )
    out = []
    for s in found[:top]:
        left_note = (
            f"; leaves GPUs that still reach {s.leftover_busbw_gbps:.0f} GB/s busbw"
            if s.leftover_busbw_gbps
            else ""
        )
        out.append(
            Selection(s.server, s.gpus, s.busbw_gbps, s.leftover_busbw_gbps, s.reason + left_note)
        )
    return out


# Per cost model: each GPU group's quality and each (free GPUs, k, top) question's best
# choices. Servers that share a model (wired, numbered and calibrated alike) and their free
# GPUs get the same choices, so a question over a fleet prices each kind of server once, not
# each server. Bounded over all models (a 72-GPU server meets many free sets, and a process
# keeps hundreds of models): past the bound everything is forgotten at once.
_SELECTIONS: weakref.WeakKeyDictionary[CostModel, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_SELECTIONS_KEPT = 20_000
_V = TypeVar("_V")
_selections_count = 0


def _memo(model: CostModel) -> dict[tuple[Any, ...], Any]:
    return _SELECTIONS.setdefault(model, {})


def _remember(memo: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: _V) -> _V:
    global _selections_count
    _selections_count += 1
    if _selections_count > _SELECTIONS_KEPT:
        for kept in list(_SELECTIONS.values()):
            kept.clear()
        _selections_count = 1
    memo[key] = value
    return value


def _best_on(
    model: CostModel, free: tuple[int, ...], k: int, top: int
) -> tuple[tuple[tuple[int, ...], float, float, str], ...]:
    """One server's `top` best k-GPU choices among `free` (sorted): (GPUs, busbw, leftover
    busbw, reason), in select_gpus's order. Only these can be among the `top` best over
    several servers, since a server's own choices keep their order there."""
    memo = _memo(model)
    key = ("best", free, k, top)
    got: tuple[tuple[tuple[int, ...], float, float, str], ...] | None = memo.get(key)
    if got is not None:
        return got
    scored = [(subset, *_quality(model, subset)) for subset in _candidate_subsets(model, free, k)]
    best_bw = max(round(bw, 1) for _, bw, _ in scored)
    tied = 0
    rows = []
    for subset, bw, why in scored:
        left_bw = 0.0
        if round(bw, 1) == best_bw and tied < LEFTOVER_CANDIDATES:
            tied += 1
            left = tuple(g for g in free if g not in subset)
            left_bw = _quality(model, left)[0] if len(left) >= 2 else 0.0
        rows.append((subset, bw, left_bw, why))
    rows.sort(key=lambda r: (-round(r[1], 1), -round(r[2], 1), r[0]))
    return _remember(memo, key, tuple(rows[:top]))


def best_group(model: CostModel, k: int, free: Sequence[int] | None = None) -> tuple[int, ...]:
    """The best-connected k GPUs by all_reduce bus bandwidth alone (no fragmentation
    tie-break): the group a cost table prices for "k GPUs of this server"."""
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    if not 1 <= k <= len(pool):
        raise ValueError(f"cannot pick {k} of {len(pool)} GPUs")
    return max(_candidate_subsets(model, pool, k), key=lambda s: round(_quality(model, s)[0], 1))


def _quality(model: CostModel, subset: tuple[int, ...]) -> tuple[float, str]:
    if len(subset) < 2:
        return 0.0, f"a single GPU ({subset[0]}) needs no collective"
    memo = _memo(model)
    got: tuple[float, str] | None = memo.get(("quality", subset))
    if got is None:
        c = collective_cost(model, "all_reduce", subset, SELECTION_BYTES)
        got = _remember(
            memo,
            ("quality", subset),
            (
                c.busbw_gbps,
                f"all_reduce of 256 MiB on GPUs {list(subset)} reaches "
                f"{c.busbw_gbps:.0f} GB/s busbw, limited by {c.bottleneck}",
            ),
        )
    return got


def _candidate_subsets(model: CostModel, free: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    if math.comb(len(free), k) <= MAX_SUBSETS:
        return list(itertools.combinations(free, k))
    # Too many: windows of k over the hierarchy order (neighbours share switches, domains),
    # at most MAX_WINDOWS of them spread evenly over it (every window on a smaller server).
    order = _hierarchy_order(model, list(free))
    last = len(order) - k
    starts = range(last + 1)
    if last + 1 > MAX_WINDOWS:
        starts = range(0, last + 1, -(-(last + 1) // MAX_WINDOWS))
    return sorted({tuple(sorted(order[i : i + k])) for i in (*starts, last)})


# --- jobs over several servers --------------------------------------------------------------

# What a network transfer reaches of the NICs' line rate, and how much less crossing the spine
# between rail groups gets (a 2:1 oversubscribed spine): stated assumptions, used until the
# costs model's multi-node option prices these hops itself.
NET_EFFICIENCY = 0.92
SPINE_OVERSUBSCRIPTION = 2.0


@dataclass(frozen=True)
class ServerPool:
    """One server a job may use: its cost model, free GPUs and rail group (the servers whose
    NIC i sits on the same leaf switch i; by default the topology class)."""

    model: CostModel
    free: tuple[int, ...]
    rail_group: str
    spec: GpuSpec | None = None


@dataclass(frozen=True)
class ServerPart:
    server: str
    gpus: tuple[int, ...]
    nics: tuple[str, ...]  # nearest NICs of those GPUs: what the job's traffic leaves through

    def to_document(self) -> dict[str, Any]:
        return {"server": self.server, "gpus": list(self.gpus), "nics": list(self.nics)}


@dataclass(frozen=True)
class JobSelection:
    parts: tuple[ServerPart, ...]
    same_rails: bool
    predicted_us: float  # the all_reduce of `nbytes` (k GPUs) or the step time (a layout)
    what: str  # what predicted_us is
    layout: Layout | None
    inter_node_us: float  # the part of it spent between servers
    fits: bool
    reason: str

    def to_document(self) -> dict[str, Any]:
        return {
            "servers": [p.to_document() for p in self.parts],
            "server_count": len(self.parts),
            "same_rails": self.same_rails,
            "predicted_us": round(self.predicted_us, 3),
            "predicted": self.what,
            "inter_node_us": round(self.inter_node_us, 3),
            "layout": self.layout.__dict__ if self.layout else None,
            "fits": self.fits,
            "reason": self.reason,
        }


def _nics_of(model: CostModel, gpus: Sequence[int]) -> tuple[str, ...]:
    near = {g.gpu: g.nearest_nics for g in affinity(model).gpus}
    return tuple(sorted({n for g in gpus for n in near.get(g, ())}))


def inter_node_all_reduce_us(
    parts: Sequence[tuple[CostModel, int, int]], nbytes: float, same_rails: bool
) -> float:
    """All-reduce of `nbytes` between servers after each reduced it inside (hierarchical, as
    NCCL does over nodes): a ring over the servers, each carrying its share over the NICs of
    the GPUs it uses. `parts`: (model, GPUs used, NICs used) per server. The seam where the
    costs model's multi-node pricing plugs in."""
    n = len(parts)
    if n < 2:
        return 0.0
    per_node = min(max(1, nics) * m.hardware.nic_gbps * NET_EFFICIENCY for m, _g, nics in parts)
    if not same_rails:
        per_node /= SPINE_OVERSUBSCRIPTION
    alpha = dict(parts[0][0].hardware.latency_us).get("network", 3.0)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / (per_node * 1e3)


def _multi_node_all_reduce_us(
    servers: Mapping[str, ServerPool], parts: Sequence[ServerPart], nbytes: int
) -> float | None:
    """The all_reduce over several servers from the cost model's multi-node option, when
    every server is numbered and wired like the first (one model serves them all); None
    otherwise."""
    first = servers[parts[0].server].model
    if any(servers[p.server].model.topo != first.topo for p in parts[1:]):
        return None
    g = len(first.gpu_ids)
    local = sorted(first.gpu_ids)
    try:
        job = with_options(first, nodes=len(parts))
        gpus = [n * g + local.index(x) for n, p in enumerate(parts) for x in p.gpus]
        return collective_cost(job, "all_reduce", gpus, nbytes).time_us
    except ValueError:
        return None


def select_job(
    servers: Mapping[str, ServerPool],
    k: int | None = None,
    layout: Layout | None = None,
    shape: ModelShape | None = None,
    nbytes: int = SELECTION_BYTES,
    top: int = 5,
) -> list[JobSelection]:
    """Where a job of k GPUs (or a TP x PP x DP layout) should run: on one server when any
    has enough free GPUs (best first, see `select_gpus` and `place`); otherwise over the
    fewest servers, those of one rail group first, each part the best-connected of that
    server's free GPUs. A layout keeps TP and PP inside a server and spans servers with DP."""
    if (k is None) == (layout is None):
        raise ValueError("ask for k GPUs or for a TP x PP x DP layout, not both")
    size = layout.size if layout else int(k or 0)
    if size < 1:
        raise ValueError("k must be at least 1")
    shape = shape or DEFAULT_SHAPE
    single = [name for name, pool in servers.items() if len(pool.free) >= size]
    if single:
        return sorted(
            (_one_server(name, servers[name], size, layout, shape, nbytes) for name in single),
            key=lambda j: (not j.fits, j.predicted_us, j.parts[0].server),
        )[:top]
    unit = layout.tp * layout.pp * layout.ep if layout else 1
    groups: dict[str, list[str]] = {}
    for name, pool in servers.items():
        groups.setdefault(pool.rail_group, []).append(name)
    found = []
    plans = [*groups.values(), list(servers)]  # one rail group first, then any servers
    seen: set[tuple[str, ...]] = set()
    for names in plans:
        picked = _fewest_servers(servers, names, size, unit)
        if picked is None or tuple(sorted(picked)) in seen:
            continue
        seen.add(tuple(sorted(picked)))
        same_rails = len({servers[n].rail_group for n in picked}) == 1
        found.append(_over_servers(servers, picked, size, unit, layout, shape, nbytes, same_rails))
    if not found:
        total = sum(len(p.free) // unit * unit for p in servers.values())
        raise ValueError(
            f"the servers have {total} usable free GPUs"
            + (f" in whole TP x PP x EP blocks of {unit}" if unit > 1 else "")
            + f"; the job needs {size}"
        )
    found.sort(key=lambda j: (len(j.parts), not j.same_rails, not j.fits, j.predicted_us))
    return found[:top]


def _one_server(
    name: str,
    pool: ServerPool,
    size: int,
    layout: Layout | None,
    shape: ModelShape,
    nbytes: int,
) -> JobSelection:
    model = pool.model
    if layout is not None:
        placed = place(model, layout, pool.free, shape, spec=pool.spec)
        part = ServerPart(name, placed.gpus, _nics_of(model, placed.gpus))
        return JobSelection(
            (part,), True, placed.step_us, "step time", layout, 0.0, placed.memory.fits,
            f"one server; {placed.choice or 'all its free GPUs'}",
        )  # fmt: skip
    best = select_gpus({name: (model, pool.free)}, size, top=1)[0]
    us = collective_cost(model, "all_reduce", best.gpus, nbytes).time_us if size >= 2 else 0.0
    part = ServerPart(name, best.gpus, _nics_of(model, best.gpus))
    return JobSelection(
        (part,), True, us, f"all_reduce of {nbytes} bytes", None, 0.0, True,
        "one server; " + best.reason,
    )  # fmt: skip


def _fewest_servers(
    servers: Mapping[str, ServerPool], names: Sequence[str], size: int, unit: int
) -> list[str] | None:
    """Servers with the most usable free GPUs first, until the job fits."""
    ranked = sorted(names, key=lambda n: (-(len(servers[n].free) // unit), n))
    picked, have = [], 0
    for n in ranked:
        usable = len(servers[n].free) // unit * unit
        if not usable:
            continue
        picked.append(n)
        have += usable
        if have >= size:
            return picked
    return None


def _over_servers(
    servers: Mapping[str, ServerPool],
    picked: Sequence[str],
    size: int,
    unit: int,
    layout: Layout | None,
    shape: ModelShape,
    nbytes: int,
    same_rails: bool,
) -> JobSelection:
    left = size
    counts = []
    for n in picked:
        take = min(left, len(servers[n].free) // unit * unit)
        counts.append(take)
        left -= take
    parts, inter_parts = [], []
    local_us, fits = 0.0, True
    each: dict[tuple[str, str], float] = {}
    for n, take in zip(picked, counts, strict=True):
        model, pool = servers[n].model, servers[n]
        if layout is not None:
            sub = Layout(layout.tp, layout.pp, take // (layout.tp * layout.pp), layout.ep)
            placed = place(model, sub, pool.free, shape, spec=pool.spec)
            gpus = placed.gpus
            fits = fits and memory_fit(shape, layout, placed.spec.memory_bytes).fits
            for d in placed.per_dimension:
                key = (d.dimension, d.collective)
                each[key] = max(each.get(key, 0.0), d.each_us)
        else:
            gpus = best_group(model, take, pool.free) if take < len(pool.free) else pool.free
            if take >= 2:
                local = collective_cost(model, "reduce_scatter", gpus, nbytes).time_us
                local_us = max(local_us, 2 * local)  # reduce-scatter, then all-gather
        nics = _nics_of(model, gpus)
        parts.append(ServerPart(n, tuple(gpus), nics))
        inter_parts.append((model, len(gpus), len(nics) or len(gpus)))
    rails = "the same rail group" if same_rails else "different rail groups (through the spine)"
    if layout is None:
        total = _multi_node_all_reduce_us(servers, parts, nbytes) if same_rails else None
        if total is not None:  # the cost model prices the job over servers wired alike
            # What spanning servers adds: beyond the same all_reduce inside the largest part.
            largest = max(parts, key=lambda p: len(p.gpus))
            alone = (
                collective_cost(servers[largest.server].model, "all_reduce", largest.gpus, nbytes)
                if len(largest.gpus) >= 2
                else None
            )
            inter = max(0.0, total - (alone.time_us if alone else 0.0))
            how = "priced by the multi-node cost model"
        else:
            inter = inter_node_all_reduce_us(inter_parts, nbytes / max(counts), same_rails)
            total, how = local_us + inter, "inside each server, then a ring over their NICs"
        return JobSelection(
            tuple(parts), same_rails, total, f"all_reduce of {nbytes} bytes",
            None, inter, True,
            f"no server has {size} free GPUs: {len(parts)} servers on {rails}; {how}",
        )  # fmt: skip
    # Gradients: reduced inside each server over its DP replicas, then between servers.
    first = servers[picked[0]]
    spec = first.spec or gpu_spec(None, first.model.hardware.generation.name)
    plan = step_plan(shape, layout, spec)
    grad = next((b for d, _c, b, _n in plan.collectives if d == "dp"), 0)
    local_per_gpu = max(counts) // (layout.tp * layout.pp)
    inter = inter_node_all_reduce_us(inter_parts, grad / max(1, local_per_gpu), same_rails)
    each[("dp", "all_reduce")] = each.get(("dp", "all_reduce"), 0.0) + inter
    step = plan.step(each)
    return JobSelection(
        tuple(parts), same_rails, step.total_us, "step time", layout, inter, fits,
        f"no server has {size} free GPUs: TP and PP inside each server, DP over "
        f"{len(parts)} servers on {rails}",
    )  # fmt: skip


# --- affinity ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuAffinity:
    gpu: int
    numa_node: str
    cpu_list: str | None
    nearest_nics: tuple[str, ...]
    nic_class: str | None
    warning: str | None

    def to_document(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "numa_node": self.numa_node,
            "cpu_list": self.cpu_list,
            "nearest_nics": list(self.nearest_nics),
            "nic_class": self.nic_class,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class AffinityAdvice:
    gpus: tuple[GpuAffinity, ...]
    cuda_visible_devices: str
    binding_hints: tuple[str, ...]

    def to_document(self) -> dict[str, Any]:
        return {
            "gpus": [g.to_document() for g in self.gpus],
            "cuda_visible_devices": self.cuda_visible_devices,
            "binding_hints": list(self.binding_hints),
        }


def affinity(model: CostModel) -> AffinityAdvice:
    """Per GPU: nearest NIC(s) and their class, NUMA node, CPUs; an order that keeps
    neighbouring ranks close; numactl / NCCL hints; a warning where no NIC shares the GPU's
    NUMA node (GPUDirect RDMA then crosses the socket link)."""
    topo, h = model.topo, model.hierarchy
    out = []
    hints = []
    for gpu in topo.gpus:
        numa = h.node(h.numa_of(gpu.id))
        nics = topo.nics
        nearest: tuple[str, ...] = ()
        near: list[Device] = []
        cls = None
        if nics:
            best = min(link_class_rank(topo.link_class(gpu.id, n.id)) for n in nics)
            near = [n for n in nics if link_class_rank(topo.link_class(gpu.id, n.id)) == best]
            nearest = tuple(n.nic_name or n.id for n in near)
            cls = topo.link_class(gpu.id, near[0].id)
        warning = None
        if nics and cls == "SYS":
            warning = (
                f"GPU{gpu.index} has no NIC on its NUMA node ({numa.label}): its "
                "network traffic crosses the socket link"
            )
        out.append(GpuAffinity(gpu.index, numa.label, gpu.cpu_affinity, nearest, cls, warning))
        node_no = numa.label.split()[-1] if numa.label.split()[-1].isdigit() else None
        hint = f"GPU{gpu.index}:"
        if node_no is not None:
            hint += f" numactl --cpunodebind={node_no} --membind={node_no}"
        elif gpu.cpu_affinity:
            hint += f" taskset -c {gpu.cpu_affinity}"
        # Only a name the capture gave (its NIC legend): `NIC0` is no RDMA device's name.
        rdma_names = [n.nic_name for n in near]
        if rdma_names and rdma_names[0]:
            hint += f"; NCCL_IB_HCA={rdma_names[0]}"
        hints.append(hint)
    order = _hierarchy_order(model, sorted(model.gpu_ids))
    return AffinityAdvice(tuple(out), ",".join(map(str, order)), tuple(hints))
