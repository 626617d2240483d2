"""The rings NCCL would build over a GPU subset of one server, and their rates: an exact ring
search (branch and bound, greedy + 2-opt seed) up to EXACT_RING GPUs, a bounded O(n^2) choice
past it, extra rings packed into what NVLink bundles leave over, and an upper bound of any
ring's rate without a search (what placement cuts on). Kept per model: each subset is searched
once."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from topoweb.core.costs.records import Flow, Rate, ring_flows, tightest

if TYPE_CHECKING:
    from topoweb.core.costs.model import CostModel

RING_SEARCH_NODES = 20_000
# At most this many rings over an NVLink mesh (NCCL builds up to 16-32 channels; a DGX-1
# mesh needs 4-6 distinct rings to fill its bundles).
MAX_RINGS = 8
# Subsets up to this size get the exact ring search (branch and bound, 2-opt seed); larger
# ones a bounded O(n^2) choice (see Rings._bounded_channels).
EXACT_RING = 16
# Subsets larger than this get the hierarchy's order as their ring, without a search.
BIG_RING = 64

Channels = tuple[tuple[tuple[int, ...], float], ...]  # (ring order, share of the data)


class RingShape(NamedTuple):
    """A local GPU set's rings alone: the first ring's order, the rate of all its rings, the
    rate of the first ring opened into a chain (broadcast / reduce), every hop NVLink, some hop
    across sockets."""

    order: tuple[int, ...]
    rate: Rate
    chain: Rate
    nvlink: bool
    socket: bool  # some hop crosses the link between two sockets


class Rings:
    """Ring search over one model's routes, with what it learns kept per GPU subset."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.routes = model.routes
        self._channels_by_set: dict[tuple[int, ...], Channels] = {}
        self._pair_rates: dict[Flow, float] = {}  # solo rate of one GPU pair, for big rings
        self._shapes: dict[tuple[int, ...], RingShape] = {}  # see shape
        self._rate_bounds: dict[tuple[int, ...], float] = {}  # see rate_bound
        self._pair_loads: dict[Flow, list[tuple[int, float]]] = {}  # see _pair_load

    def shape(self, local: tuple[int, ...]) -> RingShape:
        """The rings of a sorted local GPU set (at least two GPUs), priced alone (kept)."""
        got = self._shapes.get(local)
        if got is None:
            model = self.model
            channels = self.channels(local)
            flows = [f for o, _ in channels for f in ring_flows(o)]
            open_flows = ring_flows(channels[0][0])[:-1]
            got = self._shapes[local] = RingShape(
                channels[0][0],
                model.solo_rate(model.channel_load(channels)),
                model.solo_rate(model.load((f, 1.0) for f in open_flows)),
                all(self.routes.hop_class(f) == "nvlink" for f in flows),
                any(self.routes.crosses_socket(f) for f in flows),
            )
        return got

    def rate_bound(self, gpus: Sequence[int]) -> float:
        """An upper bound of the solo rate of any rings over `gpus` (every channel mix NCCL
        could build), from the O(p^2) routes of its pairs, without a ring search. Each ring of
        a mix visits every GPU once and the mix's shares sum to 1, so (1) a GPU's out-flows
        carry shares summing to 1, each at most its pair's solo rate: the rate is at most the
        sum of a GPU's pair rates out (or in); (2) a resource carries at least, from each
        GPU, its lightest out-flow's weight on it (or into each GPU, its lightest in-flow's),
        and, where every flow from the GPUs sending over it to the others crosses it, the
        lightest such weight (a ring leaves a set of GPUs at least once): the rate is at most
        its capacity over that load."""
        key = tuple(sorted(gpus))
        got = self._rate_bounds.get(key)
        if got is not None:
            return got
        caps = self.routes.caps
        pair_rate = self._pair_rate
        out_sum = dict.fromkeys(key, 0.0)
        in_sum = dict.fromkeys(key, 0.0)
        on: dict[int, list[tuple[int, int, float]]] = {}  # resource -> flows crossing it
        for a in key:
            for b in key:
                if a != b:
                    x = pair_rate(a, b)
                    out_sum[a] += x
                    in_sum[b] += x
                    for r, w in self._pair_load(a, b):
                        on.setdefault(r, []).append((a, b, w))
        bound = min(min(out_sum.values()), min(in_sum.values()))
        full = len(key) - 1
        for r, flows in on.items():
            if len(flows) < full:
                continue  # neither rule below can load it (a dedicated NVLink bundle)
            # Per sender and per receiver: how many of its flows cross, the lightest weight.
            sent: dict[int, list[float]] = {}
            into: dict[int, list[float]] = {}
            for a, b, w in flows:
                sent.setdefault(a, []).append(w)
                into.setdefault(b, []).append(w)
            least = max(
                sum(min(ws) for ws in sent.values() if len(ws) == full),
                sum(min(ws) for ws in into.values() if len(ws) == full),
            )
            for inside, end in ((sent, 1), (into, 0)):
                k = len(inside)
                if k <= full:  # some GPU outside: a ring leaves (enters) `inside` at least once
                    cross = [f[2] for f in flows if f[end] not in inside]
                    if len(cross) == k * (full + 1 - k):
                        least = max(least, min(cross))
            if least > 0:
                bound = min(bound, caps[r] / least)
        self._rate_bounds[key] = bound
        return bound

    def channels(self, gpus: Sequence[int]) -> Channels:
        """The rings NCCL would build over a subset, with the share of data each carries.

        Up to EXACT_RING GPUs the first ring is the best single ring (branch and bound, exact
        within RING_SEARCH_NODES expansions, seeded by a greedy + 2-opt ring). Where dedicated
        NVLink bundles limit it, more rings are packed into the capacity left over (the
        reverse ring, then other cycles), as NCCL builds several channels over a DGX-1 mesh:
        a fully connected NV1/NV2 quad gets 4 links' worth, not one ring's 2."""
        key = tuple(sorted(gpus))
        if key in self._channels_by_set:
            return self._channels_by_set[key]
        if len(key) < 2:
            raise ValueError("a collective needs at least two GPUs")
        if len(key) > EXACT_RING:
            big = self._bounded_channels(key)
            self._channels_by_set[key] = big
            return big
        for f in ((a, b) for a in key for b in key if a != b):
            self.routes.path(f)  # every resource exists before the search reads capacities
        caps = list(self.routes.caps)
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

    def _bounded_channels(self, key: tuple[int, ...]) -> Channels:
        """Rings of a subset past EXACT_RING GPUs, in O(n^2) pair look-ups at most (an exact
        search is out of reach there, and its 2-opt seed alone costs O(n^3) per pass).

        The first ring is the better of the hierarchy's order (NVLink domain, NUMA node, PCIe
        tree: what NCCL's own search settles on for such fabrics) and, up to BIG_RING GPUs
        where that order leaves NVLink, the nearest-neighbour ring by pair rate; so it is
        never slower than the hierarchy's ring. Where an NVLink pair limits it, the reverse
        ring is packed beside it, as the exact search packs it over the links' other
        direction."""
        rings = [self.hierarchy_ring(key)]
        if len(key) <= BIG_RING and not all(map(self._is_nvlink, ring_flows(rings[0]))):
            rings.append(self._nearest_ring(key))
        best = rings[0]
        rate = self.rate(best)
        for ring in rings[1:]:
            got = self.rate(ring)
            if got.gbps > rate.gbps * (1 + 1e-9):
                best, rate = ring, got
        channels: list[tuple[tuple[int, ...], float]] = [(best, rate.gbps)]
        if self.routes.resources[rate.bottleneck].kind == "nvlink_pair":
            back = best[::-1]
            self.model.load((f, 1.0) for f in ring_flows(back))  # its resources exist first
            residual = self._residual(
                [r.capacity_gbps for r in self.routes.resources], best, rate.gbps
            )
            got = self.rate(back, residual)
            if got.gbps >= 0.05 * rate.gbps:
                channels.append((back, got.gbps))
        total = sum(x for _, x in channels)
        return tuple((o, x / total) for o, x in channels)

    def _pair_load(self, a: int, b: int) -> list[tuple[int, float]]:
        """The resources one GPU pair's flow crosses, each with its summed weight (cached)."""
        f = (a, b)
        got = self._pair_loads.get(f)
        if got is None:
            got = self._pair_loads[f] = list(self.model.load([(f, 1.0)]).items())
        return got

    def _pair_rate(self, a: int, b: int) -> float:
        """Solo rate of one GPU pair (computed once per model)."""
        f = (a, b)
        got = self._pair_rates.get(f)
        if got is None:
            got = self._pair_rates[f] = self.model.solo_rate(self.model.load([(f, 1.0)])).gbps
        return got

    def _nearest_ring(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """Nearest neighbour by pair rate (each pair's rate computed once per model)."""
        pair = self._pair_rate
        order = [key[0]]
        left = list(key[1:])
        while left:
            here = order[-1]
            nxt = max(left, key=lambda g: pair(here, g))  # ties: the lowest index (key sorted)
            order.append(nxt)
            left.remove(nxt)
        return tuple(order)

    def hierarchy_ring(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """The subset in the hierarchy's order: socket, NVLink domain, PCIe tree."""

        def place(g: int) -> tuple[Any, ...]:
            gid = self.routes.gpu_ids[g]
            domain = self.routes.domain_of(gid)
            first = min(domain.gpus) if domain else gid
            return (self.routes.socket_of(gid), first, self.routes.chain(gid)[::-1], g)

        return tuple(sorted(key, key=place))

    def _residual(self, caps: list[float], ring: tuple[int, ...], rate: float) -> list[float]:
        out = list(caps)
        out.extend(r.capacity_gbps for r in self.routes.resources[len(out) :])
        for r, w in self.model.load((f, 1.0) for f in ring_flows(ring)).items():
            out[r] = max(0.0, out[r] - w * rate)
        return out

    def _best_ring(
        self,
        key: tuple[int, ...],
        caps: list[float],
        seed: bool = False,
        allowed: Callable[[Flow], bool] | None = None,
        slack: bool = False,
    ) -> tuple[int, ...] | None:
        """The ring of highest rate under `caps`. With `slack`, among rings of equal rate the
        one leaving most capacity on its links, so that more rings fit beside it (on a DGX-1
        quad the ring over one NV1 link, not the one over three)."""
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

        paths = self.routes.paths  # every flow inside `key` is routed (see ring_channels)

        def push(flow: Flow, rate: float) -> float:
            for r, w in paths[flow]:
                x = load[r] = load.get(r, 0.0) + w
                x = caps[r] / x
                if x < rate:
                    rate = x
            return rate

        def pop(flow: Flow) -> None:
            for r, w in paths[flow]:
                load[r] -= w

        def dfs(rate: float) -> None:
            nonlocal best, best_rate, best_slack
            budget[0] -= 1
            if budget[0] < 0:
                return
            if not left:
                if allowed is None and path[1] > path[-1]:
                    return  # the reverse ring was or will be seen (packing keeps both)
                flow = (path[-1], path[0])
                if allowed is not None and not allowed(flow):
                    return
                r = push(flow, rate)
                pop(flow)
                # The capacity a ring leaves only ranks rings of equal rate under `slack`.
                room = sum(caps[x] for f in ring_flows(path) for x, _ in paths[f]) if slack else 0.0
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

    def _is_nvlink(self, flow: Flow) -> bool:
        return self.routes.transport(flow) == "nvlink"

    def rate(self, order: tuple[int, ...], caps: list[float] | None = None) -> Rate:
        """The ring's rate under `caps` (default: the full capacities); a resource past the
        end of `caps` (created after it was taken) counts as full."""
        load: dict[int, float] = {}
        paths = self.routes.paths
        n = len(order)
        for i in range(n):
            flow = (order[i], order[(i + 1) % n])
            path = paths.get(flow)
            if path is None:
                path = self.routes.path(flow)
            for r, rw in path:
                load[r] = load.get(r, 0.0) + 1.0 * rw
        if caps is None:
            return tightest(self.routes.caps, load)
        if len(caps) < len(self.routes.caps):
            caps = caps + [0.0] * (len(self.routes.caps) - len(caps))
        return tightest(caps, load)

    def _greedy_ring(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """Nearest neighbour by pair bandwidth, then 2-opt on the ring's rate."""
        pair_bw = self._pair_rate
        order = [key[0]]
        left = set(key[1:])
        while left:
            nxt = max(sorted(left), key=lambda g: pair_bw(order[-1], g))
            order.append(nxt)
            left.discard(nxt)
        best = tuple(order)
        best_rate = self.rate(best).gbps
        if len(key) > 64:
            return best  # 2-opt is O(n^3) per pass: big rings keep the greedy order
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
