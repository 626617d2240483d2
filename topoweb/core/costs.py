"""Alpha-beta cost of NCCL-style collectives on a GPU subset of one server, with flows that
share a link, PCIe uplink, host bridge, socket link or NVSwitch port splitting its capacity
(max-min fair share over the recovered hierarchy); calibration from measured runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.catalogue import HOST_STAGED_COPIES, Hardware, resolve_hardware
from topoweb.core.hierarchy import Hierarchy, recover_hierarchy
from topoweb.core.model import NcclRun, P2PResult, Topology

COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
)
# nccl-tests busbw = algbw x factor(p) (DOMAIN.md s3).
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "alltoall": lambda p: (p - 1) / p,
    "sendrecv": lambda p: 1.0,
}
# 8 B .. 8 GiB, doubling: the sweep nccl-tests users run.
STANDARD_SIZES: tuple[int, ...] = tuple(2**k for k in range(3, 34))
# Branch-and-bound expansions per ring search; past it the best ring found so far is kept.
RING_SEARCH_NODES = 20_000
CALIBRATION_CLASSES = ("nvlink", "pcie", "socket")

Flow = tuple[int, int]  # GPU index -> GPU index


@dataclass(frozen=True)
class Resource:
    id: str
    kind: str  # nvswitch_port, nvlink_pair, pcie_link, pcie_uplink, host_bridge, socket
    cls: str  # calibration class: nvlink, pcie, socket
    capacity_gbps: float  # effective, per direction
    description: str


@dataclass(frozen=True)
class Calibration:
    """Measured corrections per class: capacity scale factors and per-hop latency (us)."""

    scale: dict[str, float] = field(default_factory=dict, hash=False)
    alpha_us: dict[str, float] = field(default_factory=dict, hash=False)
    sources: tuple[str, ...] = ()

    def merged(self, other: Calibration) -> Calibration:
        return Calibration(
            {**self.scale, **other.scale},
            {**self.alpha_us, **other.alpha_us},
            self.sources + other.sources,
        )

    def to_document(self) -> dict[str, Any]:
        return {"scale": self.scale, "alpha_us": self.alpha_us, "sources": list(self.sources)}


@dataclass(frozen=True)
class Rate:
    """A group's lockstep rate: GB/s per unit of flow weight, and what limits it."""

    gbps: float
    bottleneck: int  # resource index


@dataclass(frozen=True)
class CollectiveCost:
    collective: str
    gpus: tuple[int, ...]
    bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    algorithm: str  # ring, tree, hierarchical, p2p, pairwise, chain
    order: tuple[int, ...]  # ring / chain order used
    bandwidth_gbps: float  # the bottleneck bandwidth B in the formula, per direction
    alpha_us: float  # per-step latency
    bottleneck: str  # in words
    bottleneck_class: str  # nvlink, pcie, socket
    calibrated: bool
    alternatives: dict[str, float] = field(default_factory=dict, hash=False)  # algo -> time_us

    def to_document(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "gpus": list(self.gpus),
            "bytes": self.bytes,
            "time_us": round(self.time_us, 3),
            "algbw_gbps": round(self.algbw_gbps, 3),
            "busbw_gbps": round(self.busbw_gbps, 3),
            "algorithm": self.algorithm,
            "order": list(self.order),
            "bandwidth_gbps_per_direction": round(self.bandwidth_gbps, 3),
            "alpha_us": round(self.alpha_us, 3),
            "bottleneck": self.bottleneck,
            "bottleneck_class": self.bottleneck_class,
            "calibrated": self.calibrated,
            "alternatives_us": {k: round(v, 3) for k, v in self.alternatives.items()},
        }


