"""Transports and routes: how each GPU pair of one server moves bytes (NVLink, PCIe P2P, host
shared memory for NCCL; NVLink, PCIe P2P or a copy staged through host memory for
cudaMemcpyPeer), the capacity-limited resources each route crosses (NVSwitch ports, NVLink
bundles, PCIe links and uplinks, host bridges, socket links, NICs), and what a collector's facts
tell about them (P2P status, PCIe generation and width, NICs)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from topoweb.core.catalogue import HOST_COPY_DUPLEX_SHARE, PCIE_GTS, SHM_READ_WEIGHT, Hardware
from topoweb.core.costs.records import Calibration, Flow, P2PMode, Path, Resource
from topoweb.core.formats.nvml import HostFacts, NvmlFacts
from topoweb.core.hierarchy import Hierarchy, NvlinkDomain
from topoweb.core.model import Topology, nvlink_count


class Routes:
    """One server's resources and the route of every GPU pair, built on first use (so building
    costs O(devices)). Resource indices are stable: a resource keeps the index it was created
    with, and every reader (rates, ring search, the P2P matrices) names resources by index.

    `caps` and `copy_caps` are the resources' capacities by index, NCCL's and a copy engine's
    (the hot loops read these lists rather than the Resource records); read them, never write.
    """

    def __init__(
        self,
        topo: Topology,
        hardware: Hardware,
        hierarchy: Hierarchy,
        calibration: Calibration,
        p2p: P2PMode,
        p2p_status: dict[Flow, bool],
    ) -> None:
        self.topo = topo
        self.hardware = hardware
        self.hierarchy = hierarchy
        self.calibration = calibration
        self.p2p: P2PMode = p2p
        self.p2p_status = p2p_status
        self.gpu_ids: dict[int, str] = {g.index: g.id for g in topo.gpus}
        self.resources: list[Resource] = []
        self.caps: list[float] = []
        self.copy_caps: list[float] = []
        self._index: dict[str, int] = {}
        self._paths: dict[Flow, Path] = {}
        self._copy_paths: dict[Flow, Path] = {}
        self._transport: dict[Flow, str] = {}
        self._alpha: dict[Flow, float] = {}
        self._crosses: dict[Flow, bool] = {}  # see crosses_socket
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
        # NVSwitch port resources by GPU id (see _nvlink_path).
        self._port_out: dict[str, int] = {}
        self._port_in: dict[str, int] = {}

    @property
    def paths(self) -> Mapping[Flow, Path]:
        """NCCL routes built so far, by flow: for loops that routed their flows first."""
        return self._paths

    def index_of(self, rid: str) -> int:
        """The index of the resource named `rid` (KeyError if it was never created)."""
        return self._index[rid]

    def domain_of(self, gpu: str) -> NvlinkDomain | None:
        """The NVLink domain of a GPU (by id), None outside any."""
        return self._domain.get(gpu)

    def socket_of(self, device: str) -> str:
        """The socket (NUMA node, else the top of its hierarchy chain) a device hangs from."""
        return self._socket_key[device]

    def chain(self, device: str) -> tuple[str, ...]:
        """Hierarchy nodes from the device's parent up to its NUMA node (cached)."""
        got = self._chains.get(device)
        if got is None:
            out = [self.hierarchy.parent[device]]
            while (up := self._nodes_by_id[out[-1]].parent) is not None:
                out.append(up)
            got = self._chains[device] = tuple(out)
        return got

    def resource(
        self, rid: str, kind: str, cls: str, capacity: float, text: str, copy: float = 0.0
    ) -> int:
        """The index of the resource `rid`, created (scaled by its class's calibration) on
        first use."""
        if rid not in self._index:
            k = self.calibration.scale.get(cls, 1.0)
            self._index[rid] = len(self.resources)
            res = Resource(rid, kind, cls, capacity * k, text, (copy or capacity) * k)
            self.resources.append(res)
            self.caps.append(res.capacity_gbps)
            self.copy_caps.append(res.copy_gbps)
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
        if self.nvlinked(a, b):
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
        if self.nvlinked(a, b):
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

    def nvlinked(self, a: str, b: str) -> bool:
        """The two GPUs (by id) share an NVLink domain and have NVLinks between them."""
        domain = self._domain_gpus.get(a)
        return domain is not None and b in domain and nvlink_count(self.topo.link_class(a, b)) > 0

    def path(self, flow: Flow) -> Path:
        """NCCL's route of a flow (built once)."""
        got = self._paths.get(flow)
        if got is None:
            got = self._paths[flow] = self._route(flow, self.transport(flow))
        return got

    def copy_path(self, flow: Flow) -> Path:
        """A peer copy's route of a flow (built once)."""
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
            out = self.resource(
                f"nvport:{a}:out",
                "nvswitch_port",
                "nvlink",
                bw,
                f"NVSwitch port of {a} (NV{k}, egress)",
                copy,
            )
            inn = self.resource(
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
        r = self.resource(
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
            return self.resource(
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
        return self.resource(
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
        SHM_READ_WEIGHT. A staged copy goes up and down through host memory, not the socket's
        P2P path, each leg weighing what makes one copy reach the staged rate; staged legs queue
        on a PCIe switch's uplink but not on host bridges or inferred switch trees. Where
        staged copies both ways contend for a link (`staged_overlap`), each GPU's link also
        carries a duplex resource: they keep HOST_COPY_DUPLEX_SHARE of their one-way rate."""
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
            up_weight = down_weight = hw.pcie_gbps / hw.staged_gbps
        if how == "p2p" and "Intel" in hw.socket_link:
            kind = self._nodes_by_id[common].kind if common is not None else "numa"
            if kind in ("host_bridge", "numa"):
                # P2P through an Intel root complex runs at 5/6 of the link (NCCL charges
                # PHB paths 6/5; p2p_01: 0.73 GB/s across the host bridge vs 0.82 in a switch).
                up_weight = down_weight = 1.2
        staged = how == "staged"
        path: list[tuple[int, float]] = []
        for item in up_a[:-1]:
            if item == common:
                break
            if staged and self._not_a_link(item):
                continue
            path.append((self._uplink(item, "up"), up_weight))
        down: list[tuple[int, float]] = []
        for item in up_b[:-1]:
            if item == common:
                break
            if staged and self._not_a_link(item):
                continue
            down.append((self._uplink(item, "down"), down_weight))
        if staged and hw.staged_overlap:
            path.append((self._duplex(a), up_weight))
            down.append((self._duplex(b), down_weight))
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
                        self.resource(
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

    def _not_a_link(self, item: str) -> bool:
        """A host bridge (the CPU's root complex) or a switch tree inferred from PXB cells: the
        capture says nothing of a shared x16 link above them, only a single switch (PIX)."""
        node = self._nodes_by_id.get(item)
        return node is not None and node.kind in ("host_bridge", "switch_tree")

    def _duplex(self, gpu: str) -> int:
        """Both directions of a GPU's PCIe link as staged copies see them together."""
        hw = self.hardware
        cap = 2 * HOST_COPY_DUPLEX_SHARE * hw.pcie_gbps
        return self.resource(
            f"hostcopy:{gpu}",
            "pcie_duplex",
            "pcie",
            cap,
            f"PCIe link of {gpu}, both directions of staged copies together",
        )

    def sockets(self, gpus: Iterable[int]) -> int:
        """How many sockets (NUMA nodes) the GPUs (local indices) hang from."""
        return len({self._socket_key[self.gpu_ids[g]] for g in gpus})

    def crosses_socket(self, flow: Flow, copy: bool = False) -> bool:
        """The flow's route (NCCL's, or a copy's) crosses the link between two sockets."""
        if copy:
            return any(self.resources[r].kind == "socket" for r, _ in self.copy_path(flow))
        got = self._crosses.get(flow)
        if got is None:
            got = self._crosses[flow] = any(
                self.resources[r].kind == "socket" for r, _ in self.path(flow)
            )
        return got

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

    # --- loads -----------------------------------------------------------------------------

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

    def copy_load(self, flows: Iterable[tuple[Flow, float]]) -> dict[int, float]:
        """`load` over the copy routes."""
        out: dict[int, float] = {}
        for flow, w in flows:
            for r, rw in self.copy_path(flow):
                out[r] = out.get(r, 0.0) + w * rw
        return out

    def alpha(self, flows: Iterable[Flow]) -> float:
        """The per-hop latency (us) of the slowest of `flows`: its class's calibrated or
        catalogue figure, plus the socket link's where the route crosses one."""
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


def pcie_capability(nvml: NvmlFacts | None) -> tuple[int, int] | None:
    """What a healthy server's GPU links run at, as NVML reports them: the slowest GPU's
    maximum generation (NVML's is the link's, GPU and slot together) and maximum width; None
    unless every GPU reports both. What a link runs at now (a downtrained one) is the health
    checks' `downtrained_pcie`, not an expectation."""
    if nvml is None or not nvml.gpus:
        return None
    gens = [g.pcie.max_generation for g in nvml.gpus]
    widths = [g.pcie.max_width for g in nvml.gpus]
    if None in gens or None in widths:
        return None
    gen, width = min(g for g in gens if g is not None), min(w for w in widths if w is not None)
    if gen not in PCIE_GTS or width not in (1, 2, 4, 8, 16, 32):
        return None
    return gen, width


def p2p_status_from_text(text: str) -> dict[Flow, bool]:
    """`nvidia-smi topo -p2p r` (or w/n/a) as {(i, j): OK?}; an empty dict if no matrix."""
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
