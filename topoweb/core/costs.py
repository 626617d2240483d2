"""NCCL-like cost of collectives and peer copies on a GPU subset of one server or of N servers
wired alike: per-pair transport (NVLink, PCIe P2P, host shared memory), flows that share a
link, PCIe uplink, host bridge, socket link or NVSwitch port splitting its capacity (max-min
fair share over the recovered hierarchy), NCCL's algorithms (ring, tree, NVLS) and protocols
(LL, LL128, Simple) with its published latencies, and calibration from measured runs."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from topoweb.core.catalogue import (
    LAUNCH_US_PER_GPU,
    NET_EFFICIENCY,
    P2P_COPY_LATENCY_US,
    P2P_PCIE_EFFICIENCY,
    PCIE_GTS,
    SHM_READ_WEIGHT,
    STAGED_COPY_EFFICIENCY,
    STAGED_COPY_LATENCY_US,
    Hardware,
    nccl_pcie_gbps,
    pcie_line_rate_gbps,
    resolve_hardware,
)
from topoweb.core.formats.nvml import HostFacts, NvmlFacts
from topoweb.core.hierarchy import Hierarchy, recover_hierarchy
from topoweb.core.model import Device, Link, NcclRun, P2PResult, Topology, nvlink_count

COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
)
# A peer copy (cudaMemcpyPeer, what p2pBandwidthLatencyTest times): not an NCCL collective.
OPERATIONS: tuple[str, ...] = (*COLLECTIVES, "copy")
# nccl-tests busbw = algbw x factor(p) (DOMAIN.md s3).
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "alltoall": lambda p: (p - 1) / p,
    "sendrecv": lambda p: 1.0,
    "copy": lambda p: 1.0,
}
# 8 B .. 8 GiB, doubling: the sweep nccl-tests users run.
STANDARD_SIZES: tuple[int, ...] = tuple(2**k for k in range(3, 34))
# Branch-and-bound expansions per ring search; past it the best ring found so far is kept.
RING_SEARCH_NODES = 20_000
# At most this many rings over an NVLink mesh (NCCL builds up to 16-32 channels; a DGX-1
# mesh needs 4-6 distinct rings to fill its bundles).
MAX_RINGS = 8
# Subsets up to this size get the exact ring search (branch and bound, 2-opt seed); larger
# ones a bounded O(n^2) choice (see CostModel._bounded_channels).
EXACT_RING = 16
# Subsets larger than this get the hierarchy's order as their ring, without a search.
BIG_RING = 64
CALIBRATION_CLASSES = ("nvlink", "pcie", "socket")
P2PMode = Literal["auto", "on", "off"]

# --- NCCL's published tuning constants (src/graph/tuning.cc, NCCL 2.30) ---------------------
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
BASE_LATENCY_US: dict[str, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
}
HOP_LATENCY_US: dict[str, dict[str, tuple[float, float, float]]] = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
NVLS_LATENCY_US = {"nvlink": 25.0, "net": 18.0}
NVLS_TREE_NET_LATENCY_US = 20.9
# NVLS tree bus bandwidth cap per channel (GB/s): 2 nodes, more nodes.
NVLS_TREE_PER_CHANNEL = {"Hopper": (57.7, 45.5), "Blackwell": (96.0, 80.0)}
# Ring LL bus bandwidth cap (GB/s): one node by GPU arch; several nodes by CPU vendor and
# node count (2 nodes, more).
LL_MAX_BW_ONE_NODE = {"Volta": 39.0, "Ampere": 87.7, "Hopper": 141.0, "Blackwell": 282.0}
LL_MAX_BW_NODES = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
# Trees stray from the model at medium sizes: NCCL's own correction, 64 B << k, k = 0..22.
TREE_CORRECTION: dict[str, tuple[float, ...]] = {
    "LL": (1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1),
    "LL128": (1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8,
               .9, .9),
}  # fmt: skip
# NVLS: channels NCCL opens on the switch, and its per-channel speed ladder (intra-node).
NVLS_CHANNELS = 16
SPEED_LADDER: dict[str, tuple[float, ...]] = {
    "Hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "Blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}

Flow = tuple[int, int]  # GPU index -> GPU index
Path = tuple[tuple[int, float], ...]  # (resource index, weight per byte)


@dataclass(frozen=True)
class Resource:
    id: str
    kind: str  # nvswitch_port, nvlink_pair, pcie_link, pcie_uplink, host_bridge, socket, nic
    cls: str  # calibration class: nvlink, pcie, socket, network
    capacity_gbps: float  # what NCCL reaches, per direction
    description: str
    copy_gbps: float = 0.0  # what a copy engine reaches, per direction (0: same as NCCL's)


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
    algorithm: str  # ring, tree, nvls, hierarchical, p2p, pairwise, chain, copy
    order: tuple[int, ...]  # ring / chain order used
    bandwidth_gbps: float  # the bottleneck bandwidth B in the formula, per direction
    alpha_us: float  # latency of the chosen algorithm and protocol (incl. launch)
    bottleneck: str  # in words
    bottleneck_class: str  # nvlink, pcie, socket, network
    calibrated: bool
    alternatives: dict[str, float] = field(default_factory=dict, hash=False)  # algo -> time_us
    protocol: str = "Simple"
    transports: tuple[str, ...] = ()  # per hop of the order: "GPU0->GPU1 NVLink NV12", ...
    assumed: tuple[str, ...] = ()  # figures taken from defaults rather than known
    nodes: int = 1

    def to_document(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "gpus": list(self.gpus),
            "bytes": self.bytes,
            "time_us": round(self.time_us, 3),
            "algbw_gbps": round(self.algbw_gbps, 3),
            "busbw_gbps": round(self.busbw_gbps, 3),
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "nodes": self.nodes,
            "order": list(self.order),
            "transports": list(self.transports),
            "bandwidth_gbps_per_direction": round(self.bandwidth_gbps, 3),
            "alpha_us": round(self.alpha_us, 3),
            "bottleneck": self.bottleneck,
            "bottleneck_class": self.bottleneck_class,
            "calibrated": self.calibrated,
            "assumed": list(self.assumed),
            "alternatives_us": {k: round(v, 3) for k, v in self.alternatives.items()},
        }


class CostModel:
    """One server's fabric as capacity-limited resources, and the route of every GPU pair
    for NCCL (NVLink, PCIe P2P or host shared memory) and for a peer copy (NVLink, PCIe P2P
    or a copy staged through host memory). Routes are built on first use, so building a model
    costs O(devices); a job over `nodes` servers wired alike adds their NICs.

    Built once per (topology, hardware, calibration); caches ring searches per GPU subset."""

    def __init__(
        self,
        topo: Topology,
        hardware: Hardware,
        hierarchy: Hierarchy,
        calibration: Calibration | None = None,
        *,
        p2p: P2PMode = "auto",
        p2p_status: dict[Flow, bool] | None = None,
        nodes: int = 1,
        nics_per_node: int | None = None,
    ) -> None:
        if p2p not in ("auto", "on", "off"):
            raise ValueError(f"p2p must be auto, on or off, got {p2p!r}")
        if nodes < 1:
            raise ValueError(f"the job needs at least one node, got {nodes}")
        if nics_per_node is not None and nics_per_node < 1:
            raise ValueError(f"a node needs at least one NIC, got {nics_per_node}")
        self.topo = topo
        self.hardware = hardware
        self.hierarchy = hierarchy
        self.calibration = calibration or Calibration()
        self.p2p: P2PMode = p2p if hardware.p2p_enabled or p2p != "auto" else "off"
        self.p2p_status = dict(p2p_status or {})
        self.nodes = nodes
        self.gpu_ids: dict[int, str] = {g.index: g.id for g in topo.gpus}
        self.local_order: tuple[int, ...] = tuple(sorted(self.gpu_ids))
        self.nics_per_node = nics_per_node or len(topo.nics) or len(self.gpu_ids)
        self.nic_assumed = nics_per_node is None and not topo.nics
        self.resources: list[Resource] = []
        # Capacities by resource index, NCCL's and a copy engine's (the hot loops read these
        # lists rather than the Resource records).
        self._caps: list[float] = []
        self._copy_caps: list[float] = []
        self._index: dict[str, int] = {}
        self._paths: dict[Flow, Path] = {}
        self._copy_paths: dict[Flow, Path] = {}
        self._transport: dict[Flow, str] = {}
        self._alpha: dict[Flow, float] = {}
        self._device_ids = {d.id for d in topo.devices}
        self._nodes_by_id = {n.id: n for n in hierarchy.nodes}
        self._chains: dict[str, tuple[str, ...]] = {}
        self._domain = {g: d for d in hierarchy.nvlink_domains for g in d.gpus}
        # Each domain's GPUs as a set, asked once per GPU pair (a scan of the domain's tuple
        # made pricing every pair of a 576-GPU domain cubic).
        members = {id(d): frozenset(d.gpus) for d in hierarchy.nvlink_domains}
        self._domain_gpus = {g: members[id(d)] for g, d in self._domain.items()}
        numa_values = {d.id: (d.numa_affinity or "").strip() for d in topo.devices}
        self._socket_key = {
            dev: (f"numa{v}" if v.isdigit() else self.chain(dev)[-1])
            for dev, v in numa_values.items()
        }
        vendor_amd = "AMD" in hardware.socket_link
        # NCCL uses P2P up to PXB; on AMD with two GPUs up to SYS (src/graph/paths.cc).
        self._p2p_level = {"PIX", "PXB"} | (
            {"PHB", "NODE", "SYS"} if vendor_amd and len(self.gpu_ids) == 2 else set()
        )
        self._ring_cache: dict[tuple[int, ...], tuple[tuple[tuple[int, ...], float], ...]] = {}
        self._pair_rates: dict[Flow, float] = {}  # solo rate of one GPU pair, for big rings
        self._all_pairs: dict[tuple[int, ...], Rate] = {}  # see all_pairs_rate
        # Per local GPU set: ring order, solo ring rate, open-chain rate, all hops NVLink.
        self._solo_shapes: dict[tuple[int, ...], tuple[tuple[int, ...], Rate, Rate, bool]] = {}
        self._rate_bounds: dict[tuple[int, ...], float] = {}  # see ring_rate_bound
        self._pair_loads: dict[Flow, list[tuple[int, float]]] = {}  # see _pair_load
        # NVSwitch port resources by GPU id (see _nvlink_path).
        self._port_out: dict[str, int] = {}
        self._port_in: dict[str, int] = {}

    # --- construction ----------------------------------------------------------------------

    def chain(self, device: str) -> tuple[str, ...]:
        """Hierarchy nodes from the device's parent up to its NUMA node (cached)."""
        got = self._chains.get(device)
        if got is None:
            out = [self.hierarchy.parent[device]]
            while (up := self._nodes_by_id[out[-1]].parent) is not None:
                out.append(up)
            got = self._chains[device] = tuple(out)
        return got

    def _resource(
        self, rid: str, kind: str, cls: str, capacity: float, text: str, copy: float = 0.0
    ) -> int:
        if rid not in self._index:
            k = self.calibration.scale.get(cls, 1.0)
            self._index[rid] = len(self.resources)
            res = Resource(rid, kind, cls, capacity * k, text, (copy or capacity) * k)
            self.resources.append(res)
            self._caps.append(res.capacity_gbps)
            self._copy_caps.append(res.copy_gbps)
        return self._index[rid]

    def _alpha_of(self, cls: str) -> float:
        return self.calibration.alpha_us.get(cls, self.hardware.latency(cls))

    def transport(self, flow: Flow) -> str:
        """How NCCL moves bytes from one GPU to the other: nvlink, p2p (PCIe) or shm."""
        got = self._transport.get(flow)
        if got is None:
            got = self._transport[flow] = self._choose_transport(flow)
        return got

    def _choose_transport(self, flow: Flow) -> str:
        a, b = self.gpu_ids[flow[0]], self.gpu_ids[flow[1]]
        if self.p2p == "off":
            return "shm"
        if self._nvlinked(a, b):
            return "nvlink"
        if self.p2p == "on":
            return "p2p"
        if self.p2p_status.get(flow) is False or not self.hardware.pcie_p2p:
            return "shm"
        return "p2p" if self.topo.link_class(a, b) in self._p2p_level else "shm"

    def copy_transport(self, flow: Flow) -> str:
        """How cudaMemcpyPeer moves bytes: nvlink, p2p (PCIe), or staged through the host."""
        a, b = self.gpu_ids[flow[0]], self.gpu_ids[flow[1]]
        if self.p2p == "off":
            return "staged"
        if self._nvlinked(a, b):
            return "nvlink"
        if self.p2p == "on":
            return "p2p"
        status = self.p2p_status.get(flow)
        if status is not None:
            return "p2p" if status else "staged"
        if not self.hardware.pcie_p2p:
            return "staged"
        # The driver refuses PCIe P2P across Intel's QPI/UPI; AMD's xGMI carries it.
        cross = self.topo.link_class(a, b) == "SYS"
        return "staged" if cross and "AMD" not in self.hardware.socket_link else "p2p"

    def _nvlinked(self, a: str, b: str) -> bool:
        domain = self._domain_gpus.get(a)
        return domain is not None and b in domain and nvlink_count(self.topo.link_class(a, b)) > 0

    def path(self, flow: Flow) -> Path:
        got = self._paths.get(flow)
        if got is None:
            got = self._paths[flow] = self._route(flow, self.transport(flow))
        return got

    def copy_path(self, flow: Flow) -> Path:
        got = self._copy_paths.get(flow)
        if got is None:
            how = self.copy_transport(flow)
            # A pair copies over NVLink exactly when NCCL uses it (both ask p2p != "off" and
            # _nvlinked), over the same route: built once for both.
            if how == "nvlink":
                self._transport.setdefault(flow, "nvlink")  # as _choose_transport answers
                got = self.path(flow)
            else:
                got = self._route(flow, how)
            self._copy_paths[flow] = got
        return got

    def _route(self, flow: Flow, how: str) -> Path:
        a, b = self.gpu_ids[flow[0]], self.gpu_ids[flow[1]]
        if how == "nvlink":
            return self._nvlink_path(a, b)
        return self._pcie_path(a, b, how)

    def _nvlink_path(self, a: str, b: str) -> Path:
        hw = self.hardware
        domain = self._domain[a]
        if domain.fabric == "nvswitch":
            # The ports' indices as _resource keeps them under their ids, without building
            # the ids (a 576-GPU domain asks 331k times).
            out, inn = self._port_out.get(a, -1), self._port_in.get(b, -1)
            if out >= 0 and inn >= 0:
                return ((out, 1.0), (inn, 1.0))
            k = domain.port_links
            bw, copy = k * hw.nvlink_per_link_gbps, k * hw.nvlink_copy_per_link_gbps
            out = self._resource(
                f"nvport:{a}:out",
                "nvswitch_port",
                "nvlink",
                bw,
                f"NVSwitch port of {a} (NV{k}, egress)",
                copy,
            )
            inn = self._resource(
                f"nvport:{b}:in",
                "nvswitch_port",
                "nvlink",
                bw,
                f"NVSwitch port of {b} (NV{k}, ingress)",
                copy,
            )
            self._port_out[a], self._port_in[b] = out, inn
            return ((out, 1.0), (inn, 1.0))
        lnk = self.topo.link(a, b)
        r = self._resource(
            f"nvpair:{a}>{b}",
            "nvlink_pair",
            "nvlink",
            lnk.nvlinks * hw.nvlink_per_link_gbps,
            f"NVLink {lnk.link_class} {a}->{b}",
            lnk.nvlinks * hw.nvlink_copy_per_link_gbps,
        )
        return ((r, 1.0),)

    def _uplink(self, item: str, direction: str) -> int:
        hw = self.hardware
        if item in self._device_ids:
            return self._resource(
                f"pcie:{item}:{direction}",
                "pcie_link",
                "pcie",
                hw.nccl_pcie_gbps,
                f"PCIe Gen{hw.pcie_gen} x{hw.pcie_width} link of {item} "
                f"({'toward the CPU' if direction == 'up' else 'from the CPU'})",
                hw.pcie_gbps,
            )
        node = self._nodes_by_id[item]
        kind = "host_bridge" if node.kind == "host_bridge" else "pcie_uplink"
        return self._resource(
            f"uplink:{item}:{direction}",
            kind,
            "pcie",
            hw.nccl_pcie_gbps,
            f"uplink of {node.label} ({'up' if direction == 'up' else 'down'})",
            hw.pcie_gbps,
        )

    def _pcie_path(self, a: str, b: str, how: str) -> Path:
        """PCIe route a -> b. P2P goes up to the lowest common node, across sockets if needed,
        and down. NCCL's SHM goes up to host memory and down, the reading leg weighing
        SHM_READ_WEIGHT. A staged copy goes up and down in sequence (each leg weighs twice,
        at the staging rate) and through host memory, not the socket's P2P path."""
        hw = self.hardware
        up_a = (a, *self.chain(a))
        up_b = (b, *self.chain(b))
        up_weight, down_weight = 1.0, 1.0
        common = None
        if how == "p2p":
            set_b = set(up_b[1:])
            common = next((x for x in up_a[1:] if x in set_b), None)
        elif how == "shm":
            down_weight = SHM_READ_WEIGHT
        else:  # staged copy
            up_weight = down_weight = 2 * hw.pcie_gbps / hw.staged_gbps
        if how == "p2p" and "Intel" in hw.socket_link:
            kind = self._nodes_by_id[common].kind if common is not None else "numa"
            if kind in ("host_bridge", "numa"):
                # P2P through an Intel root complex runs at 5/6 of the link (NCCL charges
                # PHB paths 6/5; p2p_01: 0.73 GB/s across the host bridge vs 0.82 in a switch).
                up_weight = down_weight = 1.2
        path: list[tuple[int, float]] = []
        for item in up_a[:-1]:
            if item == common:
                break
            path.append((self._uplink(item, "up"), up_weight))
        down: list[tuple[int, float]] = []
        for item in up_b[:-1]:
            if item == common:
                break
            down.append((self._uplink(item, "down"), down_weight))
        sock_a, sock_b = self._socket_key[a], self._socket_key[b]
        if sock_a != sock_b and how != "staged":
            cap = hw.socket_gbps
            # NCCL's socket figure already prices P2P/SHM traffic over QPI/UPI/xGMI.
            w = 1.0 if how == "shm" else up_weight
            for key, side in ((sock_a, "out"), (sock_b, "in")):
                label = self._nodes_by_id[key].label if key in self._nodes_by_id else key
                label = label.replace("numa", "NUMA node ")
                path.append(
                    (
                        self._resource(
                            f"socket:{key}:{side}",
                            "socket",
                            "socket",
                            cap,
                            f"socket link {side} of {label} ({hw.socket_link})",
                        ),
                        w,
                    )
                )
        return tuple(path + down[::-1])

    def hop_class(self, flow: Flow) -> str:
        """nvlink or pcie: which of NCCL's per-hop latency rows a hop pays."""
        return "nvlink" if self.transport(flow) == "nvlink" else "pcie"

    def describe_hop(self, flow: Flow, copy: bool = False) -> str:
        a, b = self.gpu_ids[flow[0]], self.gpu_ids[flow[1]]
        how = self.copy_transport(flow) if copy else self.transport(flow)
        cls = self.topo.link_class(a, b)
        words = {
            "nvlink": f"NVLink {cls}",
            "p2p": f"PCIe P2P ({cls})",
            "shm": f"host shared memory ({cls}, no P2P)",
            "staged": f"staged through host memory ({cls}, no P2P)",
        }[how]
        return f"{a}->{b} {words}"

    # --- rates -----------------------------------------------------------------------------

    def check_gpus(self, gpus: Iterable[int]) -> tuple[int, ...]:
        out = tuple(gpus)
        total = len(self.gpu_ids) * self.nodes
        if self.nodes > 1:
            bad = [g for g in out if not 0 <= g < total]
            if bad:
                raise ValueError(
                    f"unknown GPU index {bad[0]}: this {self.nodes}-node job has GPUs "
                    f"0..{total - 1}"
                )
        else:
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
        paths = self._paths
        for flow, w in flows:
            path = paths.get(flow)
            if path is None:
                path = self.path(flow)
            for r, rw in path:
                out[r] = out.get(r, 0.0) + w * rw
        return out

    def all_pairs_rate(self, gpus: tuple[int, ...]) -> Rate:
        """Solo rate of every ordered pair of `gpus` sending at once (an alltoall), kept per
        GPU set: O(p^2) routes, priced once rather than at every message size."""
        got = self._all_pairs.get(gpus)
        if got is None:
            flows = (((a, b), 1.0) for a in gpus for b in gpus if a != b)
            got = self._all_pairs[gpus] = self.solo_rate(self.load(flows))
        return got

    def copy_load(self, flows: Iterable[tuple[Flow, float]]) -> dict[int, float]:
        out: dict[int, float] = {}
        for flow, w in flows:
            for r, rw in self.copy_path(flow):
                out[r] = out.get(r, 0.0) + w * rw
        return out

    def _cap(self, r: int, copy: bool) -> float:
        res = self.resources[r]
        return res.copy_gbps if copy else res.capacity_gbps

    def solo_rate(self, load: dict[int, float], copy: bool = False) -> Rate:
        """The rate `load` reaches alone: its tightest resource (the first in `load`'s order
        among equals)."""
        return _tightest(self._copy_caps if copy else self._caps, load)

    def share(self, loads: Sequence[dict[int, float]], copy: bool = False) -> list[Rate]:
        """Max-min fair rates for groups running at once (progressive filling): every group
        grows at the same pace until a resource it crosses is full."""
        rates = [0.0] * len(loads)
        limits = [-1] * len(loads)
        remaining = {r: self._cap(r, copy) for ld in loads for r in ld}
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
        out = 0.0
        for f in flows:
            a = self._alpha.get(f)
            if a is None:
                a = self._alpha_of(self.hop_class(f))
                if any(self.resources[r].kind == "socket" for r, _ in self.path(f)):
                    a += self._alpha_of("socket")
                self._alpha[f] = a
            out = max(out, a)
        return out

    def ring_rate_bound(self, gpus: Sequence[int]) -> float:
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
        caps = self._caps
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

    # --- ring search -----------------------------------------------------------------------

    def ring_channels(self, gpus: Sequence[int]) -> tuple[tuple[tuple[int, ...], float], ...]:
        """The rings NCCL would build over a subset, with the share of data each carries.

        Up to EXACT_RING GPUs the first ring is the best single ring (branch and bound, exact
        within RING_SEARCH_NODES expansions, seeded by a greedy + 2-opt ring). Where dedicated
        NVLink bundles limit it, more rings are packed into the capacity left over (the
        reverse ring, then other cycles), as NCCL builds several channels over a DGX-1 mesh:
        a fully connected NV1/NV2 quad gets 4 links' worth, not one ring's 2."""
        key = tuple(sorted(gpus))
        if key in self._ring_cache:
            return self._ring_cache[key]
        if len(key) < 2:
            raise ValueError("a collective needs at least two GPUs")
        if len(key) > EXACT_RING:
            big = self._bounded_channels(key)
            self._ring_cache[key] = big
            return big
        for f in ((a, b) for a in key for b in key if a != b):
            self.path(f)  # every resource exists before the search reads capacities
        caps = list(self._caps)
        best = self._best_ring(key, caps, seed=True)
        assert best is not None
        rate = self._ring_rate(best)
        channels: list[tuple[tuple[int, ...], float]] = [(best, rate.gbps)]
        if self.resources[rate.bottleneck].kind == "nvlink_pair" and len(key) > 2:
            roomy = self._best_ring(key, caps, allowed=self._is_nvlink, slack=True)
            if roomy is not None and self._ring_rate(roomy).gbps >= rate.gbps * (1 - 1e-9):
                best = roomy
                channels = [(best, rate.gbps)]
            residual = self._residual(caps, best, rate.gbps)
            while len(channels) < MAX_RINGS:
                nxt = self._best_ring(key, residual, allowed=self._is_nvlink, slack=True)
                if nxt is None:
                    break
                got = self._ring_rate(nxt, residual)
                if got.gbps < 0.05 * rate.gbps:
                    break
                channels.append((nxt, got.gbps))
                residual = self._residual(residual, nxt, got.gbps)
        total = sum(x for _, x in channels)
        result = tuple((o, x / total) for o, x in channels)
        self._ring_cache[key] = result
        return result

    def _bounded_channels(self, key: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], float], ...]:
        """Rings of a subset past EXACT_RING GPUs, in O(n^2) pair look-ups at most (an exact
        search is out of reach there, and its 2-opt seed alone costs O(n^3) per pass).

        The first ring is the better of the hierarchy's order (NVLink domain, NUMA node, PCIe
        tree: what NCCL's own search settles on for such fabrics) and, up to BIG_RING GPUs
        where that order leaves NVLink, the nearest-neighbour ring by pair rate; so it is
        never slower than the hierarchy's ring. Where an NVLink pair limits it, the reverse
        ring is packed beside it, as the exact search packs it over the links' other
        direction."""
        rings = [self._hierarchy_ring(key)]
        if len(key) <= BIG_RING and not all(map(self._is_nvlink, _ring_flows(rings[0]))):
            rings.append(self._nearest_ring(key))
        best = rings[0]
        rate = self._ring_rate(best)
        for ring in rings[1:]:
            got = self._ring_rate(ring)
            if got.gbps > rate.gbps * (1 + 1e-9):
                best, rate = ring, got
        channels: list[tuple[tuple[int, ...], float]] = [(best, rate.gbps)]
        if self.resources[rate.bottleneck].kind == "nvlink_pair":
            back = best[::-1]
            self.load((f, 1.0) for f in _ring_flows(back))  # its resources exist first
            residual = self._residual([r.capacity_gbps for r in self.resources], best, rate.gbps)
            got = self._ring_rate(back, residual)
            if got.gbps >= 0.05 * rate.gbps:
                channels.append((back, got.gbps))
        total = sum(x for _, x in channels)
        return tuple((o, x / total) for o, x in channels)

    def _pair_load(self, a: int, b: int) -> list[tuple[int, float]]:
        """The resources one GPU pair's flow crosses, each with its summed weight (cached)."""
        f = (a, b)
        got = self._pair_loads.get(f)
        if got is None:
            got = self._pair_loads[f] = list(self.load([(f, 1.0)]).items())
        return got

    def _pair_rate(self, a: int, b: int) -> float:
        """Solo rate of one GPU pair (computed once per model)."""
        f = (a, b)
        got = self._pair_rates.get(f)
        if got is None:
            got = self._pair_rates[f] = self.solo_rate(self.load([(f, 1.0)])).gbps
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

    def _hierarchy_ring(self, key: tuple[int, ...]) -> tuple[int, ...]:
        def place(g: int) -> tuple[Any, ...]:
            gid = self.gpu_ids[g]
            domain = self._domain.get(gid)
            first = min(domain.gpus) if domain else gid
            return (self._socket_key[gid], first, self.chain(gid)[::-1], g)

        return tuple(sorted(key, key=place))

    def _residual(self, caps: list[float], ring: tuple[int, ...], rate: float) -> list[float]:
        out = list(caps)
        out.extend(r.capacity_gbps for r in self.resources[len(out) :])
        for r, w in self.load((f, 1.0) for f in _ring_flows(ring)).items():
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
            ok = allowed is None or all(map(allowed, _ring_flows(key)))
            return key if ok and self._ring_rate(key, caps).gbps > 0 else None
        best: tuple[int, ...] | None = None
        best_rate, best_slack = 0.0, -1.0
        if seed:
            best = self._greedy_ring(key)
            best_rate = self._ring_rate(best).gbps
        load: dict[int, float] = {}
        path = [key[0]]
        left = set(key[1:])
        budget = [RING_SEARCH_NODES]
        tie = 1 - 1e-9 if slack else 1 + 1e-9

        paths = self._paths  # every flow inside `key` is routed (see ring_channels)

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
                room = (
                    sum(caps[x] for f in _ring_flows(path) for x, _ in paths[f]) if slack else 0.0
                )
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
        return self.transport(flow) == "nvlink"

    def _channel_load(self, channels: Iterable[tuple[tuple[int, ...], float]]) -> dict[int, float]:
        return self.load((f, w) for o, w in channels for f in _ring_flows(o))

    def _ring_rate(self, order: tuple[int, ...], caps: list[float] | None = None) -> Rate:
        """The ring's rate under `caps` (default: the full capacities); a resource past the
        end of `caps` (created after it was taken) counts as full."""
        load: dict[int, float] = {}
        paths = self._paths
        n = len(order)
        for i in range(n):
            flow = (order[i], order[(i + 1) % n])
            path = paths.get(flow)
            if path is None:
                path = self.path(flow)
            for r, rw in path:
                load[r] = load.get(r, 0.0) + 1.0 * rw
        if caps is None:
            return _tightest(self._caps, load)
        if len(caps) < len(self._caps):
            caps = caps + [0.0] * (len(self._caps) - len(caps))
        return _tightest(caps, load)

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
        best_rate = self._ring_rate(best).gbps
        if len(key) > 64:
            return best  # 2-opt is O(n^3) per pass: big rings keep the greedy order
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

    def private(self, r: int) -> bool:
        """Only flows from or to one GPU cross this resource (its NVLink bundle to a peer, its
        NVSwitch port, its own PCIe link): groups of disjoint GPUs never share it."""
        return self.resources[r].kind in ("nvlink_pair", "nvswitch_port", "pcie_link")

    def describe(self, r: int) -> str:
        return self.resources[r].description

    def is_calibrated(self, cls: str) -> bool:
        return cls in self.calibration.scale

    # --- several nodes ---------------------------------------------------------------------

    def split_nodes(self, gpus: Sequence[int]) -> list[tuple[int, ...]]:
        """Job GPU indices (node-major) -> each node's local GPU indices, in node order."""
        if self.nodes == 1:
            return [tuple(gpus)]
        g = len(self.local_order)
        parts: dict[int, list[int]] = {}
        for x in gpus:
            parts.setdefault(x // g, []).append(self.local_order[x % g])
        return [tuple(parts[k]) for k in sorted(parts)]

    def net_gbps(self, local_gpus: int) -> float:
        """What one node's NICs carry per direction for a job using `local_gpus` of its GPUs:
        the NICs of those GPUs' rails (a proportional share of the node's NICs)."""
        g = len(self.local_order)
        nics = max(1.0, self.nics_per_node * min(local_gpus, g) / g)
        return nics * self.hardware.nic_gbps * NET_EFFICIENCY


def _largest(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    best = parts[0]
    for part in parts[1:]:
        if len(part) > len(best):
            best = part
    return best


def _tightest(caps: list[float], load: dict[int, float]) -> Rate:
    """min over `load` of caps[r] / load[r], the first of equals in `load`'s order (as
    `min(load, key=...)` picks), with that resource."""
    best, rate = -1, math.inf
    for r, w in load.items():
        x = caps[r] / w
        if best < 0 or x < rate:
            best, rate = r, x
    if best < 0:
        raise ValueError("no resource carries this load")
    return Rate(rate, best)


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
    p2p: P2PMode = "auto",
    p2p_status: dict[Flow, bool] | None = None,
    nodes: int = 1,
    nic_gbits: float | None = None,
    nics_per_node: int | None = None,
    nvlink_nodes: bool = False,
) -> CostModel:
    """A cost model for one server, or for a job over `nodes` servers wired like it.

    `nvlink_nodes`: the servers share one NVLink domain (NVL72-style trays of one NVML fabric
    clique), so GPUs of different nodes talk through the NVSwitch trays, not the NICs.
    `gpu_model` is the NVML name where known; `p2p` auto infers per pair whether NCCL and
    the driver use P2P (`p2p_status`: `nvidia-smi topo -p2p r` or NVML, per ordered pair),
    on/off force it; `nic_gbits` is one NIC's rate (Gb/s) and `nics_per_node` their count
    (default: the NICs of the capture, else one per GPU)."""
    if not topo.gpus:
        raise ValueError("the topology has no GPUs")
    if nvlink_nodes and nodes > 1:
        topo = nvlink_domain(topo, nodes)
        nodes = 1
    hw = resolve_hardware(
        topo,
        gpu_model,
        pcie_gen=pcie_gen,
        pcie_width=pcie_width,
        p2p_enabled=p2p_enabled,
        nic_gbits=nic_gbits,
    )
    return CostModel(
        topo,
        hw,
        recover_hierarchy(topo, gpu_model, nvswitch),
        calibration,
        p2p=p2p,
        p2p_status=p2p_status,
        nodes=nodes,
        nics_per_node=nics_per_node,
    )


def nvlink_domain(topo: Topology, nodes: int) -> Topology:
    """`nodes` copies of one server whose NVSwitch-attached GPUs form one NVLink domain across
    them (GB200 NVL72: 18 trays of 4 GPUs); GPU indices run node-major. Each copy keeps its
    own PCIe tree and NUMA nodes; everything between copies other than NVLink is SYS."""
    if nodes > 64 or nodes * len(topo.devices) > 4096:
        raise ValueError(
            f"an NVLink domain of {nodes} nodes x {len(topo.devices)} devices is too big"
        )
    gpus = sorted(topo.gpus, key=lambda d: d.index)
    bundles = {lnk.nvlinks for lnk in topo.gpu_links() if lnk.is_nvlink}
    if not bundles:
        raise ValueError("nodes cannot share an NVLink domain: this server's GPUs have no NVLink")
    cross = f"NV{max(bundles)}"
    numas = [int(v) for d in topo.devices if (v := (d.numa_affinity or "").strip()).isdigit()]
    stride = max(numas, default=0) + 1
    rename: dict[tuple[int, str], str] = {}
    devices: list[Device] = []
    for k in range(nodes):
        for d in topo.devices:
            if d.kind == "gpu":
                new_id, index = f"GPU{k * len(gpus) + gpus.index(d)}", k * len(gpus) + gpus.index(d)
            else:
                new_id, index = f"n{k}:{d.id}", k * len(topo.nics) + d.index
            numa = (d.numa_affinity or "").strip()
            devices.append(
                replace(
                    d,
                    id=new_id,
                    index=index,
                    numa_affinity=str(int(numa) + k * stride) if numa.isdigit() else numa or None,
                )
            )
            rename[(k, d.id)] = new_id
    links = [
        Link(rename[(k, lnk.a)], rename[(k, lnk.b)], lnk.link_class)
        for k in range(nodes)
        for lnk in topo.links
    ]
    for k in range(nodes):
        for m in range(k + 1, nodes):
            for a in topo.devices:
                for b in topo.devices:
                    both_gpus = a.kind == b.kind == "gpu"
                    links.append(
                        Link(rename[(k, a.id)], rename[(m, b.id)], cross if both_gpus else "SYS")
                    )
    return Topology(tuple(devices), tuple(links), topo.warnings)


def with_options(
    model: CostModel,
    *,
    p2p: P2PMode | None = None,
    p2p_status: dict[Flow, bool] | None = None,
    nodes: int | None = None,
    nic_gbits: float | None = None,
    nics_per_node: int | None = None,
    nvlink_nodes: bool = False,
    pcie_gen: int | None = None,
    pcie_width: int | None = None,
) -> CostModel:
    """The same server (hierarchy, calibration) with other transport or job options: what a
    query asks of a cached model. `pcie_gen` / `pcie_width`: NVML's word on the GPUs' links."""
    hw = model.hardware
    if pcie_gen is not None or pcie_width is not None:
        gen, width = pcie_gen or hw.pcie_gen, pcie_width or hw.pcie_width
        line = pcie_line_rate_gbps(gen, width)
        hw = replace(
            hw,
            pcie_gen=gen,
            pcie_width=width,
            pcie_gbps=line * P2P_PCIE_EFFICIENCY,
            nccl_pcie_gbps=nccl_pcie_gbps(gen, width),
            staged_gbps=line * STAGED_COPY_EFFICIENCY,
            assumption=hw.assumption.replace(
                f"; PCIe Gen{hw.pcie_gen} x{hw.pcie_width} assumed from the generation", ""
            ),
        )
    if nvlink_nodes and (nodes or 1) > 1:
        topo = nvlink_domain(model.topo, nodes or 1)
        return CostModel(
            topo,
            hw,
            recover_hierarchy(topo, None, True),
            model.calibration,
            p2p=p2p or model.p2p,
        )
    if nic_gbits is not None:
        if not nic_gbits > 0:
            raise ValueError(f"the NIC rate must be positive, got {nic_gbits} Gb/s")
        hw = replace(hw, nic_gbps=nic_gbits / 8, nic_source="given")
    return CostModel(
        model.topo,
        hw,
        model.hierarchy,
        model.calibration,
        p2p=p2p or model.p2p,
        p2p_status=p2p_status if p2p_status is not None else model.p2p_status,
        nodes=nodes or model.nodes,
        nics_per_node=nics_per_node or (model.nics_per_node if not model.nic_assumed else None),
    )


def options_from_facts(
    nvml: NvmlFacts | None, host: HostFacts | None, topo_p2p: str | None = None
) -> dict[str, Any]:
    """What a collector's facts tell the cost model: per-pair P2P status (`topo -p2p r`, else
    NVML's read status), the GPUs' PCIe generation and width (the slowest GPU's: its link's
    maximum generation, since an idle link drops its current one, and its current width), the
    NICs' count and rate (RDMA ports that are up)."""
    out: dict[str, Any] = {}
    if nvml is not None:
        gens = [g.pcie.max_generation for g in nvml.gpus if g.pcie.max_generation]
        widths = [g.pcie.current_width for g in nvml.gpus if g.pcie.current_width]
        if gens and min(gens) in PCIE_GTS:
            out["pcie_gen"] = min(gens)
        if widths and min(widths) in (1, 2, 4, 8, 16, 32):
            out["pcie_width"] = min(widths)
    status = p2p_status_from_text(topo_p2p) if topo_p2p else {}
    if not status and nvml is not None and nvml.p2p:
        for entry in nvml.p2p:
            if entry.src is None or entry.dst is None or "read" not in entry.status:
                continue
            status[(entry.src, entry.dst)] = not entry.refused(("read",))
    if status:
        out["p2p_status"] = status
    if host is not None:
        up = [
            n
            for n in host.rdma_nics
            if n.rate_gbps and (n.state is None or "ACTIVE" in n.state.upper())
        ]
        if up:
            out["nics_per_node"] = len(up)
            out["nic_gbits"] = statistics.median(n.rate_gbps or 0.0 for n in up)
    return out


def p2p_status_from_text(text: str) -> dict[Flow, bool]:
    """`nvidia-smi topo -p2p r` (or w/n/a) as {(i, j): OK?}; an empty dict if no matrix."""
    import re

    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    out: dict[Flow, bool] = {}
    header: list[int] | None = None
    for line in clean.splitlines():
        cells = line.split()
        if not cells:
            continue
        if all(re.fullmatch(r"GPU\d+", c) for c in cells):
            header = [int(c[3:]) for c in cells]
            continue
        if header and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) - 1 == len(header):
            i = int(cells[0][3:])
            for j, value in zip(header, cells[1:], strict=True):
                if i != j and value != "X":
                    out[(i, j)] = value == "OK"
    return out


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
    protocol: str = "Simple"


