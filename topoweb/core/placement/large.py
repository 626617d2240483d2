"""Mappings past the exact search's sizes: starts along the server's hierarchy in each
nesting of TP, DP and PP, improved by swaps within a budget, and a bound over what must cross
between two NUMA nodes that proves a start optimal on two-socket PCIe servers."""

from __future__ import annotations

import functools
import itertools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence

from topoweb.core.costs import BOUND_MARGIN, CostModel, chain_time, ring_time_bound
from topoweb.core.ledger import Layout
from topoweb.core.placement.objective import StepCost, hierarchy_order


def nested_orders(model: CostModel, gpus: Sequence[int], layout: Layout) -> list[tuple[int, ...]]:
    """Mappings that lay the ranks along the hierarchy order with one dimension's index
    varying fastest, then the next...: each nesting of TP, DP and PP in turn (TP, DP, PP
    first: Megatron's rank order itself). Whichever dimension is innermost gets whole groups
    in the smallest subtrees; which nesting is fastest depends on the layout and the server
    (on two sockets of four 9-GPU PCIe switches, TP2 PP4 DP9 runs fastest with each TP x PP
    block under one switch, not with Megatron's order, which sends every pipeline across the
    sockets)."""
    order = hierarchy_order(model, list(gpus))
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


def local_search(
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
    for start in nested_orders(model, gpus, objective.layout):
        if evals > 1 and time.perf_counter() >= deadline:
            break
        us = objective(start)
        evals += 1
        if us < best_us:
            best, best_us = start, us
    if cut_bound_proves(objective, gpus, best_us, deadline):
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


def cut_bound_proves(
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
    # A network-only calibration (a multi-node run) leaves one server's prices uncalibrated.
    calibrated = model.calibration.scale.keys() - {"network"}
    if model.nodes > 1 or calibrated or model.hierarchy.nvlink_domains:
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
        tables = cut_tables(model, gpus, side, deadline)
        if tables is None:
            return False
        objective.memo[key] = tables
    fastest, cut = tables

    # A dimension's time once x of its flows leave node 0 and y leave node 1 (a ring across
    # the nodes: one each way; a pipeline hop: one), per TP/PP/DP term of the step plan.
    # A group across the nodes also pays the socket link's latency at each step (a term's
    # second function); one inside a node does not.
    size = {"tp": tp, "pp": pp, "dp": dp, "ep": layout.ep}
    sock = model.socket_latency_us()
    terms: dict[str, list[tuple[int, Callable[[float], float], Callable[[float], float]]]] = {
        "tp": [],
        "pp": [],
        "dp": [],
    }
    for dim, coll, nbytes, count in plan.collectives:
        if size[dim] < 2:
            continue
        if dim == "pp" and coll == "sendrecv":
            hop = functools.partial(chain_time, nbytes, hop="pcie")
            terms[dim].append((count, hop, functools.partial(hop, socket_us=sock)))
        elif dim in ("tp", "dp") and coll in RING_COLLECTIVES:
            at = functools.partial(ring_time_bound, model, coll, size[dim], nbytes, hops=("pcie",))
            terms[dim].append((count, at, functools.partial(at, socket_us=sock)))
    # Memoised per dimension on x + y * stride (x, y count flows: fewer than the GPUs).
    times: dict[str, dict[int, float]] = {"tp": {}, "pp": {}, "dp": {}}
    stride = len(gpus) + 1

    def dim_us(dim: str, x: int, y: int) -> float:
        rate = min([fastest, *(c / (x * a + y * b) for c, a, b in cut if x * a + y * b > 0)])
        rate *= 1 + BOUND_MARGIN
        got = times[dim][x + stride * y] = sum(
            count * (across(rate) if x + y else at(rate)) for count, at, across in terms[dim]
        )
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


def cut_tables(
    model: CostModel, gpus: Sequence[int], side: Mapping[int, int], deadline: float
) -> tuple[float, list[tuple[float, float, float]]] | None:
    """For `cut_bound_proves`: the most any GPU's paths out of it allow (their common links'
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
