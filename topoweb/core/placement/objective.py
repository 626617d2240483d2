"""The placement objective: a mapping's predicted step time (core/steptime.py) from the
cost model's collective times, memoised per group structure; Megatron's rank groups."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topoweb.core.costs import CostModel, slowest_group_us, solo_time_bound
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.steptime import (
    ACHIEVED_FRACTION,
    GpuSpec,
    StepPlan,
    StepTime,
    gpu_spec,
    step_plan,
)
from topoweb.core.symmetry import Symmetry, symmetry

DEFAULT_SHAPE = PRESETS["llama-7b"]
DIMENSIONS = ("tp", "ep", "dp", "pp")

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


def groups_key(dimension: str, groups: Sequence[tuple[int, ...]]) -> Any:
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
        *,
        recompute: str = "selective",
        zero: int = 1,
    ):
        self.model = model
        self.layout = layout
        self.shape = shape or DEFAULT_SHAPE
        self.spec = spec or gpu_spec(None, model.hardware.generation.name)
        self.plan: StepPlan = step_plan(
            self.shape, layout, self.spec, achieved, recompute=recompute, zero=zero
        )
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
                canon = self.symmetries().sets_key(gs)
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
                canon = self.symmetries().set_key(group)
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
                class_key = ("~bound", collective, nbytes, self.symmetries().set_key(group))
                t = self.memo.get(class_key)
            if t is None:
                t = solo_time_bound(self.model, collective, group, nbytes)
                if class_key is not None:
                    self.memo[class_key] = t
            self.memo[memo_key] = t
        return t

    def symmetries(self) -> Symmetry:
        """The server's GPU symmetries, under which the searches prune and memoise."""
        return symmetry(self.model)

    def times(self, groups: Groups) -> dict[tuple[str, str], float]:
        out = {}
        for dim, coll, nbytes, _count in self.plan.collectives:
            gs = groups[dim]
            out[(dim, coll)] = self.each_us(dim, coll, nbytes, groups_key(dim, gs), gs)
        return out

    def step(self, mapping: Sequence[int]) -> StepTime:
        return self.plan.step(self.times(rank_groups(mapping, self.layout, self.dimensions)))

    def __call__(self, mapping: Sequence[int]) -> float:
        return self.step(mapping).total_us

    def uniform(self, gpus: Sequence[int]) -> bool:
        """True when every mapping costs the same: all GPUs behind one NVSwitch domain."""
        return is_uniform(self.model, gpus)


def is_uniform(model: CostModel, gpus: Sequence[int]) -> bool:
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


def hierarchy_order(model: CostModel, gpus: list[int]) -> list[int]:
    """GPUs sorted so that neighbours share the nearest things: NVLink domain, then the PCIe
    tree from NUMA node down."""
    h = model.hierarchy

    def key(g: int) -> tuple[Any, ...]:
        gid = model.gpu_ids[g]
        domain = h.domain_of(gid)
        return (domain.gpus[0] if domain else "", tuple(reversed(h.chain(gid))), g)

    return sorted(gpus, key=key)