def _nsteps(collective: str, p: int) -> int:
    if collective == "all_reduce":
        return 2 * (p - 1)
    if collective in ("reduce_scatter", "all_gather"):
        return p - 1
    return p


def _ll_max(model: CostModel, nodes: int) -> float:
    if nodes == 1:
        return LL_MAX_BW_ONE_NODE.get(model.hardware.generation.arch, 39.0)
    vendor = "amd" if "AMD" in model.hardware.socket_link else "intel"
    return LL_MAX_BW_NODES[vendor][0 if nodes == 2 else 1]


def _nic_resource(model: CostModel, local: int) -> int:
    hw = model.hardware
    nics = max(
        1.0, model.nics_per_node * min(local, len(model.local_order)) / len(model.local_order)
    )
    return model._resource(
        f"nic:{nics:g}",
        "nic",
        "network",
        model.net_gbps(local),
        f"network: {nics:g} NIC(s) per node at {hw.nic_gbps * 8:g} Gb/s "
        f"x {NET_EFFICIENCY:.0%} (NIC rate {hw.nic_source})",
    )


@dataclass(frozen=True)
class _Shape:
    """What the algorithms need to know about a group: its nodes, intra-node ring and rates."""

    parts: list[tuple[int, ...]]
    order: tuple[int, ...]
    intra: Rate  # intra-node ring rate (inf with one GPU per node)
    chain: Rate  # open chain of the ring (broadcast / reduce)
    nvlink: bool  # every intra-node hop is NVLink
    net: float  # per-node network rate (inf on one node)
    nic: int  # the network resource (-1 on one node)


