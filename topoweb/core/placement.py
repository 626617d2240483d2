"""Placement advice: the rank->GPU mapping that minimises a job's per-step communication,
the best k GPUs for a scheduler (fragmentation-aware), and per-GPU NIC/NUMA affinity."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.costs import CostModel, collective_cost, slowest_group_us
from topoweb.core.ledger import PRESETS, Layout, LedgerEntry, ModelShape, ledger, price
from topoweb.core.model import Device, link_class_rank

EXACT_LIMIT = 8  # GPUs up to which the mapping search is exhaustive
DEFAULT_SHAPE = PRESETS["llama-7b"]
SELECTION_BYTES = 256 << 20  # the all_reduce size k-GPU selection ranks by
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


class StepCost:
    """Per-step communication time (us) of a mapping (GPU of each rank): what `place`
    minimises. Memoised per dimension's group structure, since many mappings share their TP
    partition, their DP partition..."""

    def __init__(self, model: CostModel, layout: Layout, shape: ModelShape | None = None):
        self.model = model
        self.entries = ledger(shape or DEFAULT_SHAPE, layout)
        self.layout = layout
        self.memo: dict[tuple[Any, ...], float] = {}
        self.dimensions = frozenset(e.dimension for e in self.entries)

    def dimension_us(self, entry: LedgerEntry, groups: list[tuple[int, ...]]) -> float:
        if not groups or len(groups[0]) < 2:
            return 0.0
        if entry.dimension == "pp":
            key: Any = frozenset(min(g, g[::-1]) for g in groups)
        else:
            key = frozenset(frozenset(g) for g in groups)
        memo_key = (entry.dimension, entry.collective, entry.bytes, key)
        if memo_key not in self.memo:
            self.memo[memo_key] = entry.count * slowest_group_us(
                self.model, entry.collective, groups, entry.bytes, entry.dimension == "pp"
            )
        return self.memo[memo_key]

    def __call__(self, mapping: Sequence[int]) -> float:
        groups = rank_groups(mapping, self.layout, self.dimensions)
        return sum(self.dimension_us(e, groups[e.dimension]) for e in self.entries)

    def uniform(self, gpus: Sequence[int]) -> bool:
        """True when every mapping costs the same: all GPUs behind one NVSwitch domain."""
        h = self.model.hierarchy
        domains = {h.domain_of(self.model.gpu_ids[g]) for g in gpus}
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
    step_comm_us: float
    naive_step_comm_us: float
    per_dimension: tuple[DimensionResult, ...]
    search: str  # "exact" or "local search (n evaluations)"
    calibrated: bool
    assumption: str

    @property
    def improvement(self) -> float:
        """Fraction of the naive order's step communication saved."""
        if self.naive_step_comm_us <= 0:
            return 0.0
        return 1 - self.step_comm_us / self.naive_step_comm_us

    def to_document(self) -> dict[str, Any]:
        return {
            "layout": self.layout.__dict__,
            "model": self.shape.name,
            "mapping": list(self.mapping),
            "groups": {k: [list(g) for g in v] for k, v in self.groups.items()},
            "predicted_step_comm_us": round(self.step_comm_us, 3),
            "naive_step_comm_us": round(self.naive_step_comm_us, 3),
            "improvement": round(self.improvement, 4),
            "per_dimension": [d.to_document() for d in self.per_dimension],
            "search": self.search,
            "calibrated": self.calibrated,
            "assumption": self.assumption,
        }


