"""The cost model's fast ring search and rates against the plain computation they replaced:
every ring, share, rate and collective answer bit-for-bit the same (==, not approx), on
symmetric and asymmetric servers, calibrated or not, P2P on or off."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Sequence

import pytest

from tests.core import topologies as T
from tests.core.topo_fixtures import fixture_text
from topoweb.core.costs import (
    COLLECTIVES,
    EXACT_RING,
    MAX_RINGS,
    RING_SEARCH_NODES,
    Calibration,
    CostModel,
    Flow,
    Rate,
    Rings,
    build_model,
    calibrated,
    collective_cost,
    concurrent_costs,
    p2p_matrix,
    slowest_group_us,
    with_options,
)
from topoweb.core.costs.records import ring_flows
from topoweb.core.formats.topo import parse
from topoweb.core.model import Topology


class ReferenceRings(Rings):
    """The ring search as first written: a path looked up per step, `min(load, key=...)` per
    rate, pair rates and ring rooms recomputed."""

    def rate(self, order: tuple[int, ...], caps: list[float] | None = None) -> Rate:
        load = self.model.load((f, 1.0) for f in ring_flows(order))
        if caps is None:
            return self.model.solo_rate(load)
        best = min(load, key=lambda r: (caps[r] if r < len(caps) else 0.0) / load[r])
        return Rate((caps[best] if best < len(caps) else 0.0) / load[best], best)

    def channels(self, gpus: Sequence[int]) -> tuple[tuple[tuple[int, ...], float], ...]:
        key = tuple(sorted(gpus))
        if key in self._channels_by_set:
            return self._channels_by_set[key]
        if len(key) > EXACT_RING:
            return super().channels(gpus)
        for f in ((a, b) for a in key for b in key if a != b):
            self.routes.path(f)
        caps = [r.capacity_gbps for r in self.routes.resources]
        best = self._best_ring(key, caps, seed=True)
        assert best is not None
        rate = self.rate(best)
        channels: list[tuple[tuple[int, ...], float]] = [(best, rate.gbps)]
        if self.routes.resources[rate.bottleneck].kind == "nvlink_pair" and len(key) > 2:
            roomy = self._best_ring(key, caps, allowed=self._is_nvlink, slack=True)
            if roomy is not None and self.rate(roomy).gbps >= rate.gbps * (1 - 1e-9):
                best = roomy
                channels = [(best, rate.gbps)]
            residual = self._residual(caps, best, rate.gbps)
            while len(channels) < MAX_RINGS:
                nxt = self._best_ring(key, residual, allowed=self._is_nvlink, slack=True)
                if nxt is None:
                    break
                got = self.rate(nxt, residual)
                if got.gbps < 0.05 * rate.gbps:
                    break
                channels.append((nxt, got.gbps))
                residual = self._residual(residual, nxt, got.gbps)
        total = sum(x for _, x in channels)
        result = tuple((o, x / total) for o, x in channels)
        self._channels_by_set[key] = result
        return result

    def _best_ring(
        self,
        key: tuple[int, ...],
        caps: list[float],
        seed: bool = False,
        allowed: Callable[[Flow], bool] | None = None,
        slack: bool = False,
    ) -> tuple[int, ...] | None:
        if len(key) <= 3:
            ok = allowed is None or all(map(allowed, ring_flows(key)))
            return key if ok and self.rate(key, caps).gbps > 0 else None
        best: tuple[int, ...] | None = None
        best_rate, best_slack = 0.0, -1.0
        if seed:
            best = self._greedy_ring(key)
            best_rate = self.rate(best).gbps
        load: dict[int, float] = {}
        path = [key[0]]
        left = set(key[1:])
        budget = [RING_SEARCH_NODES]
        tie = 1 - 1e-9 if slack else 1 + 1e-9

        def push(flow: Flow, rate: float) -> float:
            for r, w in self.routes.path(flow):
                load[r] = load.get(r, 0.0) + w
                rate = min(rate, caps[r] / load[r])
            return rate

        def pop(flow: Flow) -> None:
            for r, w in self.routes.path(flow):
                load[r] -= w

        def dfs(rate: float) -> None:
            nonlocal best, best_rate, best_slack
            budget[0] -= 1
            if budget[0] < 0:
                return
            if not left:
                if allowed is None and path[1] > path[-1]:
                    return
                flow = (path[-1], path[0])
                if allowed is not None and not allowed(flow):
                    return
                r = push(flow, rate)
                pop(flow)
                room = sum(caps[x] for f in ring_flows(path) for x, _ in self.routes.path(f))
                if r > best_rate * (1 + 1e-9) or (
                    slack and r >= best_rate * tie and room > best_slack
                ):
                    best, best_rate, best_slack = tuple(path), r, room
                return
            for nxt in sorted(left):
                flow = (path[-1], nxt)
                if allowed is not None and not allowed(flow):
                    continue
                r = push(flow, rate)
                if r > 0 and r >= best_rate * tie:
                    path.append(nxt)
                    left.discard(nxt)
                    dfs(r)
                    left.add(nxt)
                    path.pop()
                pop(flow)

        dfs(math.inf)
        return best

    def _greedy_ring(self, key: tuple[int, ...]) -> tuple[int, ...]:
        def pair_bw(a: int, b: int) -> float:
            return self.model.solo_rate(self.model.load([((a, b), 1.0)])).gbps

        order = [key[0]]
        left = set(key[1:])
        while left:
            nxt = max(sorted(left), key=lambda g: pair_bw(order[-1], g))
            order.append(nxt)
            left.discard(nxt)
        best = tuple(order)
        best_rate = self.rate(best).gbps
        if len(key) > 64:
            return best
        improved = True
        while improved:
            improved = False
            for i in range(1, len(best) - 1):
                for j in range(i + 1, len(best)):
                    cand = best[:i] + best[i : j + 1][::-1] + best[j + 1 :]
                    r = self.rate(cand).gbps
                    if r > best_rate * 1.0001:
                        best, best_rate, improved = cand, r, True
        return best


class Reference(CostModel):
    """The cost model with loads and rates as first written (a dict of loads and
    `min(load, key=...)` per rate) and the ring search above."""

    ring_search = ReferenceRings

    def load(self, flows: Iterable[tuple[Flow, float]]) -> dict[int, float]:
        out: dict[int, float] = {}
        for flow, w in flows:
            for r, rw in self.path(flow):
                out[r] = out.get(r, 0.0) + w * rw
        return out

    def solo_rate(self, load: dict[int, float], copy: bool = False) -> Rate:
        best = min(load, key=lambda r: self.capacities(copy)[r] / load[r])
        return Rate(self.capacities(copy)[best] / load[best], best)


def _reference(model: CostModel) -> Reference:
    return Reference(
        model.topo,
        model.hardware,
        model.hierarchy,
        model.calibration,
        p2p=model.p2p,
        p2p_status=model.p2p_status,
        nodes=model.nodes,
        nics_per_node=model.nics_per_node if not model.nic_assumed else None,
    )


def _odd(n: int, seed: int) -> Topology:
    """An asymmetric box of this file's cases (T.asymmetric_box, NVLink on 0.4 of pairs)."""
    return T.asymmetric_box(n, seed, nvlink_share=0.4)


