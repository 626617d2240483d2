"""The exact mapping search: branch and bound over every rank->GPU mapping of a layout, modulo
the server's GPU symmetries and the layout's own relabellings.

Its parts, so that a change lands in one place:
- `SearchPlan`: what is fixed before any rank is placed (which groups complete at which rank,
  each dimension's collectives), built once per search;
- `GroupPrices`: a group's solo time, its cheaper bound, and a pipeline chain's shareable load,
  each kept per search;
- `Branch`: what the ranks placed so far prove about the step, per dimension; copied where a
  rank changes it, so sibling branches never see each other's;
- `SymmetryBreaking`: which GPUs a rank may take so that only one mapping of each class of
  equivalent mappings is completed;
- `ExactSearch`: the depth-first walk (`visit`) and the bounds one placed rank triggers
  (`extend`), keeping the best complete mapping.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from topoweb.core.costs import chain_time_bound
from topoweb.core.placement.objective import (
    DIMENSIONS,
    StepCost,
    groups_key,
    hierarchy_order,
    rank_groups,
)

# Per-dimension lists (Branch) are indexed by slot, in DIMENSIONS order: tp, ep, dp, pp.
SLOT = {d: i for i, d in enumerate(DIMENSIONS)}
# A branch whose bound reaches this fraction of the best step time is cut; a complete mapping
# replaces the best only below BETTER of it (rounding never swaps equal answers).
CUT = 1 - 1e-9
BETTER = 1 - 1e-12

GpusOf = Callable[[Sequence[int]], Any]  # the GPUs of some ranks, read from the mapping
Completion = tuple[int, str, GpusOf]  # (slot, dimension, the completed group's GPUs)


class OutOfTime(Exception):
    """The branch and bound ran past its deadline; `best` is the best mapping it had found."""

    best: tuple[int, ...] = ()
    best_us: float = math.inf


def exact_remembered(
    objective: StepCost, gpus: Sequence[int], deadline: float | None = None
) -> tuple[tuple[int, ...], float]:
    """`exact`, remembered per cost model: the same question about a class answers at once
    (only a search that finished: one stopped by `deadline` raises OutOfTime)."""
    plan = objective.plan
    key = ("exact", tuple(sorted(gpus)), plan.layout, plan.collectives, plan.compute_mb_us,
           plan.micro_batches)  # fmt: skip
    hit = objective.memo.get(key)
    if hit is None:
        hit = objective.memo[key] = exact(objective, gpus, deadline)
    found: tuple[tuple[int, ...], float] = hit
    return found


def exact(
    objective: StepCost, gpus: Sequence[int], deadline: float | None = None
) -> tuple[tuple[int, ...], float]:
    """Branch and bound over rank->GPU mappings, built rank by rank in Megatron order with
    the relabellings that change no group fixed (TP positions of stage 0's first row and DP
    replicas of its first column ascending). A group's time alone is a lower bound of its time
    beside the other groups of its dimension (sharing only slows it), and the step time is
    monotone in each dimension's time: as soon as a group is complete its solo time raises its
    dimension's bound, as soon as a dimension is complete its contended time replaces the
    bound, and a partial mapping whose bound reaches the best step found is cut. Group costs
    are memoised per cost model, so the same group met in another branch (or another layout)
    costs a lookup. Raises OutOfTime past `deadline`, carrying the best mapping found."""
    return ExactSearch(objective, gpus, deadline).run()


@dataclass(frozen=True)
class SearchPlan:
    """What one search over a layout and a GPU set knows before placing any rank."""

    gpus: tuple[int, ...]  # sorted
    live: tuple[str, ...]  # dimensions with groups of 2 GPUs or more and a collective
    wanted: dict[str, list[tuple[str, int, int]]]  # per dimension: (collective, bytes, count)
    groups_at: list[list[Completion]]  # per rank: the groups its placement completes
    dims_at: list[list[tuple[int, str]]]  # per rank: the dimensions it completes
    # Per rank: whether a group that `GroupPrices.solo_bound` bounds without a ring search
    # completes there (groups of 4 GPUs or more, not pipeline chains).
    bounded_at: list[bool]
    # Per rank: pipeline chains whose first stages end there. Those stages alone send over a
    # subset of the chain's hops (no faster link, no lighter load, no lower latency class than
    # the whole chain), so their time bounds the chain's before its last stage is placed.
    prefixes_at: list[list[Completion]]
    members: dict[str, list[GpusOf]]  # per live dimension: each group's GPUs, from a mapping

    @classmethod
    def of(cls, objective: StepCost, gpus: Sequence[int]) -> SearchPlan:
        ordered = tuple(sorted(gpus))
        n = len(ordered)
        positions = rank_groups(tuple(range(n)), objective.layout)
        wanted = {
            d: [(c, b, k) for dd, c, b, k in objective.plan.collectives if dd == d]
            for d in DIMENSIONS
        }
        live = tuple(
            d for d in DIMENSIONS if wanted[d] and positions[d] and len(positions[d][0]) > 1
        )
        groups_at: list[list[Completion]] = [[] for _ in range(n)]
        dims_at: list[list[tuple[int, str]]] = [[] for _ in range(n)]
        bounded_at = [False] * n
        prefixes_at: list[list[Completion]] = [[] for _ in range(n)]
        for d in live:
            for grp in positions[d]:
                groups_at[max(grp)].append((SLOT[d], d, operator.itemgetter(*grp)))
                if d != "pp" and len(grp) >= 4:
                    bounded_at[max(grp)] = True
                if d == "pp":
                    for i in range(1, len(grp) - 1):
                        prefixes_at[grp[i]].append((SLOT[d], d, operator.itemgetter(*grp[: i + 1])))
            dims_at[max(max(g) for g in positions[d])].append((SLOT[d], d))
        members: dict[str, list[GpusOf]] = {
            d: [operator.itemgetter(*grp) for grp in positions[d]] for d in live
        }
        return cls(ordered, live, wanted, groups_at, dims_at, bounded_at, prefixes_at, members)


class GroupPrices:
    """What one search prices per group, kept by the group's GPUs in rank order: the same
    group meets the search in many branches, and these dicts answer it without the cost
    memo's keys (frozensets, symmetry classes)."""

    def __init__(self, objective: StepCost, plan: SearchPlan):
        self.objective = objective
        self.wanted = plan.wanted
        self.model = objective.model
        self.caps = self.model.capacities()  # resource capacities, by resource index
        self.solo_kept: dict[tuple[str, tuple[int, ...]], float] = {}
        self.bound_kept: dict[tuple[str, tuple[int, ...]], float] = {}
        self.loads: dict[tuple[int, ...], tuple[list[tuple[int, float]], float]] = {}
        # What the complete pipeline chains load together bounds the pipeline's contended
        # time (costs.chain_time_bound) before its last chain is placed, and before its
        # contended time is priced once it is: rate -> the summed bound of its collectives.
        # (Groups of other dimensions would need their rings, which pricing under symmetries
        # often spares: a bound from them cost more than it cut.)
        self.shared: dict[str, Callable[[float], float]] = {}
        if "pp" in plan.live:
            terms = [(k, chain_time_bound(self.model, b)) for _c, b, k in plan.wanted["pp"]]
            if all(f is not None for _, f in terms):
                self.shared["pp"] = summed_bound([(k, f) for k, f in terms if f is not None])

    def solo(self, d: str, group: tuple[int, ...]) -> float:
        """The group's collectives with nothing else running (a lower bound in company)."""
        t = self.solo_kept.get((d, group))
        if t is None:
            t = self.solo_kept[(d, group)] = sum(
                k * self.objective.solo_us(d, c, b, group) for c, b, k in self.wanted[d]
            )
        return t

    def solo_bound(self, d: str, group: tuple[int, ...]) -> float:
        """A lower bound of `solo` that needs no ring search (StepCost.solo_bound_us)."""
        t = self.bound_kept.get((d, group))
        if t is None:
            t = self.bound_kept[(d, group)] = sum(
                k * self.objective.solo_bound_us(d, c, b, group) for c, b, k in self.wanted[d]
            )
        return t

    def load(self, chain: tuple[int, ...]) -> tuple[list[tuple[int, float]], float]:
        """The chain's load on what other chains may also cross (`private` resources left
        out: the rate they give is no lower, so a bound from it still holds), and the least
        capacity / load over all of it (its rate alone)."""
        got = self.loads.get(chain)
        if got is None:
            model, caps = self.model, self.caps
            ld = model.load(((chain[i], chain[i + 1]), 1.0) for i in range(len(chain) - 1))
            shareable = [(x, w) for x, w in ld.items() if not model.private(x)]
            got = self.loads[chain] = (shareable, min(caps[x] / w for x, w in ld.items()))
        return got