def place(
    model: CostModel,
    layout: Layout,
    free: Sequence[int] | None = None,
    shape: ModelShape | None = None,
    time_budget_s: float = 0.3,
    seed: int = 0,
) -> Placement:
    """Best rank->GPU mapping for a TP x PP x DP (x EP) job on `free` GPUs (default all).

    Exact for up to EXACT_LIMIT GPUs (every mapping, modulo relabelling TP positions and DP
    replicas, which changes no group); beyond, a swap local search from the naive order and
    a hierarchy-ordered start, bounded by `time_budget_s`, never worse than naive."""
    shape = shape or DEFAULT_SHAPE
    gpus = sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids)))
    if layout.size != len(gpus):
        raise ValueError(
            f"TP x PP x DP = {layout.tp} x {layout.pp} x {layout.dp} = "
            f"{layout.size} does not match the {len(gpus)} free GPUs"
        )
    objective = StepCost(model, layout, shape)
    entries = objective.entries
    naive = tuple(gpus)
    naive_us = objective(naive)
    if objective.uniform(gpus):
        best, best_us = naive, naive_us
        search = "exact (one NVSwitch domain: every mapping costs the same)"
    elif len(gpus) <= EXACT_LIMIT:
        best, best_us = _exact(objective, gpus, layout)
        search = "exact"
    else:
        best, best_us, evals = _local_search(objective, model, gpus, time_budget_s, seed)
        search = f"local search ({evals} evaluations)"
    if best_us > naive_us:  # only rounding can do this; never advise worse than naive
        best, best_us = naive, naive_us
    groups = {k: v for k, v in rank_groups(best, layout).items() if v and len(v[0]) > 1}
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
    return Placement(
        layout,
        shape,
        best,
        rank_groups(best, layout),
        best_us,
        naive_us,
        per_dim,
        search,
        any(model.is_calibrated(d.bottleneck_class) for d in per_dim),
        model.hardware.assumption,
    )


def _exact(objective: StepCost, gpus: list[int], layout: Layout) -> tuple[tuple[int, ...], float]:
    tp, dp, ep = layout.tp, layout.dp, layout.ep
    best: tuple[int, ...] = tuple(gpus)
    best_us = objective(best)
    for perm in itertools.permutations(gpus):
        # Relabelling TP positions or DP replicas of a mapping changes no group, so one
        # representative per relabelling: stage 0's first row and first column ascending.
        if any(perm[t] > perm[t + 1] for t in range(tp - 1)):
            continue
        if ep == 1 and any(perm[tp * d] > perm[tp * (d + 1)] for d in range(dp - 1)):
            continue
        if tp * dp == 1 and perm[0] > perm[-1]:
            continue  # a lone pipeline read backwards costs the same
        us = objective(perm)
        if us < best_us * (1 - 1e-12):
            best, best_us = perm, us
    return best, best_us


def _hierarchy_order(model: CostModel, gpus: list[int]) -> list[int]:
    """GPUs sorted so that neighbours share the nearest things: NVLink domain, then the PCIe
    tree from NUMA node down."""
    h = model.hierarchy

    def key(g: int) -> tuple[Any, ...]:
        gid = model.gpu_ids[g]
        domain = h.domain_of(gid)
        return (domain.gpus[0] if domain else "", tuple(reversed(h.chain(gid))), g)

    return sorted(gpus, key=key)


def _local_search(
    objective: StepCost, model: CostModel, gpus: list[int], budget_s: float, seed: int
) -> tuple[tuple[int, ...], float, int]:
    deadline = time.perf_counter() + budget_s
    rng = random.Random(seed)
    starts = [tuple(gpus), tuple(_hierarchy_order(model, gpus))]
    best = min(starts, key=objective)
    best_us = objective(best)
    evals = 2
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
    return best, best_us, evals


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
        scored = [
            (subset, *_quality(model, subset)) for subset in _candidate_subsets(model, free_t, k)
        ]
        best_bw = max(round(bw, 1) for _, bw, _ in scored)
        tied = 0
        for subset, bw, why in scored:
            left_bw = 0.0
            if round(bw, 1) == best_bw and tied < LEFTOVER_CANDIDATES:
                tied += 1
                left = tuple(g for g in free_t if g not in subset)
                left_bw = _quality(model, left)[0] if len(left) >= 2 else 0.0
            found.append(Selection(name, subset, bw, left_bw, why))
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
    c = collective_cost(model, "all_reduce", subset, SELECTION_BYTES)
    return c.busbw_gbps, (
        f"all_reduce of 256 MiB on GPUs {list(subset)} reaches "
        f"{c.busbw_gbps:.0f} GB/s busbw, limited by {c.bottleneck}"
    )


def _candidate_subsets(model: CostModel, free: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    if math.comb(len(free), k) <= MAX_SUBSETS:
        return list(itertools.combinations(free, k))
    # Too many: windows of k over the hierarchy order (neighbours share switches, domains).
    order = _hierarchy_order(model, list(free))
    return sorted({tuple(sorted(order[i : i + k])) for i in range(len(order) - k + 1)})


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
