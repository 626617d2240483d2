"""k-GPU selection: the best-connected free GPUs of each server by predicted all_reduce bus
bandwidth, fragmentation-aware, remembered per cost model."""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
        key=lambda s: (
            -round(s.busbw_gbps, 1),
            -round(s.leftover_busbw_gbps, 1),
            servers[s.server][0].sockets(s.gpus),
            s.server,
            s.gpus,
        )
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
        rows.append((subset, bw, left_bw, why))
    # Among equals, GPUs of one socket: a group across sockets pays the socket link's latency
    # at every step, which the rounded busbw does not show.
    rows.sort(key=lambda r: (-round(r[1], 1), -round(r[2], 1), model.sockets(r[0]), r[0]))
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