def _dgx1_calibrated() -> CostModel:
    model = build_model(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB")
    return calibrated(model, Calibration({"nvlink": 0.83, "pcie": 1.1}, {"nvlink": 2.0}))


MODELS: dict[str, Callable[[], CostModel]] = {
    "dgx1-mesh": lambda: build_model(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB"),
    "dgx1-calibrated": _dgx1_calibrated,
    "topo_12": lambda: build_model(parse(fixture_text("topo_12")), "Tesla V100-SXM2-32GB"),
    "pcie8": lambda: build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe"),
    "pcie8-p2p-off": lambda: build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe", p2p="off"),
    "pcie16-nv4-pairs": lambda: build_model(T.pcie_nv4_pairs_16gpu()),
    "h200": lambda: build_model(T.h200_nv18_12nic(), "NVIDIA H200"),
    "gtx1070-7": lambda: build_model(T.gtx1070_7gpu()),
    "a100-nv4-4": lambda: build_model(T.a100_nv4_4gpu()),
    "odd7-1": lambda: build_model(_odd(7, 1)),
    "odd8-3": lambda: build_model(_odd(8, 3)),
    "odd9-8": lambda: build_model(_odd(9, 8)),
    "dgx1-2-nodes": lambda: with_options(
        build_model(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB"), nodes=2
    ),
}


def _subsets(model: CostModel, seed: int) -> list[tuple[int, ...]]:
    """Every subset of 2..8 GPUs on small servers; a fixed random sample on larger ones."""
    gpus = sorted(model.gpu_ids)
    if len(gpus) <= 9:
        return [s for k in range(2, len(gpus) + 1) for s in itertools.combinations(gpus, k)]
    rng = random.Random(seed)
    return [tuple(sorted(rng.sample(gpus, rng.randrange(2, 9)))) for _ in range(150)]


@pytest.mark.parametrize("name", list(MODELS))
def test_rings_and_rates_are_the_reference_ones_bit_for_bit(name: str) -> None:
    fast = MODELS[name]()
    slow = _reference(MODELS[name]())
    for subset in _subsets(fast, 11):
        assert fast.ring_channels(subset) == slow.ring_channels(subset), subset
        flows = [((a, b), 1.0) for a in subset for b in subset if a != b]
        assert fast.solo_rate(fast.load(flows)) == slow.solo_rate(slow.load(flows))
    # Creating resources in the same order keeps every index (and so every tie) the same.
    assert [r.id for r in fast.resources] == [r.id for r in slow.resources]
    assert p2p_matrix(fast) == p2p_matrix(slow)


@pytest.mark.parametrize("name", list(MODELS))
def test_collective_answers_are_the_reference_ones_bit_for_bit(name: str) -> None:
    fast = MODELS[name]()
    slow = _reference(MODELS[name]())
    rng = random.Random(5)
    total = len(fast.gpu_ids) * fast.nodes
    for _ in range(12):
        k = rng.randrange(2, min(total, 8) + 1)
        gpus = rng.sample(range(total) if fast.nodes > 1 else sorted(fast.gpu_ids), k)
        for collective in COLLECTIVES:
            if collective == "sendrecv" and k != 2:
                continue
            for nbytes in (1 << 10, 1 << 28):
                a = collective_cost(fast, collective, gpus, nbytes)
                b = collective_cost(slow, collective, gpus, nbytes)
                assert a == b and a.to_document() == b.to_document(), (collective, gpus)


@pytest.mark.parametrize("name", [n for n in MODELS if n != "dgx1-2-nodes"])
def test_concurrent_groups_cost_what_the_reference_says_bit_for_bit(name: str) -> None:
    fast = MODELS[name]()
    slow = _reference(MODELS[name]())
    gpus = sorted(fast.gpu_ids)
    rng = random.Random(7)
    for _ in range(10):
        order = rng.sample(gpus, len(gpus))
        size = rng.choice([s for s in (2, 3, 4) if s <= len(gpus)])
        groups = [order[i : i + size] for i in range(0, len(order) - size + 1, size)]
        for collective in ("all_reduce", "all_gather", "alltoall", "broadcast"):
            a = concurrent_costs(fast, collective, groups, 1 << 26)
            b = concurrent_costs(slow, collective, groups, 1 << 26)
            assert [x.to_document() for x in a] == [x.to_document() for x in b]
            assert slowest_group_us(fast, collective, groups, 1 << 26) == slowest_group_us(
                slow, collective, groups, 1 << 26
            )
        assert slowest_group_us(fast, "sendrecv", groups, 1 << 24, True) == slowest_group_us(
            slow, "sendrecv", groups, 1 << 24, True
        )
