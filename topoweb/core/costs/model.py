"""The cost model of one server, or of a job over N servers wired alike: its routes
(`routes`), its rings (`rings`), and the rates flows reach on them alone or sharing what they
cross (max-min fair share over the recovered hierarchy). Built once per (topology, hardware,
calibration) by `build_model`; `with_options` and `calibrated` derive variants of it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import ClassVar

from topoweb.core.catalogue import (
    NET_EFFICIENCY,
    Hardware,
    resolve_hardware,
)
from topoweb.core.costs.records import (
    Calibration,
    Flow,
    P2PMode,
    Path,
    Rate,
    ring_flows,
    tightest,
)
from topoweb.core.costs.rings import Channels, Rings, RingShape
from topoweb.core.costs.routes import Routes
from topoweb.core.hierarchy import Hierarchy, NvlinkDomain, recover_hierarchy
from topoweb.core.model import Device, Link, Topology


class CostModel:
    """One server's fabric as capacity-limited resources, and the route of every GPU pair
    for NCCL (NVLink, PCIe P2P or host shared memory) and for a peer copy (NVLink, PCIe P2P
    or a copy staged through host memory). Routes are built on first use, so building a model
    costs O(devices); a job over `nodes` servers wired alike adds their NICs.

    Built once per (topology, hardware, calibration); caches ring searches per GPU subset."""

    # The ring search a model runs (a test swaps in the plain search it replaced).
    ring_search: ClassVar[type[Rings]] = Rings

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
        self.routes = Routes(topo, hardware, hierarchy, self.calibration, self.p2p, self.p2p_status)
        self.gpu_ids: dict[int, str] = self.routes.gpu_ids
        self.resources = self.routes.resources
        self.local_order: tuple[int, ...] = tuple(sorted(self.gpu_ids))
        self.nics_per_node = nics_per_node or len(topo.nics) or len(self.gpu_ids)
        self.nic_assumed = nics_per_node is None and not topo.nics
        self.rings = self.ring_search(self)
        self._all_pairs: dict[tuple[int, ...], Rate] = {}  # see all_pairs_rate

    # --- routes ----------------------------------------------------------------------------

    def chain(self, device: str) -> tuple[str, ...]:
        """Hierarchy nodes from the device's parent up to its NUMA node."""
        return self.routes.chain(device)

    def transport(self, flow: Flow) -> str:
        """How NCCL moves bytes from one GPU to the other: nvlink, p2p (PCIe) or shm."""
        return self.routes.transport(flow)

    def copy_transport(self, flow: Flow) -> str:
        """How cudaMemcpyPeer moves bytes: nvlink, p2p (PCIe), or staged through the host."""
        return self.routes.copy_transport(flow)

    def path(self, flow: Flow) -> Path:
        return self.routes.path(flow)

    def copy_path(self, flow: Flow) -> Path:
        return self.routes.copy_path(flow)

    def hop_class(self, flow: Flow) -> str:
        """nvlink or pcie: which of NCCL's per-hop latency rows a hop pays."""
        return self.routes.hop_class(flow)

    def describe_hop(self, flow: Flow, copy: bool = False) -> str:
        return self.routes.describe_hop(flow, copy)

    def crosses_socket(self, flow: Flow, copy: bool = False) -> bool:
        """The flow's route (NCCL's, or a copy's) crosses the link between two sockets."""
        return self.routes.crosses_socket(flow, copy)

    def sockets(self, gpus: Iterable[int]) -> int:
        """How many sockets (NUMA nodes) the GPUs (this server's indices) hang from: a group
        across them pays the socket link's latency at every step."""
        return self.routes.sockets(gpus)

    def socket_latency_us(self) -> float:
        """What a hop across sockets adds to its latency: measured where a calibration gives
        it, else the catalogue's QPI/UPI/xGMI figure."""
        return self.calibration.alpha_us.get("socket", self.hardware.latency("socket"))

    def nvlink_domain_of(self, gpu: str) -> NvlinkDomain | None:
        """The NVLink domain of a GPU (by id), None outside any."""
        return self.routes.domain_of(gpu)

    def capacities(self, copy: bool = False) -> list[float]:
        """Every resource's capacity by index, NCCL's or a copy engine's: the list the model
        itself reads (read it, never write it; resources created later extend it)."""
        return self.routes.copy_caps if copy else self.routes.caps

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
        return self.routes.load(flows)

    def all_pairs_rate(self, gpus: tuple[int, ...]) -> Rate:
        """Solo rate of every ordered pair of `gpus` sending at once (an alltoall), kept per
        GPU set: O(p^2) routes, priced once rather than at every message size."""
        got = self._all_pairs.get(gpus)
        if got is None:
            flows = (((a, b), 1.0) for a in gpus for b in gpus if a != b)
            got = self._all_pairs[gpus] = self.solo_rate(self.load(flows))
        return got

    def copy_load(self, flows: Iterable[tuple[Flow, float]]) -> dict[int, float]:
        return self.routes.copy_load(flows)

    def solo_rate(self, load: dict[int, float], copy: bool = False) -> Rate:
        """The rate `load` reaches alone: its tightest resource (the first in `load`'s order
        among equals)."""
        return tightest(self.capacities(copy), load)

    def share(self, loads: Sequence[dict[int, float]], copy: bool = False) -> list[Rate]:
        """Max-min fair rates for groups running at once (progressive filling): every group
        grows at the same pace until a resource it crosses is full."""
        rates = [0.0] * len(loads)
        limits = [-1] * len(loads)
        caps = self.capacities(copy)
        remaining = {r: caps[r] for ld in loads for r in ld}
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
        """Per-hop latency (us) of the slowest of `flows`."""
        return self.routes.alpha(flows)

    # --- rings -----------------------------------------------------------------------------

    def ring_channels(self, gpus: Sequence[int]) -> Channels:
        """The rings NCCL would build over a subset, with the share of data each carries."""
        return self.rings.channels(gpus)

    def ring_rate_bound(self, gpus: Sequence[int]) -> float:
        """An upper bound of the solo rate of any rings over `gpus` (see Rings.rate_bound)."""
        return self.rings.rate_bound(gpus)

    def ring_shape(self, local: tuple[int, ...]) -> RingShape:
        """A sorted local GPU set's rings priced alone (see Rings.shape)."""
        return self.rings.shape(local)

    def channel_load(self, channels: Iterable[tuple[tuple[int, ...], float]]) -> dict[int, float]:
        """Resource load of rings carrying their shares of the data."""
        return self.load((f, w) for o, w in channels for f in ring_flows(o))

    def group_load(self, collective: str, gpus: Sequence[int]) -> dict[int, float]:
        """Resource load of one group running `collective` with its best ring(s): the input
        of `share` when several groups contend."""
        key = tuple(sorted(gpus))
        if collective == "alltoall":
            return self.load(((a, b), 1.0) for a in key for b in key if a != b)
        if collective == "sendrecv" and len(key) == 2:
            return self.load([((gpus[0], gpus[1]), 1.0)])
        return self.channel_load(self.ring_channels(key))

    def private(self, r: int) -> bool:
        """Only flows from or to one GPU cross this resource (its NVLink bundle to a peer, its
        NVSwitch port, its own PCIe link): groups of disjoint GPUs never share it."""
        return self.resources[r].kind in (
            "nvlink_pair",
            "nvswitch_port",
            "pcie_link",
            "pcie_duplex",
        )

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

    def nic_resource(self, local: int) -> int:
        """The network resource of one node for a job using `local` of its GPUs."""
        hw = self.hardware
        g = len(self.local_order)
        nics = max(1.0, self.nics_per_node * min(local, g) / g)
        return self.routes.resource(
            f"nic:{nics:g}",
            "nic",
            "network",
            self.net_gbps(local),
            f"network: {nics:g} NIC(s) per node at {hw.nic_gbps * 8:g} Gb/s "
            f"x {NET_EFFICIENCY:.0%} (NIC rate {hw.nic_source})",
        )


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
    cpu_model: str | None = None,
) -> CostModel:
    """A cost model for one server, or for a job over `nodes` servers wired like it.

    `nvlink_nodes`: the servers share one NVLink domain (NVL72-style trays of one NVML fabric
    clique), so GPUs of different nodes talk through the NVSwitch trays, not the NICs.
    `gpu_model` is the NVML name where known; `p2p` auto infers per pair whether NCCL and
    the driver use P2P (`p2p_status`: `nvidia-smi topo -p2p r` or NVML, per ordered pair),
    on/off force it; `nic_gbits` is one NIC's rate (Gb/s) and `nics_per_node` their count
    (default: the NICs of the capture, else one per GPU); `cpu_model` the host's CPU as the
    collector reads it (/proc/cpuinfo), which names the socket link."""
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
        cpu_model=cpu_model,
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
        hw = hw.with_pcie(pcie_gen or hw.pcie_gen, pcie_width or hw.pcie_width)
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
