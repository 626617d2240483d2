"""Optimistic times that need no ring search: lower bounds of a group's priced time alone
(`solo_time_bound`, `ring_time_bound`) and of pipeline chains' contended time
(`chain_time_bound`), each tested never above the priced time. Placement cuts on them."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from topoweb.core.costs.collectives import (
    Shape,
    chain_time,
    ll_max_gbps,
    nccl_steps,
    nvls_variant,
)
from topoweb.core.costs.model import CostModel
from topoweb.core.costs.records import Rate, transfer_us
from topoweb.core.costs.tables import BASE_LATENCY_US, HOP_LATENCY_US, PROTOCOLS, TREE_CORRECTION

# Relative margin on a bound's rate: it is computed in another order than the priced rate,
# so the two could differ in the last bits where the bound is tight (an NVLink mesh).
BOUND_MARGIN = 1e-9


def solo_time_bound(model: CostModel, collective: str, gpus: Sequence[int], nbytes: int) -> float:
    """A lower bound of `slowest_group_us(model, collective, [gpus], nbytes)` (the group
    alone, hence of its time beside others too) that needs no ring search: NCCL's formulas
    of the collectives' NCCL variants with the ring rate replaced by `ring_rate_bound` (no
    lower), every latency row the ring could pay (no higher), and the NVLS time, which does
    not depend on the ring. 0.0 where this derives nothing (other collectives, calibrated
    classes, jobs over several nodes)."""
    key = tuple(sorted(gpus))
    p = len(key)
    if (
        p < 2
        or model.nodes > 1
        or model.calibration.scale.keys() - {"network"}
        or collective not in ("all_reduce", "reduce_scatter", "all_gather")
    ):
        return 0.0
    bus_max = model.ring_rate_bound(key) * (1 + BOUND_MARGIN)
    nvlink = [model.hop_class((a, b)) == "nvlink" for a in key for b in key if a != b]
    hops = ("nvlink",) if all(nvlink) else (("pcie",) if not any(nvlink) else ("nvlink", "pcie"))
    # Without NVLink, GPUs on both sockets make every ring cross between them over PCIe:
    # each step then waits on the socket link (what collectives price).
    sock = model.socket_latency_us() if not any(nvlink) and model.sockets(key) > 1 else 0.0
    best = ring_time_bound(model, collective, p, nbytes, bus_max, hops, sock)
    alone = Shape([key], key, Rate(math.inf, -1), Rate(math.inf, -1), True, False, math.inf, -1)
    nvls = nvls_variant(model, collective, key, nbytes, alone, None, 0.0)
    if nvls is not None:
        best = min(best, nvls.time_us)
    return best


def ring_time_bound(
    model: CostModel,
    collective: str,
    p: int,
    nbytes: int,
    bus_max: float,
    hops: Sequence[str],
    socket_us: float = 0.0,
) -> float:
    """A lower bound of the ring and tree times of `collective` (all_reduce, reduce_scatter,
    all_gather) over p GPUs of one node whose ring gets at most `bus_max` GB/s and whose hops
    are of the `hops` latency classes: NCCL's formulas of the collectives' NCCL variants at
    that rate, with every latency row the ring could pay (the least wins). `socket_us`: what
    each step adds where the group crosses sockets (CostModel.socket_latency_us)."""
    name = model.hardware.generation.name
    variants = _ring_bound_variants(
        name, ll_max_gbps(model, 1), collective, p, nbytes, tuple(hops), socket_us
    )
    return min(lat + transfer_us(nbytes, min(cap, a * bus_max)) for lat, a, cap in variants)


@functools.lru_cache(maxsize=1024)
def _ring_bound_variants(
    generation: str,
    ll_max: float,
    collective: str,
    p: int,
    nbytes: int,
    hops: tuple[str, ...],
    socket_us: float = 0.0,
) -> tuple[tuple[float, float, float], ...]:
    """`ring_time_bound`'s variants as (latency, a, cap): at a rate x a variant's algorithm
    bandwidth is min(cap, a x); the same for every group of p GPUs (kept per process)."""
    ll128_ok = "nvlink" in hops and not generation.startswith(("Kepler", "Maxwell", "Pascal"))
    steps = nccl_steps(collective, p)
    variants: list[tuple[float, float, float]] = []
    for i, proto in enumerate(PROTOCOLS):
        if proto == "LL128" and not ll128_ok:
            continue
        lat = min(
            BASE_LATENCY_US["ring"][i] + steps * (HOP_LATENCY_US[h]["ring"][i] + socket_us)
            for h in hops
        )
        share, cap = {"LL": (0.5, ll_max), "LL128": (0.92, math.inf), "Simple": (1.0, math.inf)}[
            proto
        ]
        variants.append((lat, share * p / steps, cap * p / steps))
    if collective == "all_reduce" and p > 2:
        log_size = int(math.log2(nbytes >> 6)) if nbytes >= 64 else -1
        for i, proto in enumerate(PROTOCOLS):
            if proto == "LL128" and not ll128_ok:
                continue
            lat = min(
                BASE_LATENCY_US["tree"][i]
                + 2 * (p - 1) * (HOP_LATENCY_US[h]["tree"][i] + socket_us)
                for h in hops
            )
            corr = 1.0
            if 0 <= log_size < len(TREE_CORRECTION[proto]):
                corr = TREE_CORRECTION[proto][log_size]
            share, cap = {
                "LL": (0.92 / 3.8, ll_max),
                "LL128": (0.92 * 7 / 9, math.inf),
                "Simple": (0.92, math.inf),
            }[proto]
            variants.append((lat, 0.5 * share * corr, 0.5 * cap * corr))
    return tuple(variants)


def chain_time_bound(model: CostModel, nbytes: int) -> Callable[[float], float] | None:
    """f(rate): a lower bound of `slowest_group_us(model, "sendrecv", chains, nbytes, True)`
    for any pipeline chains among which are chains whose summed load (`load` of their sends)
    leaves at most `rate` = min over resources of capacity / that load. Max-min sharing
    (`share`) freezes its first chains at that minimum over every chain's load, which is no
    higher, and a chain's time (`chain_time`) only grows as its rate falls: at `rate`, with
    the cheaper latency row, it bounds the slowest chain. None for jobs over several nodes."""
    if model.nodes > 1:
        return None
    return lambda rate: min(
        chain_time(nbytes, rate * (1 + BOUND_MARGIN), hop) for hop in ("nvlink", "pcie")
    )