def summed_bound(terms: Sequence[tuple[int, Callable[[float], float]]]) -> Callable[[float], float]:
    """rate -> the sum of count x bound over a dimension's collectives."""
    return lambda rate: sum(k * f(rate) for k, f in terms)


@dataclass
class Branch:
    """What the ranks placed so far prove, per dimension slot. A complete mapping's step time
    sums `priced`; `cut` is the same raised by bounds, and cuts branches."""

    priced: list[float]  # times priced so far: solo, then contended
    cut: list[float]
    # The summed load of the dimension's complete groups on what groups may share (see
    # GroupPrices.load), and the least capacity / load over it.
    together: list[dict[int, float]]
    rates: list[float]

    @classmethod
    def root(cls) -> Branch:
        return cls([0.0] * 4, [0.0] * 4, [{} for _ in range(4)], [math.inf] * 4)

    def copy(self) -> Branch:
        # The load dicts are replaced, never changed in place (add_load), so a shallow copy
        # keeps the parent's intact.
        return Branch(self.priced[:], self.cut[:], self.together[:], self.rates[:])

    def raise_to(self, slot: int, t: float) -> None:
        """A time the dimension takes at least (a solo time, or its contended time)."""
        if t > self.priced[slot]:
            self.priced[slot] = t
        if t > self.cut[slot]:
            self.cut[slot] = t

    def add_load(
        self, slot: int, items: list[tuple[int, float]], caps: list[float]
    ) -> tuple[float, float]:
        """Adds a complete group's shareable load to its dimension's; (rate before, after)."""
        before = rate = self.rates[slot]
        load = self.together[slot] = dict(self.together[slot])
        for res, w in items:
            x = load[res] = load.get(res, 0.0) + w
            if caps[res] / x < rate:
                rate = caps[res] / x
        self.rates[slot] = rate
        return before, rate