def _shape(model: CostModel, key: tuple[int, ...], rate: Rate | None) -> _Shape:
    parts = model.split_nodes(key)
    local = _largest(parts)
    local = tuple(sorted(local))
    if len(local) >= 2:
        cached = model._solo_shapes.get(local)
        if cached is None:
            channels = model.ring_channels(local)
            flows = [f for o, _ in channels for f in _ring_flows(o)]
            open_flows = _ring_flows(channels[0][0])[:-1]
            cached = model._solo_shapes[local] = (
                channels[0][0],
                model.solo_rate(model._channel_load(channels)),
                model.solo_rate(model.load((f, 1.0) for f in open_flows)),
                all(model.hop_class(f) == "nvlink" for f in flows),
            )
        order, solo, chain, nvlink = cached
        intra = rate or solo
        if rate is not None:
            # Contention slows the open chain (broadcast, reduce) as much as the ring.
            scaled = chain.gbps * rate.gbps / max(solo.gbps, 1e-9)
            chain = Rate(max(rate.gbps, scaled), rate.bottleneck)
    else:
        order, intra, chain, nvlink = local, Rate(math.inf, -1), Rate(math.inf, -1), True
    if len(parts) > 1:
        nic = _nic_resource(model, len(local))
        net = model.resources[nic].capacity_gbps
        order = tuple(key) if len(local) < 2 else order
    else:
        nic, net = -1, math.inf
    return _Shape(parts, order, intra, chain, nvlink, net, nic)


