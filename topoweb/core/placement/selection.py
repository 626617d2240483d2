"""k-GPU selection: the best-connected free GPUs of each server by predicted all_reduce bus
bandwidth, fragmentation-aware, remembered per cost model."""

from __future__ import annotations

import heapq
import itertools
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from topoweb.core.costs import CostModel, collective_cost
from topoweb.core.placement.objective import hierarchy_order

SELECTION_BYTES = 256 << 20  # the all_reduce size k-GPU selection ranks by


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
    servers: Mapping[str, tuple[CostModel, Sequence[int] | None]], k: int, top: int = 5
) -> list[Selection]:
    """The best k free GPUs on any one server, ranked by predicted all_reduce bus bandwidth;
    among equals, the choice that leaves the remaining free GPUs best connected wins. A
    server's free GPUs None: all of them."""
    if k < 1:
        raise ValueError("k must be at least 1")
    # Each server's rows come ranked, with their rank, from its model's memo (_best_on), so a
    # question over a fleet of few kinds of server ranks each kind once; only the `top` best
    # over all of them become Selections.
    found: list[tuple[tuple[Any, ...], str, _Row]] = []
    for name, (model, free) in servers.items():
        free_t = _free_gpus(model, free)
        if len(free_t) < k:
            continue
        for row in _best_on(model, free_t, k, top):
            found.append(((*row.rank, name, row.gpus), name, row))
    if not found:
        raise ValueError(f"no server has {k} free GPUs")
    out = []
    for _, name, row in heapq.nsmallest(top, found, key=itemgetter(0)):
        left_note = (
            f"; leaves GPUs that still reach {row.leftover_busbw_gbps:.0f} GB/s busbw"
            if row.leftover_busbw_gbps
            else ""
        )
        out.append(
            Selection(
                name, row.gpus, row.busbw_gbps, row.leftover_busbw_gbps, row.reason + left_note
            )
        )
    return out


@dataclass(frozen=True)
class _Row:
    """One k-GPU choice on a server, with its place in select_gpus's order before the
    server's name: rounded busbw and leftover busbw (higher first), then fewer sockets (a
    group across sockets pays the socket link's latency at every step, which the rounded
    busbw does not show)."""

    gpus: tuple[int, ...]
    busbw_gbps: float
    leftover_busbw_gbps: float
    reason: str
    rank: tuple[float, float, int]


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


def _free_gpus(model: CostModel, free: Sequence[int] | None) -> tuple[int, ...]:
    """The server's free GPUs, checked and sorted (all of them for None): remembered per
    model, since a fleet's servers of one kind mostly ask with the same ones."""
    key = ("free", None if free is None else tuple(free))
    memo = _memo(model)
    got: tuple[int, ...] | None = memo.get(key)
    if got is None:
        pool = model.gpu_ids if free is None else free
        got = _remember(memo, key, tuple(sorted(model.check_gpus(pool))))
    return got


def _best_on(model: CostModel, free: tuple[int, ...], k: int, top: int) -> tuple[_Row, ...]:
    """One server's `top` best k-GPU choices among `free` (sorted), in select_gpus's order.
    Only these can be among the `top` best over several servers, since a server's own
    choices keep their order there."""
    memo = _memo(model)
    key = ("best", free, k, top)
    got: tuple[_Row, ...] | None = memo.get(key)
    if got is not None:
        return got
    scored = [(subset, *quality(model, subset)) for subset in candidate_subsets(model, free, k)]
    best_bw = max(round(bw, 1) for _, bw, _ in scored)
    tied = 0
    rows = []
    for subset, bw, why in scored:
        left_bw = 0.0
        if round(bw, 1) == best_bw and tied < LEFTOVER_CANDIDATES:
            tied += 1
            left = tuple(g for g in free if g not in subset)
            left_bw = quality(model, left)[0] if len(left) >= 2 else 0.0
        rank = (-round(bw, 1), -round(left_bw, 1), model.sockets(subset))
        rows.append(_Row(subset, bw, left_bw, why, rank))
    rows.sort(key=lambda r: (r.rank, r.gpus))
    return _remember(memo, key, tuple(rows[:top]))


def best_group(model: CostModel, k: int, free: Sequence[int] | None = None) -> tuple[int, ...]:
    """The best-connected k GPUs by all_reduce bus bandwidth alone (no fragmentation
    tie-break): the group a cost table prices for "k GPUs of this server"."""
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    if not 1 <= k <= len(pool):
        raise ValueError(f"cannot pick {k} of {len(pool)} GPUs")
    return max(
        candidate_subsets(model, pool, k),
        key=lambda s: (round(quality(model, s)[0], 1), -model.sockets(s)),
    )


def quality(model: CostModel, subset: tuple[int, ...]) -> tuple[float, str]:
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


def candidate_subsets(model: CostModel, free: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    if math.comb(len(free), k) <= MAX_SUBSETS:
        return list(itertools.combinations(free, k))
    # Too many: windows of k over the hierarchy order (neighbours share switches, domains),
    # at most MAX_WINDOWS of them spread evenly over it (every window on a smaller server).
    order = hierarchy_order(model, list(free))
    last = len(order) - k
    starts = range(last + 1)
    if last + 1 > MAX_WINDOWS:
        starts = range(0, last + 1, -(-(last + 1) // MAX_WINDOWS))
    return sorted({tuple(sorted(order[i : i + k])) for i in (*starts, last)})