@dataclass(frozen=True)
class SymmetryBreaking:
    """Only the lexicographically least mapping of each class of mappings equal up to a server
    symmetry (GPUs relabelled) and a layout symmetry (TP positions and, without EP, DP
    replicas permuted) is completed. Its necessary conditions, each checked as soon as the
    ranks it names are placed:
    - rank 0 holds the least GPU of its orbit, and no rank that a layout symmetry can move to
      rank 0 holds a GPU whose orbit has a smaller one;
    - the layout symmetries that keep rank 0: TP positions 1.. and DP replicas 1.. ascending;
    - no listed server symmetry fixing the GPUs of ranks 0..r-1 maps rank r's GPU lower
      (`perms`: those still fixing them, narrowed as ranks are placed)."""

    position: dict[int, int]  # GPU -> its position in the symmetry's tables
    least: tuple[int, ...]  # per position, the least position of its orbit
    perms: tuple[tuple[int, ...], ...]  # the symmetries that map these GPUs onto themselves
    rank0_orbit: frozenset[int]  # ranks a layout symmetry can move to rank 0
    tp: int
    dp_ascending_below: int  # ranks below which DP replicas ascend (0: EP, no such symmetry)

    @classmethod
    def of(cls, objective: StepCost, gpus: Sequence[int]) -> SymmetryBreaking:
        sym = objective.symmetries()
        least, perms = sym.least, list(sym.perms)
        if len(gpus) < len(sym.gpus):
            # Only the listed symmetries that map these GPUs onto themselves relabel a mapping
            # of them into another; orbit minima among those.
            inside = {sym.position[g] for g in gpus}
            perms = [x for x in perms if all(x[q] in inside for q in inside)]
            least = tuple(min(x[q] for x in perms) for q in range(len(sym.gpus)))
        tp, dp, ep = objective.layout.tp, objective.layout.dp, objective.layout.ep
        orbit = frozenset(t + tp * d for t in range(tp) for d in (range(dp) if ep == 1 else (0,)))
        return cls(sym.position, least, tuple(perms), orbit, tp, tp * dp if ep == 1 else 0)

    def candidates(
        self,
        r: int,
        order: Sequence[int],
        mapping: Sequence[int],
        used: set[int],
        stab: Sequence[tuple[int, ...]],
    ) -> list[int]:
        """The GPUs rank r may take, in the search's order (nearest first)."""
        pos, least, tp = self.position, self.least, self.tp
        if r == 0:
            return [g for g in order if least[pos[g]] == pos[g]]
        out = [g for g in order if g not in used]
        if r in self.rank0_orbit:
            first = pos[mapping[0]]
            out = [g for g in out if least[pos[g]] >= first]
        if 1 < r < tp:  # TP positions 1.. ascending
            out = [g for g in out if g > mapping[r - 1]]
        if 2 * tp <= r < self.dp_ascending_below and r % tp == 0:
            # DP replicas 1.. ascending by their first GPU
            out = [g for g in out if g > mapping[r - tp]]
        if len(stab) > 1:
            # No symmetry fixing the earlier ranks' GPUs maps this one lower.
            lowest = [min(c) for c in zip(*stab, strict=True)]
            out = [g for g in out if lowest[pos[g]] >= pos[g]]
        return out