def _nccl_variants(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    n: int,
    rate: Rate | None = None,
    gpus_per_thread: int = 1,
) -> list[_Variant]:
    """Every (algorithm, protocol) NCCL would consider, timed by its published model: latency
    (base + hops x per-hop latency by link type) + bytes / bandwidth, plus the launch."""
    hw = model.hardware
    gen = hw.generation
    p = len(key)
    s = _shape(model, key, rate)
    nn = len(s.parts)
    ppn = p / nn
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    hop = "nvlink" if s.nvlink else "pcie"
    ll128_ok = s.nvlink and not gen.name.startswith(("Kepler", "Maxwell", "Pascal"))
    ll_max = _ll_max(model, nn)
    amd = "AMD" in hw.socket_link
    out: list[_Variant] = []

    def limit(intra: Rate) -> tuple[float, int]:
        if s.net < intra.gbps:
            return s.net, s.nic
        return intra.gbps, intra.bottleneck

    if collective in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"):
        steps = _nsteps(collective, p)
        rooted = collective in ("broadcast", "reduce")
        bus, neck = limit(s.chain if rooted else s.intra)
        inter_steps = 0 if nn == 1 else (2 * (nn - 1) if collective == "all_reduce" else nn - 1)
        for i, proto in enumerate(PROTOCOLS):
            if proto == "LL128" and not ll128_ok:
                continue
            busbw = {"LL": min(ll_max, 0.5 * bus), "LL128": 0.92 * bus, "Simple": bus}[proto]
            algbw = busbw * p / steps
            intra_lat = HOP_LATENCY_US[hop]["ring"][i]
            if nn > 1:
                intra_lat = max(intra_lat, (2.0 if amd else 1.0) * (3 if proto == "Simple" else 1))
            inter_lat = HOP_LATENCY_US["net"]["tree" if ppn == 1 else "ring"][i]
            lat = BASE_LATENCY_US["ring"][i]
            if rooted:
                if s.nvlink and nn == 1:
                    lat += intra_lat  # NCCL: same channels, one hop of latency
                else:
                    per = HOP_LATENCY_US[hop]["tree"][i] if proto == "Simple" else intra_lat
                    lat += (steps - inter_steps) * per + inter_steps * inter_lat
            else:
                lat += (steps - inter_steps) * intra_lat + inter_steps * inter_lat
            if nn > 1 and proto == "Simple" and collective == "all_reduce" and n >= 64 * 16 * p:
                lat *= 1.9 if gen.arch == "Volta" else 1.4  # NCCL: ring plateau effect
            out.append(
                _Variant(
                    "ring", launch + lat + _us(n, algbw), s.order, bus, launch + lat, neck, proto
                )
            )
    if collective == "all_reduce" and (p > 2 or nn > 1):
        intra_bus = s.intra.gbps if math.isfinite(s.intra.gbps) else s.net
        neck = s.intra.bottleneck if math.isfinite(s.intra.gbps) else s.nic
        log_size = int(math.log2(n >> 6)) if n >= 64 else -1
        for i, proto in enumerate(PROTOCOLS):
            if proto == "LL128" and not ll128_ok:
                continue
            bus = 0.92 * intra_bus
            busbw = {
                "LL": min(bus / 3.8, ll_max),
                "LL128": bus * (7 / 9 if nn == 1 else 120 / 128),
                "Simple": bus,
            }[proto]
            algbw = 0.5 * busbw
            if 0 <= log_size < len(TREE_CORRECTION[proto]):
                algbw *= TREE_CORRECTION[proto][log_size]
            tree_neck = neck
            if nn > 1:
                # Double binary trees: a node sends each byte once between two nodes, about
                # twice (up and down its trees) with more.
                net_alg = s.net * (1.0 if nn == 2 else 0.5)
                if net_alg < algbw:
                    algbw, tree_neck = net_alg, s.nic
            lat = BASE_LATENCY_US["tree"][i] + 2 * (
                (ppn - 1) * HOP_LATENCY_US[hop]["tree"][i]
                + math.log2(nn) * HOP_LATENCY_US["net"]["tree"][i]
            )
            out.append(
                _Variant(
                    "tree", launch + lat + _us(n, algbw), s.order, 2 * algbw, launch + lat,
                    tree_neck, proto,
                )
            )  # fmt: skip
    nvls = _nvls_variant(model, collective, key, n, s, rate, launch)
    if nvls is not None:
        out.append(nvls)
    return out