class CostModel:
    """One server's fabric as capacity-limited resources, and the route of every GPU pair.

    Built once per (topology, hardware, calibration); caches ring searches per GPU subset."""

    def __init__(
        self,
        topo: Topology,
        hardware: Hardware,
        hierarchy: Hierarchy,
        calibration: Calibration | None = None,
    ) -> None:
        self.topo = topo
        self.hardware = hardware
        self.hierarchy = hierarchy
        self.calibration = calibration or Calibration()
        self.gpu_ids: dict[int, str] = {g.index: g.id for g in topo.gpus}
        self.resources: list[Resource] = []
        self._index: dict[str, int] = {}
        self._paths: dict[Flow, tuple[tuple[int, float], ...]] = {}
        self._alpha: dict[Flow, float] = {}
        self._device_ids = {d.id for d in topo.devices}
        self._ring_cache: dict[tuple[int, ...], tuple[tuple[tuple[int, ...], float], ...]] = {}
        self._build()

    # --- construction ----------------------------------------------------------------------

    def _resource(self, rid: str, kind: str, cls: str, capacity: float, text: str) -> int:
        if rid not in self._index:
            cap = capacity * self.calibration.scale.get(cls, 1.0)
            self._index[rid] = len(self.resources)
            self.resources.append(Resource(rid, kind, cls, cap, text))
        return self._index[rid]

    def _alpha_of(self, cls: str) -> float:
        key = {"nvlink": "nvlink", "pcie": "pcie", "socket": "socket"}[cls]
        return self.calibration.alpha_us.get(cls, self.hardware.latency(key))

    def _build(self) -> None:
        hw, h = self.hardware, self.hierarchy
        for a_idx, a in self.gpu_ids.items():
            for b_idx, b in self.gpu_ids.items():
                if a_idx == b_idx:
                    continue
                lnk = self.topo.link(a, b)
                domain = h.domain_of(a)
                if lnk.is_nvlink and domain is not None and b in domain.gpus:
                    if domain.fabric == "nvswitch":
                        bw = domain.port_links * hw.nvlink_per_link_gbps
                        out = self._resource(
                            f"nvport:{a}:out",
                            "nvswitch_port",
                            "nvlink",
                            bw,
                            f"NVSwitch port of {a} (NV{domain.port_links}, egress)",
                        )
                        inn = self._resource(
                            f"nvport:{b}:in",
                            "nvswitch_port",
                            "nvlink",
                            bw,
                            f"NVSwitch port of {b} (NV{domain.port_links}, ingress)",
                        )
                        path: tuple[tuple[int, float], ...] = ((out, 1.0), (inn, 1.0))
                    else:
                        bw = lnk.nvlinks * hw.nvlink_per_link_gbps
                        r = self._resource(
                            f"nvpair:{a}>{b}",
                            "nvlink_pair",
                            "nvlink",
                            bw,
                            f"NVLink {lnk.link_class} {a}->{b}",
                        )
                        path = ((r, 1.0),)
                    self._paths[(a_idx, b_idx)] = path
                    self._alpha[(a_idx, b_idx)] = self._alpha_of("nvlink")
                else:
                    self._paths[(a_idx, b_idx)], self._alpha[(a_idx, b_idx)] = self._pcie_path(a, b)

    def _uplink(self, item: str, direction: str) -> int:
        hw = self.hardware
        if item in self._device_ids:
            return self._resource(
                f"pcie:{item}:{direction}",
                "pcie_link",
                "pcie",
                hw.pcie_gbps,
                f"PCIe Gen{hw.pcie_gen} x{hw.pcie_width} link of {item} "
                f"({'toward the CPU' if direction == 'up' else 'from the CPU'})",
            )
        node = self.hierarchy.node(item)
        kind = "host_bridge" if node.kind == "host_bridge" else "pcie_uplink"
        return self._resource(
            f"uplink:{item}:{direction}",
            kind,
            "pcie",
            hw.pcie_gbps,
            f"uplink of {node.label} ({'up' if direction == 'up' else 'down'})",
        )

    def _pcie_path(self, a: str, b: str) -> tuple[tuple[tuple[int, float], ...], float]:
        """PCIe route a -> b: up to the lowest common node, across sockets if needed, down.

        Without P2P the copy is staged in host memory: the route goes up to the CPU and every
        byte is carried twice in sequence (device-to-host, then host-to-device)."""
        h, hw = self.hierarchy, self.hardware
        up_a = (a,) + h.chain(a)
        up_b = (b,) + h.chain(b)
        common = next((x for x in up_a[1:] if x in up_b[1:]), None)
        if not hw.p2p_enabled:
            common = None
        weight = 1.0 if hw.p2p_enabled else float(HOST_STAGED_COPIES)
        # The last element of each chain is the NUMA node: its exit is the socket link.
        path: list[tuple[int, float]] = []
        for item in up_a[:-1]:
            if item == common:
                break
            path.append((self._uplink(item, "up"), weight))
        down: list[tuple[int, float]] = []
        for item in up_b[:-1]:
            if item == common:
                break
            down.append((self._uplink(item, "down"), weight))
        alpha = self._alpha_of("pcie")
        numa_a, numa_b = up_a[-1], up_b[-1]
        if numa_a != numa_b:
            cap = self.hardware.socket_gbps
            path.append(
                (
                    self._resource(
                        f"socket:{numa_a}:out",
                        "socket",
                        "socket",
                        cap,
                        f"socket link out of {h.node(numa_a).label} ({hw.socket_link})",
                    ),
                    weight,
                )
            )
            path.append(
                (
                    self._resource(
                        f"socket:{numa_b}:in",
                        "socket",
                        "socket",
                        cap,
                        f"socket link into {h.node(numa_b).label} ({hw.socket_link})",
                    ),
                    weight,
                )
            )
            alpha += self._alpha_of("socket")
        return tuple(path + down[::-1]), alpha

    # --- rates -----------------------------------------------------------------------------

    def check_gpus(self, gpus: Iterable[int]) -> tuple[int, ...]:
        out = tuple(gpus)
        unknown = [g for g in out if g not in self.gpu_ids]
        if unknown:
            raise ValueError(
                f"unknown GPU index {unknown[0]}: this server has GPUs {sorted(self.gpu_ids)}"
            )
        if len(set(out)) != len(out):
            raise ValueError(f"GPU list {list(out)} repeats a GPU")
        return out

    def load(self, flows: Iterable[tuple[Flow, float]]) -> dict[int, float]:
        """Resource -> total weight of the given (flow, weight) pairs crossing it."""
        out: dict[int, float] = {}
        for flow, w in flows:
            for r, rw in self._paths[flow]:
                out[r] = out.get(r, 0.0) + w * rw
        return out

    def solo_rate(self, load: dict[int, float]) -> Rate:
        best = min(load, key=lambda r: self.resources[r].capacity_gbps / load[r])
        return Rate(self.resources[best].capacity_gbps / load[best], best)

    def share(self, loads: Sequence[dict[int, float]]) -> list[Rate]:
        """Max-min fair rates for groups running at once (progressive filling): every group
        grows at the same pace until a resource it crosses is full."""
        rates = [0.0] * len(loads)
        limits = [-1] * len(loads)
        remaining = {r: self.resources[r].capacity_gbps for ld in loads for r in ld}
        active = {i for i, ld in enumerate(loads) if ld}
        while active:
            used: dict[int, float] = {}
            for i in active:
                for r, w in loads[i].items():
                    used[r] = used.get(r, 0.0) + w
            step = min(remaining[r] / w for r, w in used.items() if w > 0)
            for r, w in used.items():
                remaining[r] -= w * step
            full = {r for r, w in used.items() if w > 0 and remaining[r] <= 1e-9 * (1 + w)}
            for i in list(active):
                rates[i] += step
                hit = [r for r in loads[i] if r in full]
                if hit:
                    limits[i] = hit[0]
                    active.discard(i)
        return [Rate(rates[i], limits[i]) for i in range(len(loads))]

    def alpha(self, flows: Iterable[Flow]) -> float:
        return max((self._alpha[f] for f in flows), default=0.0)

    # --- ring search -----------------------------------------------------------------------

    def ring_channels(self, gpus: Sequence[int]) -> tuple[tuple[tuple[int, ...], float], ...]:
        """The best ring order(s) for a subset, with the share of data each carries.

        Branch and bound over every ring order (exact within RING_SEARCH_NODES expansions),
        seeded by a greedy + 2-opt ring. More rings are added (the reverse, then NVLink-only
        rings disjoint from those taken) only where dedicated NVLink pairs limit the first
        ring: NCCL builds several channels over DGX-1 style meshes the same way."""
        key = tuple(sorted(gpus))
        if key in self._ring_cache:
            return self._ring_cache[key]
        if len(key) < 2:
            raise ValueError("a collective needs at least two GPUs")
        best = self._best_ring(key)
        assert best is not None
        channels: list[tuple[tuple[int, ...], float]] = [(best, 1.0)]
        rate = self._ring_rate(best)
        if self.resources[rate.bottleneck].kind == "nvlink_pair" and len(key) > 2:
            used = {frozenset(f) for f in _ring_flows(best)}
            queue = [_reverse(best)]
            while queue:
                cand = queue.pop(0)
                trial = self._weighted(channels + [(cand, 1.0)])
                new = self.solo_rate(self._channel_load(trial))
                if new.gbps > rate.gbps * 1.01:
                    channels, rate = trial, new
                used |= {frozenset(f) for f in _ring_flows(cand)}
                if not queue:
                    nxt = self._best_ring(key, self._fresh_nvlink(frozenset(used)))
                    if nxt is not None:
                        queue = [nxt, _reverse(nxt)]
        result = tuple(self._weighted(channels))
        self._ring_cache[key] = result
        return result

    def _best_ring(
        self, key: tuple[int, ...], allowed: Callable[[Flow], bool] | None = None
    ) -> tuple[int, ...] | None:
        if len(key) <= 3:
            ring = key
            return ring if allowed is None or all(map(allowed, _ring_flows(ring))) else None
        best: tuple[int, ...] | None = None
        best_rate = 0.0
        if allowed is None:
            best = self._greedy_ring(key)
            best_rate = self._ring_rate(best).gbps
        caps = [r.capacity_gbps for r in self.resources]
        load: dict[int, float] = {}
        path = [key[0]]
        left = set(key[1:])
        budget = [RING_SEARCH_NODES]

        def push(flow: Flow, rate: float) -> float:
            for r, w in self._paths[flow]:
                load[r] = load.get(r, 0.0) + w
                rate = min(rate, caps[r] / load[r])
            return rate

        def pop(flow: Flow) -> None:
            for r, w in self._paths[flow]:
                load[r] -= w

        def dfs(rate: float) -> None:
            nonlocal best, best_rate
            budget[0] -= 1
            if budget[0] < 0:
                return
            if not left:
                if path[1] > path[-1]:
                    return  # the reverse ring was or will be seen
                flow = (path[-1], path[0])
                if allowed is not None and not allowed(flow):
                    return
                r = push(flow, rate)
                pop(flow)
                if r > best_rate * (1 + 1e-9):
                    best, best_rate = tuple(path), r
                return
            for nxt in sorted(left):
                flow = (path[-1], nxt)
                if allowed is not None and not allowed(flow):
                    continue
                r = push(flow, rate)
                if r > best_rate * (1 + 1e-9):
                    path.append(nxt)
                    left.discard(nxt)
                    dfs(r)
                    left.add(nxt)
                    path.pop()
                pop(flow)

        dfs(math.inf)
        return best

    def _fresh_nvlink(self, used: frozenset[frozenset[int]]) -> Callable[[Flow], bool]:
        return lambda f: frozenset(f) not in used and self._is_nvlink(f)

    def _is_nvlink(self, flow: Flow) -> bool:
        return all(self.resources[r].cls == "nvlink" for r, _ in self._paths[flow])

    def _weighted(
        self, channels: list[tuple[tuple[int, ...], float]]
    ) -> list[tuple[tuple[int, ...], float]]:
        solo = [self._ring_rate(o).gbps for o, _ in channels]
        return [(o, s / sum(solo)) for (o, _), s in zip(channels, solo, strict=True)]

    def _channel_load(self, channels: Iterable[tuple[tuple[int, ...], float]]) -> dict[int, float]:
        return self.load((f, w) for o, w in channels for f in _ring_flows(o))

    def _ring_rate(self, order: tuple[int, ...]) -> Rate:
        return self.solo_rate(self.load((f, 1.0) for f in _ring_flows(order)))

    def _greedy_ring(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """Nearest neighbour by pair bandwidth, then 2-opt on the ring's rate."""

        def pair_bw(a: int, b: int) -> float:
            return self.solo_rate(self.load([((a, b), 1.0)])).gbps

        order = [key[0]]
        left = set(key[1:])
        while left:
            nxt = max(sorted(left), key=lambda g: pair_bw(order[-1], g))
            order.append(nxt)
            left.discard(nxt)
        best = tuple(order)
        best_rate = self._ring_rate(best).gbps
        improved = True
        while improved:
            improved = False
            for i in range(1, len(best) - 1):
                for j in range(i + 1, len(best)):
                    cand = best[:i] + best[i : j + 1][::-1] + best[j + 1 :]
                    r = self._ring_rate(cand).gbps
                    if r > best_rate * 1.0001:
                        best, best_rate, improved = cand, r, True
        return best

    def group_load(self, collective: str, gpus: Sequence[int]) -> dict[int, float]:
        """Resource load of one group running `collective` with its best ring(s): the input
        of `share` when several groups contend."""
        key = tuple(sorted(gpus))
        if collective == "alltoall":
            return self.load(((a, b), 1.0) for a in key for b in key if a != b)
        if collective == "sendrecv" and len(key) == 2:
            return self.load([((gpus[0], gpus[1]), 1.0)])
        return self._channel_load(self.ring_channels(key))

    def describe(self, r: int) -> str:
        return self.resources[r].description

    def is_calibrated(self, cls: str) -> bool:
        return cls in self.calibration.scale


def _reverse(order: tuple[int, ...]) -> tuple[int, ...]:
    return order[:1] + order[1:][::-1]


def _ring_flows(order: Sequence[int]) -> list[Flow]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def build_model(
    topo: Topology,
    gpu_model: str | None = None,
    *,
    pcie_gen: int | None = None,
    pcie_width: int = 16,
    p2p_enabled: bool = True,
    nvswitch: bool | None = None,
    calibration: Calibration | None = None,
) -> CostModel:
    """A cost model for one server. `gpu_model` is the NVML name where known."""
    if not topo.gpus:
        raise ValueError("the topology has no GPUs")
    hw = resolve_hardware(
        topo, gpu_model, pcie_gen=pcie_gen, pcie_width=pcie_width, p2p_enabled=p2p_enabled
    )
    return CostModel(topo, hw, recover_hierarchy(topo, gpu_model, nvswitch), calibration)


# --- collectives ---------------------------------------------------------------------------


def _us(nbytes: float, gbps: float) -> float:
    return nbytes / (gbps * 1e3) if gbps > 0 else math.inf


@dataclass(frozen=True)
class _Variant:
    algorithm: str
    time_us: float
    order: tuple[int, ...]
    bandwidth: float
    alpha: float
    bottleneck: int


def _ring_variant(
    model: CostModel, collective: str, gpus: tuple[int, ...], n: int, rate: Rate | None = None
) -> _Variant:
    p = len(gpus)
    channels = model.ring_channels(gpus)
    order = channels[0][0]
    flows = _ring_flows(order)
    if rate is None:
        rate = model.solo_rate(model._channel_load(channels))
    a = model.alpha(flows)
    b = rate.gbps
    if collective == "all_reduce":
        t = 2 * (p - 1) * a + _us(2 * (p - 1) / p * n, b)
    elif collective in ("reduce_scatter", "all_gather"):
        t = (p - 1) * a + _us((p - 1) / p * n, b)
    elif collective in ("broadcast", "reduce"):
        chain = model.solo_rate(model.load((f, 1.0) for f in flows[:-1]))
        b = max(b, chain.gbps)
        t = (p - 1) * a + _us(n, b)
        return _Variant("chain", t, order, b, a, chain.bottleneck)
    elif collective == "sendrecv":
        t = a + _us(n, b)
    else:
        raise ValueError(f"no ring form for {collective}")
    return _Variant("ring", t, order, b, a, rate.bottleneck)


def _tree_variant(model: CostModel, gpus: tuple[int, ...], n: int) -> _Variant:
    order = model.ring_channels(gpus)[0][0]
    flows = [(order[i], order[(i - 1) // 2]) for i in range(1, len(order))]
    rate = model.solo_rate(model.load((f, 1.0) for f in flows))
    a = model.alpha(flows)
    depth = math.ceil(math.log2(len(order)))
    t = 2 * depth * a + _us(2 * n, rate.gbps)
    return _Variant("tree", t, order, rate.gbps, a, rate.bottleneck)


def _domains(model: CostModel, gpus: tuple[int, ...]) -> list[tuple[int, ...]] | None:
    """Equal-size parts of the subset for a hierarchical all_reduce: NVLink domains first,
    NUMA nodes otherwise; None when the subset does not split evenly in two or more."""
    h = model.hierarchy

    def split(key_of: Any) -> list[tuple[int, ...]]:
        parts: dict[object, list[int]] = {}
        for g in gpus:
            parts.setdefault(key_of(model.gpu_ids[g]), []).append(g)
        return [tuple(v) for v in parts.values()]

    def nvlink_key(gpu: str) -> object:
        domain = h.domain_of(gpu)
        return domain.gpus if domain else gpu

    groups = split(nvlink_key)
    if len(groups) == 1:
        return None  # one NVLink domain: nothing slower to spare
    if all(len(g) == 1 for g in groups):
        groups = split(h.numa_of)
    if len(groups) >= 2 and len({len(x) for x in groups}) == 1 and len(groups[0]) >= 2:
        return groups
    return None


def _hierarchical_variant(model: CostModel, gpus: tuple[int, ...], n: int) -> _Variant | None:
    parts = _domains(model, gpus)
    if parts is None:
        return None
    m = len(parts[0])
    intra = model.share([model.group_load("reduce_scatter", g) for g in parts])
    cross_groups = [tuple(part[j] for part in parts) for j in range(m)]
    inter = model.share([model.group_load("all_reduce", g) for g in cross_groups])
    rs = max(
        _ring_variant(model, "reduce_scatter", g, n, r).time_us
        for g, r in zip(parts, intra, strict=True)
    )
    ar = max(
        _ring_variant(model, "all_reduce", g, n // m, r).time_us
        for g, r in zip(cross_groups, inter, strict=True)
    )
    slow = min(inter, key=lambda r: r.gbps)
    a = model.alpha(_ring_flows(cross_groups[0]))
    return _Variant(
        "hierarchical",
        2 * rs + ar,
        tuple(g for part in parts for g in part),
        slow.gbps,
        a,
        slow.bottleneck,
    )


def collective_cost(
    model: CostModel,
    collective: str,
    gpus: Sequence[int],
    nbytes: int,
    algorithm: str | None = None,
) -> CollectiveCost:
    """Predicted time of one collective on `gpus` (matrix GPU indices) moving `nbytes` as
    nccl-tests counts them; the best algorithm unless one is named."""
    if collective not in COLLECTIVES:
        raise ValueError(
            f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}"
        )
    if nbytes < 0:
        raise ValueError("the message size cannot be negative")
    key = model.check_gpus(gpus)
    p = len(key)
    if p < 2:
        raise ValueError("a collective needs at least two GPUs")
    variants: list[_Variant] = []
    if collective == "alltoall":
        flows = [(a, b) for a in key for b in key if a != b]
        rate = model.solo_rate(model.load((f, 1.0) for f in flows))
        a = model.alpha(flows)
        variants.append(
            _Variant(
                "pairwise",
                (p - 1) * a + _us(nbytes / p, rate.gbps),
                key,
                rate.gbps,
                a,
                rate.bottleneck,
            )
        )
    elif collective == "sendrecv" and p == 2:
        ld = model.load([((key[0], key[1]), 1.0)])
        rate = model.solo_rate(ld)
        a = model.alpha([(key[0], key[1])])
        variants.append(
            _Variant("p2p", a + _us(nbytes, rate.gbps), key, rate.gbps, a, rate.bottleneck)
        )
    else:
        ring = _ring_variant(model, collective, key, nbytes)
        variants.append(ring)
        # A measured sweep already folds NCCL's own algorithm choice into its fitted line.
        measured = model.is_calibrated(model.resources[ring.bottleneck].cls)
        if collective == "all_reduce" and p > 2 and not measured:
            variants.append(_tree_variant(model, key, nbytes))
            hier = _hierarchical_variant(model, key, nbytes)
            if hier is not None:
                variants.append(hier)
    if algorithm is not None:
        chosen = [v for v in variants if v.algorithm == algorithm]
        if not chosen:
            raise ValueError(
                f"algorithm {algorithm!r} does not apply to {collective} on "
                f"{p} GPUs; try {', '.join(v.algorithm for v in variants)}"
            )
        best = chosen[0]
    else:
        best = min(variants, key=lambda v: v.time_us)
    return _result(model, collective, key, nbytes, best, variants)


def _result(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    nbytes: int,
    best: _Variant,
    variants: Sequence[_Variant],
) -> CollectiveCost:
    p = len(key)
    algbw = nbytes / (best.time_us * 1e3) if best.time_us > 0 else 0.0
    res = model.resources[best.bottleneck]
    return CollectiveCost(
        collective=collective,
        gpus=key,
        bytes=nbytes,
        time_us=best.time_us,
        algbw_gbps=algbw,
        busbw_gbps=algbw * BUSBW_FACTOR[collective](p),
        algorithm=best.algorithm,
        order=best.order,
        bandwidth_gbps=best.bandwidth,
        alpha_us=best.alpha,
        bottleneck=f"{res.description}, {res.capacity_gbps:.1f} GB/s per direction"
        + (
            ""
            if abs(res.capacity_gbps - best.bandwidth) < 0.05
            else f"; the {best.algorithm} gets {best.bandwidth:.1f} GB/s"
        )
        + ("" if best.algorithm in ("ring", "p2p") else f" ({best.algorithm})"),
        bottleneck_class=res.cls,
        calibrated=model.is_calibrated(res.cls),
        alternatives={v.algorithm: v.time_us for v in variants},
    )


def concurrent_costs(
    model: CostModel, collective: str, groups: Sequence[Sequence[int]], nbytes: int
) -> list[CollectiveCost]:
    """The same collective run at once by several disjoint groups (TP groups of a job): rates
    from the max-min fair share of every resource they cross, ring algorithm."""
    keys = [model.check_gpus(g) for g in groups]
    seen: set[int] = set()
    for k in keys:
        if seen & set(k):
            raise ValueError("concurrent groups must not share a GPU")
        seen |= set(k)
    rates = model.share([model.group_load(collective, k) for k in keys])
    out = []
    for k, rate in zip(keys, rates, strict=True):
        p = len(k)
        if collective == "alltoall":
            flows = [(a, b) for a in k for b in k if a != b]
            a = model.alpha(flows)
            v = _Variant(
                "pairwise",
                (p - 1) * a + _us(nbytes / p, rate.gbps),
                k,
                rate.gbps,
                a,
                rate.bottleneck,
            )
        elif collective == "sendrecv" and p == 2:
            a = model.alpha([(k[0], k[1])])
            v = _Variant("p2p", a + _us(nbytes, rate.gbps), k, rate.gbps, a, rate.bottleneck)
        else:
            v = _ring_variant(model, collective, k, nbytes, rate)
        out.append(_result(model, collective, k, nbytes, v, [v]))
    return out


def slowest_group_us(
    model: CostModel,
    collective: str,
    groups: Sequence[Sequence[int]],
    nbytes: int,
    chains: bool = False,
) -> float:
    """The time of the slowest of several concurrent groups, without building results: the
    inner loop of placement search. `chains` prices pipeline sends along each group."""
    if chains:
        loads = [model.load(((c[i], c[i + 1]), 1.0) for i in range(len(c) - 1)) for c in groups]
    else:
        loads = [model.group_load(collective, g) for g in groups]
    rates = model.share(loads) if len(loads) > 1 else [model.solo_rate(loads[0])]
    worst = 0.0
    for g, rate in zip(groups, rates, strict=True):
        p = len(g)
        if chains:
            t = model.alpha([(g[i], g[i + 1]) for i in range(p - 1)]) + _us(nbytes, rate.gbps)
        elif collective == "alltoall":
            t = (p - 1) * model.alpha([(a, b) for a in g for b in g if a != b]) + _us(
                nbytes / p, rate.gbps
            )
        elif collective == "sendrecv" and p == 2:
            t = model.alpha([(g[0], g[1])]) + _us(nbytes, rate.gbps)
        else:
            t = _ring_variant(model, collective, tuple(sorted(g)), nbytes, rate).time_us
        worst = max(worst, t)
    return worst


def chain_costs(
    model: CostModel, chains: Sequence[Sequence[int]], nbytes: int
) -> list[CollectiveCost]:
    """Pipeline sends: each chain passes `nbytes` from stage to stage, every boundary at
    once; all chains run together and share what they cross."""
    keys = [model.check_gpus(c) for c in chains]
    loads = [model.load(((c[i], c[i + 1]), 1.0) for i in range(len(c) - 1)) for c in keys]
    rates = model.share(loads)
    out = []
    for c, rate in zip(keys, rates, strict=True):
        flows = [(c[i], c[i + 1]) for i in range(len(c) - 1)]
        a = model.alpha(flows)
        v = _Variant("chain", a + _us(nbytes, rate.gbps), c, rate.gbps, a, rate.bottleneck)
        out.append(_result(model, "sendrecv", c, nbytes, v, [v]))
    return out


def curve(
    model: CostModel, collective: str, gpus: Sequence[int], sizes: Sequence[int] = STANDARD_SIZES
) -> list[CollectiveCost]:
    """Predictions over message sizes (default 8 B .. 8 GiB), as a nccl-tests sweep prints."""
    return [collective_cost(model, collective, gpus, n) for n in sizes]


def p2p_matrix(model: CostModel) -> dict[str, list[list[float | None]]]:
    """Predicted unidirectional and bidirectional copy bandwidth (GB/s) for every GPU pair,
    as p2pBandwidthLatencyTest's P2P matrices lay them out (diagonal None)."""
    idx = sorted(model.gpu_ids)
    uni: list[list[float | None]] = []
    bi: list[list[float | None]] = []
    for a in idx:
        uni.append([])
        bi.append([])
        for b in idx:
            if a == b:
                uni[-1].append(None)
                bi[-1].append(None)
                continue
            uni[-1].append(round(model.solo_rate(model.load([((a, b), 1.0)])).gbps, 3))
            both = model.share([model.load([((a, b), 1.0)]), model.load([((b, a), 1.0)])])
            bi[-1].append(round(sum(r.gbps for r in both), 3))
    return {"unidirectional_gbps": uni, "bidirectional_gbps": bi}


# --- calibration ---------------------------------------------------------------------------


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line time = a + n / B over (bytes, time_us) rows, weighted by 1/time
    so the many small latency-bound rows still shape `a` without the big rows' absolute
    errors drowning them (nor the reverse, as 1/time^2 does). Returns (a in us, B in GB/s);
    a is kept at 0 or above."""
    pts = [(n, t) for n, t in points if t > 0]
    if len(pts) < 2:
        raise ValueError("calibration needs at least two timed rows")
    w = [1 / t for _, t in pts]
    sw = sum(w)
    sx = sum(wi * n for wi, (n, _) in zip(w, pts, strict=True))
    sy = sum(wi * t for wi, (_, t) in zip(w, pts, strict=True))
    sxx = sum(wi * n * n for wi, (n, _) in zip(w, pts, strict=True))
    sxy = sum(wi * n * t for wi, (n, t) in zip(w, pts, strict=True))
    det = sw * sxx - sx * sx
    if det <= 0:
        raise ValueError("calibration rows need at least two different sizes")
    slope = (sw * sxy - sx * sy) / det
    a = (sy - slope * sx) / sw
    if a < 0:  # refit through the origin
        a, slope = 0.0, sxy / sxx
    if slope <= 0:
        raise ValueError("the measured times do not grow with size")
    return a, 1 / slope / 1e3


# Ring form of each collective: (latency steps, bytes-over-B factor) for p ranks.
_STEPS: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {
    "all_reduce": (lambda p: 2 * (p - 1), lambda p: 2 * (p - 1) / p),
    "reduce_scatter": (lambda p: p - 1, lambda p: (p - 1) / p),
    "all_gather": (lambda p: p - 1, lambda p: (p - 1) / p),
    "broadcast": (lambda p: p - 1, lambda p: 1.0),
    "reduce": (lambda p: p - 1, lambda p: 1.0),
    "alltoall": (lambda p: p - 1, lambda p: 1 / p),
    "sendrecv": (lambda p: 1, lambda p: 1.0),
}


def calibrate_from_nccl(
    model: CostModel, run: NcclRun, gpus: Sequence[int] | None = None
) -> Calibration:
    """Fit a and B from a nccl-tests sweep on `gpus` (default: the run's devices), and turn
    them into a capacity scale and per-hop latency for the class that limited the run."""
    if run.failed or not run.rows:
        raise ValueError("this nccl-tests run has no usable rows")
    if run.collective not in _STEPS:
        raise ValueError(f"cannot calibrate from collective {run.collective!r}")
    if gpus is None:
        devices = [r.device for r in run.ranks if r.device is not None]
        gpus = devices if len(devices) >= 2 else list(range(run.n_gpus or 0))
    key = model.check_gpus(gpus)
    p = len(key)
    if p < 2:
        raise ValueError("calibration needs a run over at least two GPUs")
    pts = [
        (float(r.bytes), float(r.out_of_place.time_us))
        for r in run.rows
        if r.out_of_place.time_us is not None and r.bytes > 0
    ]
    a_fit, b_line = fit_alpha_beta(pts)
    steps, factor = _STEPS[run.collective]
    b_fit = b_line * factor(p)
    a_step = a_fit / steps(p)
    # The fit above uses the ring (pairwise, point-to-point) step counts, so the bandwidth it
    # corrects must be that algorithm's, even where another would win at this size.
    algorithm = {"alltoall": "pairwise", "sendrecv": "p2p" if p == 2 else "ring"}.get(
        run.collective, "ring"
    )
    base = collective_cost(model, run.collective, key, 1 << 30, algorithm=algorithm)
    cls = base.bottleneck_class
    scale = b_fit / base.bandwidth_gbps * model.calibration.scale.get(cls, 1.0)
    return Calibration(
        {cls: scale},
        {cls: a_step},
        (
            f"nccl-tests {run.collective} on GPUs {list(key)}: "
            f"a={a_step:.2f} us per step, B={b_fit:.1f} GB/s ({cls})",
        ),
    )


def calibrate_from_p2p(model: CostModel, result: P2PResult) -> Calibration:
    """Per class, the median ratio of measured to predicted unidirectional copy bandwidth
    (P2P=Enabled matrix) and the median measured GPU latency."""
    uni = result.matrices.get("unidirectional_p2p_enabled_gbps")
    if uni is None:
        raise ValueError("the p2p result has no unidirectional P2P=Enabled matrix")
    lat = result.matrices.get("latency_gpu_p2p_enabled_us")
    ratios: dict[str, list[float]] = {}
    lats: dict[str, list[float]] = {}
    n = len(uni)
    for i in range(n):
        for j in range(n):
            if i == j or i not in model.gpu_ids or j not in model.gpu_ids:
                continue
            rate = model.solo_rate(model.load([((i, j), 1.0)]))
            cls = model.resources[rate.bottleneck].cls
            ratios.setdefault(cls, []).append(uni[i][j] / rate.gbps)
            if lat is not None:
                lats.setdefault(cls, []).append(lat[i][j])
    if not ratios:
        raise ValueError("the p2p result shares no GPU pair with this topology")
    return Calibration(
        {c: statistics.median(v) * model.calibration.scale.get(c, 1.0) for c, v in ratios.items()},
        {c: statistics.median(v) for c, v in lats.items()},
        (f"p2pBandwidthLatencyTest over {n} GPUs",),
    )


def calibrated(model: CostModel, calibration: Calibration) -> CostModel:
    """The same server with measured figures applied."""
    return CostModel(
        model.topo, model.hardware, model.hierarchy, model.calibration.merged(calibration)
    )