class ExactSearch:
    """One branch and bound (see `exact`): `run` walks the ranks depth first from the best of
    the index and hierarchy orders; `extend` applies what placing one rank proves."""

    def __init__(self, objective: StepCost, gpus: Sequence[int], deadline: float | None):
        self.objective = objective
        self.plan = SearchPlan.of(objective, gpus)
        self.prices = GroupPrices(objective, self.plan)
        self.total = objective.plan.total_us
        self.deadline = deadline
        objective.symmetric = True
        self.order = hierarchy_order(objective.model, list(self.plan.gpus))
        self.breaking = SymmetryBreaking.of(objective, self.plan.gpus)
        self.mapping: list[int] = []
        self.used: set[int] = set()
        self.best: tuple[int, ...] = self.plan.gpus
        self.best_us = self.cost(self.plan.gpus)
        hier_us = self.cost(self.order)
        if hier_us < self.best_us * BETTER:
            self.best, self.best_us = tuple(self.order), hier_us

    def step_us(self, times: Sequence[float]) -> float:
        """The step time of per-slot dimension times (TP, EP and PP add; DP overlaps)."""
        return self.total(times[0] + times[1] + times[3], times[2])

    def contended(self, d: str, mapping: Sequence[int]) -> float:
        """A complete dimension's time, its groups running together."""
        gs = [gpus_of(mapping) for gpus_of in self.plan.members[d]]
        key = groups_key(d, gs)
        return sum(k * self.objective.each_us(d, c, b, key, gs) for c, b, k in self.plan.wanted[d])

    def cost(self, mapping: Sequence[int]) -> float:
        t = [0.0] * 4
        for d in self.plan.live:
            t[SLOT[d]] = self.contended(d, mapping)
        return self.step_us(t)

    def run(self) -> tuple[tuple[int, ...], float]:
        try:
            self.visit(0, Branch.root(), self.breaking.perms)
        except OutOfTime as stop:
            stop.best, stop.best_us = self.best, self.best_us
            raise
        return self.best, self.best_us

    def visit(self, r: int, branch: Branch, stab: Sequence[tuple[int, ...]]) -> None:
        """Places rank r on each GPU it may take, and goes on wherever no bound cuts."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise OutOfTime
        if r == len(self.plan.gpus):
            us = self.step_us(branch.priced)
            if us < self.best_us * BETTER:
                self.best, self.best_us = tuple(self.mapping), us
            return
        pos = self.breaking.position
        for g in self.breaking.candidates(r, self.order, self.mapping, self.used, stab):
            self.mapping.append(g)
            child = self.extend(r, branch)
            if child is not None and self.step_us(child.cut) < self.best_us * CUT:
                q = pos[g]
                self.used.add(g)
                nxt = [x for x in stab if x[q] == q] if len(stab) > 1 else stab
                self.visit(r + 1, child, nxt)
                self.used.discard(g)
            self.mapping.pop()

    def extend(self, r: int, branch: Branch) -> Branch | None:
        """What placing rank r (the mapping's last GPU) proves: the branch raised by the
        chains' prefixes and the groups it completes, cheapest bounds first; None when a
        bound that needs no ring search already cuts it. The parent branch is unchanged."""
        plan, prices, mapping = self.plan, self.prices, self.mapping
        if not plan.prefixes_at[r] and not plan.groups_at[r]:
            return branch
        child = branch.copy()
        for s, d, gpus_of in plan.prefixes_at[r]:
            child.raise_to(s, prices.solo(d, gpus_of(mapping)))
        if not plan.groups_at[r]:
            return child
        done = [(s, d, gpus_of(mapping)) for s, d, gpus_of in plan.groups_at[r]]
        limit = self.best_us * CUT
        if plan.bounded_at[r]:
            # Bounds that need no ring search first: a branch they cut is never priced.
            probe = child.cut[:]
            for s, d, grp in done:
                t = prices.solo_bound(d, grp)
                if t > probe[s]:
                    probe[s] = t
            if self.step_us(probe) >= limit:
                return None
        for s, d, grp in done:
            child.raise_to(s, prices.solo(d, grp))
            f = prices.shared.get(d)
            if f is not None:
                items, alone = prices.load(grp)
                before, rate = child.add_load(s, items, prices.caps)
                # f falls as the rate rises, and cut[s] holds f(before) and this group's solo
                # time (no less than f(alone)): only a rate below both (groups sharing a
                # link) can raise it.
                if rate < before and rate < alone:
                    t = f(rate)
                    if t > child.cut[s]:
                        child.cut[s] = t
        # Contended times only for what the cheaper bounds did not already cut.
        for s, d in plan.dims_at[r]:
            if self.step_us(child.cut) >= limit:
                break
            child.raise_to(s, self.contended(d, mapping))
        return child