def _nvls_variant(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    n: int,
    s: _Shape,
    rate: Rate | None,
    launch: float,
) -> _Variant | None:
    """NVLink SHARP on NVSwitch gen3+: the switch reduces and multicasts. NCCL's model: 16
    channels at the ladder speed the port fits, x its NVLS efficiency, x2 for all_reduce.
    Across nodes (all_reduce only) NCCL's NVLS tree: NVLS inside each node, trees between
    them, bounded by the NICs (twice their rate with two nodes) and a per-channel cap."""
    hw = model.hardware
    gen = hw.generation
    nn = len(s.parts)
    if not gen.nvls or collective not in ("all_reduce", "reduce_scatter", "all_gather"):
        return None
    if nn > 1 and collective != "all_reduce":
        return None
    local = tuple(sorted(_largest(s.parts)))
    if len(local) < 2:
        return None
    ids = [model.gpu_ids[g] for g in local]
    domain = model._domain.get(ids[0])
    if domain is None or domain.fabric != "nvswitch" or not all(g in domain.gpus for g in ids):
        return None
    p, ppn = len(key), len(local)
    port = domain.port_links * hw.nvlink_per_link_gbps * model.calibration.scale.get("nvlink", 1.0)
    ladder = SPEED_LADDER.get(gen.arch, SPEED_LADDER["Hopper"])
    speed = next((x for x in ladder if x * NVLS_CHANNELS <= port), ladder[-1])
    ch = NVLS_CHANNELS
    per = speed * gen.nvls_efficiency * (ch - 1) / ch
    per *= 2.0 if collective == "all_reduce" else (ppn - 1) / ppn
    busbw = ch * per
    if rate is not None and math.isfinite(s.intra.gbps):
        solo = model.solo_rate(model._channel_load(model.ring_channels(local)))
        busbw *= min(1.0, rate.gbps / solo.gbps)
    neck = model.path((local[0], local[1]))[0][0]
    lat = launch + NVLS_LATENCY_US["nvlink"]
    name = "nvls"
    if nn > 1:
        name = "nvls_tree"
        net_cap = s.net * (2.0 if nn == 2 else 1.0)
        if net_cap < busbw:
            busbw, neck = net_cap, s.nic
        busbw = min(busbw, ch * NVLS_TREE_PER_CHANNEL.get(gen.arch, (57.7, 45.5))[nn > 2])
        inter = HOP_LATENCY_US["net"]["tree"][2] if ppn == 1 else NVLS_TREE_NET_LATENCY_US
        lat += 2 * math.log2(nn) * inter
    algbw = busbw * p / _nsteps(collective, p)
    return _Variant(name, lat + _us(n, algbw), s.order, busbw, lat, neck, "Simple")


def _calibrated_ring(
    model: CostModel, collective: str, gpus: tuple[int, ...], n: int, rate: Rate | None = None
) -> _Variant:
    """A measured sweep's fitted line (per-step alpha, scaled B) in the ring's form."""
    p = len(gpus)
    channels = model.ring_channels(gpus)
    order = channels[0][0]
    flows = _ring_flows(order)
    if rate is None:
        rate = model.solo_rate(model._channel_load(channels))
    a = model.alpha(flows)
    b = rate.gbps
    steps, factor = _STEPS[collective]
    if collective in ("broadcast", "reduce"):
        chain = model.solo_rate(model.load((f, 1.0) for f in flows[:-1]))
        b = max(b, chain.gbps)
        return _Variant("chain", steps(p) * a + _us(n, b), order, b, a, chain.bottleneck)
    return _Variant("ring", steps(p) * a + _us(factor(p) * n, b), order, b, a, rate.bottleneck)


def _pairwise(
    model: CostModel, key: tuple[int, ...], n: int, rate: Rate | None, gpus_per_thread: int
) -> _Variant:
    """AlltoAll: every rank sends n/p to every other at once; the network carries what leaves
    each node."""
    p = len(key)
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    parts = model.split_nodes(key)
    local = tuple(sorted(_largest(parts)))
    t_intra, bw, neck, cls = 0.0, math.inf, -1, "nvlink"
    if len(local) >= 2:
        r = rate or model.all_pairs_rate(local)
        t_intra, bw, neck = _us(n / p, r.gbps), r.gbps, r.bottleneck
        cls = (
            "nvlink"
            if all(model.hop_class((local[0], b)) == "nvlink" for b in local[1:])
            else "pcie"
        )
    lat = launch + BASE_LATENCY_US["ring"][2] + HOP_LATENCY_US[cls]["ring"][2]
    if len(parts) > 1:
        nic = _nic_resource(model, len(local))
        net = model.resources[nic].capacity_gbps
        t_net = _us(len(local) * n * (p - len(local)) / p, net)
        lat += HOP_LATENCY_US["net"]["ring"][2]
        if t_net > t_intra:
            t_intra, bw, neck = t_net, net, nic
    return _Variant("pairwise", lat + t_intra, key, bw, lat, neck)


def _sendrecv(
    model: CostModel, key: tuple[int, ...], n: int, rate: Rate | None, gpus_per_thread: int
) -> list[_Variant]:
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    parts = model.split_nodes(key)
    if len(parts) > 1:
        nic = _nic_resource(model, 1)
        b, neck, hop = model.resources[nic].capacity_gbps, nic, "net"
    else:
        r = rate or model.solo_rate(model.load([((key[0], key[1]), 1.0)]))
        b, neck, hop = r.gbps, r.bottleneck, model.hop_class((key[0], key[1]))
    out = []
    for i, proto in ((0, "LL"), (2, "Simple")):
        bw = min(_ll_max(model, len(parts)), 0.5 * b) if proto == "LL" else b
        lat = launch + BASE_LATENCY_US["ring"][i] + HOP_LATENCY_US[hop]["ring"][i]
        out.append(_Variant("p2p", lat + _us(n, bw), key, b, lat, neck, proto))
    return out


def _sendrecv_ring(
    model: CostModel, key: tuple[int, ...], n: int, rate: Rate | None, gpus_per_thread: int
) -> list[_Variant]:
    """nccl-tests sendrecv over p GPUs: every rank sends to the next at once (a ring of
    pairs), each moving the whole message."""
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    s = _shape(model, key, rate)
    bus, neck = (s.net, s.nic) if s.net < s.intra.gbps else (s.intra.gbps, s.intra.bottleneck)
    hop = "net" if len(s.parts) > 1 else ("nvlink" if s.nvlink else "pcie")
    out = []
    for i, proto in ((0, "LL"), (2, "Simple")):
        bw = min(_ll_max(model, len(s.parts)), 0.5 * bus) if proto == "LL" else bus
        lat = launch + BASE_LATENCY_US["ring"][i] + HOP_LATENCY_US[hop]["ring"][i]
        out.append(_Variant("ring", lat + _us(n, bw), s.order, bus, lat, neck, proto))
    return out


def _copy(model: CostModel, key: tuple[int, ...], n: int, bidirectional: bool) -> _Variant:
    """cudaMemcpyPeer: one way, or both ways at once (rates summed as p2pBandwidthLatencyTest
    reports them); copy-engine rates, no NCCL efficiency."""
    if model.nodes > 1 and len(model.split_nodes(key)) > 1:
        raise ValueError("a peer copy needs both GPUs in one server")
    if len(key) != 2:
        raise ValueError(f"a copy is between two GPUs, got {len(key)}")
    fwd = (key[0], key[1])
    staged = model.copy_transport(fwd) == "staged"
    lat = STAGED_COPY_LATENCY_US if staged else P2P_COPY_LATENCY_US
    if bidirectional:
        rates = model.share(
            [model.copy_load([(fwd, 1.0)]), model.copy_load([(fwd[::-1], 1.0)])], copy=True
        )
        slow = min(rates, key=lambda r: r.gbps)
        total = sum(r.gbps for r in rates)
        t = lat + _us(n, slow.gbps)
        return _Variant("copy", t, key, total, lat, slow.bottleneck, "copy-both")
    r = model.solo_rate(model.copy_load([(fwd, 1.0)]), copy=True)
    return _Variant("copy", lat + _us(n, r.gbps), key, r.gbps, lat, r.bottleneck, "copy")


def collective_cost(
    model: CostModel,
    collective: str,
    gpus: Sequence[int],
    nbytes: int,
    algorithm: str | None = None,
    *,
    protocol: str | None = None,
    bidirectional: bool = False,
    gpus_per_thread: int = 1,
) -> CollectiveCost:
    """Predicted time of one collective (or `copy`) on `gpus` moving `nbytes` as nccl-tests
    counts them: what NCCL would pick among its algorithms and protocols unless one is named.
    `gpus_per_thread` is how many GPUs one host thread drives (nccl-tests -g N): each adds a
    kernel launch before the collective can finish."""
    if collective not in OPERATIONS:
        raise ValueError(
            f"unknown collective {collective!r}; expected one of {', '.join(OPERATIONS)}"
        )
    if nbytes < 0:
        raise ValueError("the message size cannot be negative")
    if gpus_per_thread < 1:
        raise ValueError("gpus_per_thread must be at least 1")
    key = model.check_gpus(gpus)
    p = len(key)
    if p < 2:
        raise ValueError("a collective needs at least two GPUs")
    if collective == "copy":
        v = _copy(model, key, nbytes, bidirectional)
        return _result(model, "copy", key, nbytes, v, [v], copy=True)
    variants: list[_Variant] = []
    if collective == "alltoall":
        variants.append(_pairwise(model, key, nbytes, None, gpus_per_thread))
    elif collective == "sendrecv" and p == 2:
        variants.extend(_sendrecv(model, key, nbytes, None, gpus_per_thread))
    elif collective == "sendrecv":
        variants.extend(_sendrecv_ring(model, key, nbytes, None, gpus_per_thread))
    else:
        measured = model.nodes == 1 and _calibrated_class(model, key)
        if measured:
            # A measured sweep already folds NCCL's own choices into its fitted line.
            variants.append(_calibrated_ring(model, collective, tuple(sorted(key)), nbytes))
        else:
            variants.extend(_nccl_variants(model, collective, key, nbytes, None, gpus_per_thread))
    if algorithm is not None or protocol is not None:
        chosen = [
            v
            for v in variants
            if (algorithm is None or v.algorithm == algorithm)
            and (protocol is None or v.protocol == protocol)
        ]
        if not chosen:
            raise ValueError(
                f"algorithm {algorithm or 'any'!r} / protocol {protocol or 'any'!r} does not "
                f"apply to {collective} on {p} GPUs; try "
                + ", ".join(sorted({f"{v.algorithm}/{v.protocol}" for v in variants}))
            )
        best = min(chosen, key=lambda v: v.time_us)
    else:
        best = min(variants, key=lambda v: v.time_us)
    return _result(model, collective, key, nbytes, best, variants)


def _calibrated_class(model: CostModel, key: tuple[int, ...]) -> bool:
    if not model.calibration.scale:
        return False
    channels = model.ring_channels(tuple(sorted(key)))
    rate = model.solo_rate(model._channel_load(channels))
    return model.is_calibrated(model.resources[rate.bottleneck].cls)


def _assumptions(model: CostModel, copy: bool, best: _Variant, p: int) -> tuple[str, ...]:
    hw = model.hardware
    out = [hw.assumption]
    if model.p2p == "auto" and not model.p2p_status:
        out.append(
            "P2P inferred from the GPU model and link classes (no topo -p2p / NVML status given)"
        )
    if copy:
        out.append(
            "copy rates: NVLink line x 0.97, PCIe line x 0.85 (P2P) or x 0.73 per leg (staged)"
        )
    else:
        out.append(f"NCCL {hw.generation.arch} tuning constants (NCCL 2.30 tuning.cc)")
        out.append(
            f"{LAUNCH_US_PER_GPU:g} us per extra GPU one host thread launches (nccl-tests -g N)"
        )
    if model.nodes > 1:
        out.append(f"{model.nodes} nodes wired like this one; NIC rate {hw.nic_source}")
        if model.nic_assumed:
            out.append("no NICs in the capture: one NIC per GPU (rail-optimised) assumed")
    out.extend(hw.warnings)
    return tuple(out)


def _result(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    nbytes: int,
    best: _Variant,
    variants: Sequence[_Variant],
    copy: bool = False,
) -> CollectiveCost:
    p = len(key)
    algbw = nbytes / (best.time_us * 1e3) if best.time_us > 0 else 0.0
    res = model.resources[best.bottleneck] if best.bottleneck >= 0 else None
    cap = (res.copy_gbps if copy else res.capacity_gbps) if res else math.inf
    order = best.order
    ring = best.algorithm in ("ring", "nvls") and collective not in ("broadcast", "reduce")
    hops: list[Flow] = []
    if copy or collective == "sendrecv":
        hops = [(key[0], key[1])]
    elif len(order) >= 2:
        local = [g for g in order if g in model.gpu_ids] if model.nodes > 1 else list(order)
        hops = (
            _ring_flows(local)
            if ring and len(local) > 2
            else list(zip(local, local[1:], strict=False))
        )
    transports = tuple(
        model.describe_hop(f, copy) for f in hops if f[0] in model.gpu_ids and f[1] in model.gpu_ids
    )
    if model.nodes > 1 and len(model.split_nodes(key)) > 1:
        transports += ("between nodes: RDMA NIC",)
    words = res.description if res else "no shared link"
    text = f"{words}, {cap:.1f} GB/s per direction"
    if res and abs(cap - best.bandwidth) >= 0.05:
        text += f"; the {best.algorithm} gets {best.bandwidth:.1f} GB/s"
    if best.algorithm not in ("ring", "p2p", "copy"):
        text += f" ({best.algorithm})"
    alternatives = {
        (
            v.algorithm
            if len({x.protocol for x in variants}) <= 1
            else f"{v.algorithm}/{v.protocol}"
        ): v.time_us
        for v in variants
    }
    for v in variants:  # plain algorithm names keep their best protocol's time
        alternatives[v.algorithm] = min(alternatives.get(v.algorithm, math.inf), v.time_us)
    if copy and best.protocol == "copy-both":
        algbw *= 2  # both directions summed, as p2pBandwidthLatencyTest prints them
    return CollectiveCost(
        collective=collective,
        gpus=key,
        bytes=nbytes,
        time_us=best.time_us,
        algbw_gbps=algbw,
        busbw_gbps=algbw * BUSBW_FACTOR[collective](p),
        algorithm=best.algorithm,
        order=order,
        bandwidth_gbps=best.bandwidth,
        alpha_us=best.alpha,
        bottleneck=text,
        bottleneck_class=res.cls if res else "nvlink",
        calibrated=model.is_calibrated(res.cls) if res else False,
        alternatives=alternatives,
        protocol=best.protocol,
        transports=transports,
        assumed=_assumptions(model, copy, best, p),
        nodes=len(model.split_nodes(key)),
    )


def concurrent_costs(
    model: CostModel, collective: str, groups: Sequence[Sequence[int]], nbytes: int
) -> list[CollectiveCost]:
    """The same collective run at once by several disjoint groups (TP groups of a job): rates
    from the max-min fair share of every resource they cross, then NCCL's choice per group."""
    return [
        _result(model, collective, k, nbytes, best, variants)
        for k, best, variants in _concurrent(model, collective, groups, nbytes)
    ]


def _concurrent(
    model: CostModel, collective: str, groups: Sequence[Sequence[int]], nbytes: int
) -> list[tuple[tuple[int, ...], _Variant, list[_Variant]]]:
    """Per group of `concurrent_costs`: its GPUs, NCCL's choice and the variants."""
    keys = [model.check_gpus(g) for g in groups]
    seen: set[int] = set()
    for k in keys:
        if seen & set(k):
            raise ValueError("concurrent groups must not share a GPU")
        seen |= set(k)
    rates = model.share([model.group_load(collective, k) for k in keys])
    out = []
    for k, rate in zip(keys, rates, strict=True):
        variants = _group_variants(model, collective, k, nbytes, rate)
        out.append((k, min(variants, key=lambda v: v.time_us), variants))
    return out


def slowest_cost(
    model: CostModel,
    collective: str,
    groups: Sequence[Sequence[int]],
    nbytes: int,
    chains: bool = False,
) -> CollectiveCost:
    """The slowest (the first of equals) of `concurrent_costs`, or of `chain_costs` with
    `chains`, with only its result built (what a ledger entry reports)."""
    timed = (
        _chains(model, groups, nbytes) if chains else _concurrent(model, collective, groups, nbytes)
    )
    k, best, variants = max(timed, key=lambda x: x[1].time_us)
    return _result(model, "sendrecv" if chains else collective, k, nbytes, best, variants)


def _group_variants(
    model: CostModel, collective: str, key: tuple[int, ...], nbytes: int, rate: Rate
) -> list[_Variant]:
    p = len(key)
    if collective == "alltoall":
        return [_pairwise(model, key, nbytes, rate, 1)]
    if collective == "sendrecv" and p == 2:
        return _sendrecv(model, key, nbytes, rate, 1)
    if collective == "sendrecv":
        return _sendrecv_ring(model, key, nbytes, rate, 1)
    if _calibrated_class(model, key):
        return [_calibrated_ring(model, collective, tuple(sorted(key)), nbytes, rate)]
    return _nccl_variants(model, collective, key, nbytes, rate)


# Relative margin on a bound's rate: it is computed in another order than the priced rate,
# so the two could differ in the last bits where the bound is tight (an NVLink mesh).
BOUND_MARGIN = 1e-9


def solo_time_bound(model: CostModel, collective: str, gpus: Sequence[int], nbytes: int) -> float:
    """A lower bound of `slowest_group_us(model, collective, [gpus], nbytes)` (the group
    alone, hence of its time beside others too) that needs no ring search: NCCL's formulas
    of `_nccl_variants` with the ring rate replaced by `ring_rate_bound` (no lower), every
    latency row the ring could pay (no higher), and the NVLS time, which does not depend on
    the ring. 0.0 where this derives nothing (other collectives, calibrated classes, jobs
    over several nodes)."""
    key = tuple(sorted(gpus))
    p = len(key)
    if (
        p < 2
        or model.nodes > 1
        or model.calibration.scale
        or collective not in ("all_reduce", "reduce_scatter", "all_gather")
    ):
        return 0.0
    bus_max = model.ring_rate_bound(key) * (1 + BOUND_MARGIN)
    nvlink = [model.hop_class((a, b)) == "nvlink" for a in key for b in key if a != b]
    hops = ("nvlink",) if all(nvlink) else (("pcie",) if not any(nvlink) else ("nvlink", "pcie"))
    best = ring_time_bound(model, collective, p, nbytes, bus_max, hops)
    alone = _Shape([key], key, Rate(math.inf, -1), Rate(math.inf, -1), True, math.inf, -1)
    nvls = _nvls_variant(model, collective, key, nbytes, alone, None, 0.0)
    if nvls is not None:
        best = min(best, nvls.time_us)
    return best


def ring_time_bound(
    model: CostModel, collective: str, p: int, nbytes: int, bus_max: float, hops: Sequence[str]
) -> float:
    """A lower bound of the ring and tree times of `collective` (all_reduce, reduce_scatter,
    all_gather) over p GPUs of one node whose ring gets at most `bus_max` GB/s and whose hops
    are of the `hops` latency classes: NCCL's formulas of `_nccl_variants` at that rate, with
    every latency row the ring could pay (the least wins)."""
    name = model.hardware.generation.name
    variants = _ring_bound_variants(name, _ll_max(model, 1), collective, p, nbytes, tuple(hops))
    return min(lat + _us(nbytes, min(cap, a * bus_max)) for lat, a, cap in variants)


@functools.lru_cache(maxsize=1024)
def _ring_bound_variants(
    generation: str, ll_max: float, collective: str, p: int, nbytes: int, hops: tuple[str, ...]
) -> tuple[tuple[float, float, float], ...]:
    """`ring_time_bound`'s variants as (latency, a, cap): at a rate x a variant's algorithm
    bandwidth is min(cap, a x); the same for every group of p GPUs (kept per process)."""
    ll128_ok = "nvlink" in hops and not generation.startswith(("Kepler", "Maxwell", "Pascal"))
    steps = _nsteps(collective, p)
    variants: list[tuple[float, float, float]] = []
    for i, proto in enumerate(PROTOCOLS):
        if proto == "LL128" and not ll128_ok:
            continue
        lat = min(BASE_LATENCY_US["ring"][i] + steps * HOP_LATENCY_US[h]["ring"][i] for h in hops)
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
                BASE_LATENCY_US["tree"][i] + 2 * (p - 1) * HOP_LATENCY_US[h]["tree"][i]
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
            t = _chain_time(model, tuple(g), nbytes, rate)
        else:
            key = tuple(g) if collective == "sendrecv" else tuple(sorted(g))
            t = min(v.time_us for v in _group_variants(model, collective, key, nbytes, rate))
        if p >= 2:
            worst = max(worst, t)
    return worst


def _chain_time(model: CostModel, c: tuple[int, ...], nbytes: int, rate: Rate) -> float:
    flows = [(c[i], c[i + 1]) for i in range(len(c) - 1)]
    hop = "nvlink" if all(model.hop_class(f) == "nvlink" for f in flows) else "pcie"
    return chain_time(nbytes, rate.gbps, hop)


def chain_time(nbytes: int, gbps: float, hop: str) -> float:
    """A pipeline chain's time at `gbps` with hops of one latency class (nvlink or pcie)."""
    return BASE_LATENCY_US["ring"][2] + HOP_LATENCY_US[hop]["ring"][2] + _us(nbytes, gbps)


def chain_costs(
    model: CostModel, chains: Sequence[Sequence[int]], nbytes: int
) -> list[CollectiveCost]:
    """Pipeline sends: each chain passes `nbytes` from stage to stage, every boundary at
    once; all chains run together and share what they cross."""
    return [
        _result(model, "sendrecv", c, nbytes, v, variants)
        for c, v, variants in _chains(model, chains, nbytes)
    ]


def _chains(
    model: CostModel, chains: Sequence[Sequence[int]], nbytes: int
) -> list[tuple[tuple[int, ...], _Variant, list[_Variant]]]:
    """Per chain of `chain_costs`: its GPUs and its time as a variant."""
    keys = [model.check_gpus(c) for c in chains]
    loads = [model.load(((c[i], c[i + 1]), 1.0) for i in range(len(c) - 1)) for c in keys]
    rates = model.share(loads)
    out = []
    for c, rate in zip(keys, rates, strict=True):
        t = _chain_time(model, c, nbytes, rate)
        lat = t - _us(nbytes, rate.gbps)
        v = _Variant("chain", t, c, rate.gbps, lat, rate.bottleneck)
        out.append((c, v, [v]))
    return out


def curve(
    model: CostModel, collective: str, gpus: Sequence[int], sizes: Sequence[int] = STANDARD_SIZES
) -> list[CollectiveCost]:
    """Predictions over message sizes (default 8 B .. 8 GiB), as a nccl-tests sweep prints."""
    return [collective_cost(model, collective, gpus, n) for n in sizes]


def p2p_matrix(model: CostModel) -> dict[str, list[list[float | None]]]:
    """Predicted unidirectional and bidirectional peer-copy bandwidth (GB/s) for every GPU
    pair, as p2pBandwidthLatencyTest's P2P=Enabled matrices lay them out (diagonal None):
    copy-engine rates over NVLink / PCIe P2P, or staged through the host without P2P."""
    return _p2p_matrices(model, bidirectional=True)


def p2p_unidirectional(model: CostModel) -> list[list[float | None]]:
    """`p2p_matrix`'s unidirectional matrix alone (the same numbers), for callers that do not
    show the bidirectional one: it skips pricing both ways at once."""
    return _p2p_matrices(model, bidirectional=False)["unidirectional_gbps"]


def _p2p_matrices(model: CostModel, bidirectional: bool) -> dict[str, list[list[float | None]]]:
    idx = sorted(model.gpu_ids)
    caps = model._copy_caps
    uni: list[list[float | None]] = []
    bi: list[list[float | None]] = []
    # A pair's figures depend only on its routes' shape (see _route_shape): each shape is
    # priced once, by its first pair (a 576-GPU NVSwitch domain has one shape, not 165,600).
    solo: dict[tuple[tuple[float, float], ...], float] = {}
    both: dict[tuple[Any, ...], float] = {}
    for i, a in enumerate(idx):
        uni.append([])
        bi.append([])
        for j, b in enumerate(idx):
            if a == b:
                uni[-1].append(None)
                bi[-1].append(None)
                continue
            there = model.copy_load([((a, b), 1.0)])
            key = tuple((caps[r], w) for r, w in there.items())  # all that _tightest reads
            got = solo.get(key)
            if got is None:
                got = solo[key] = round(model.solo_rate(there, True).gbps, 3)
            uni[-1].append(got)
            if not bidirectional:
                continue
            if j < i:  # both ways at once is the same pair of copies, already priced
                bi[-1].append(bi[j][i])
                continue
            loads = [there, model.copy_load([((b, a), 1.0)])]
            shape = _route_shape(caps, loads)
            got = both.get(shape)
            if got is None:
                got = both[shape] = round(sum(r.gbps for r in model.share(loads, copy=True)), 3)
            bi[-1].append(got)
    if not bidirectional:
        return {"unidirectional_gbps": uni}
    return {"unidirectional_gbps": uni, "bidirectional_gbps": bi}


def _route_shape(caps: list[float], loads: Sequence[dict[int, float]]) -> tuple[Any, ...]:
    """The loads with their resources renamed 0, 1, ... in order of first appearance, and the
    renamed resources' capacities. `solo_rate` and `share` read a load only through its
    resources' capacities, its weights (in its order) and which loads share a resource, so two
    sets of loads of equal shape get bit-identical rates (the same float operations in the same
    order); the bottleneck they name may differ, which the matrices do not show."""
    local: dict[int, int] = {}
    renamed = tuple(
        tuple((local.setdefault(r, len(local)), w) for r, w in load.items()) for load in loads
    )
    return renamed, tuple(caps[r] for r in local)


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
    if run.collective in ("broadcast", "reduce"):
        algorithm = "ring"
    base = collective_cost(model, run.collective, key, 1 << 30, algorithm=algorithm)
    if algorithm == "ring" and base.protocol != "Simple":
        base = collective_cost(model, run.collective, key, 1 << 30, algorithm, protocol="Simple")
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
            rate = model.solo_rate(model.copy_load([((i, j), 1.0)]), copy=True)
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
        model.topo,
        model.hardware,
        model.hierarchy,
        model.calibration.merged(calibration),
        p2p=model.p2p,
        p2p_status=model.p2p_status,
        nodes=model.nodes,
        nics_per_node=model.nics_per_node,
    )
