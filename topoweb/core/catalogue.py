"""Per-link-class bandwidth and latency defaults by GPU generation (../shared/DOMAIN.md s2).

Every bandwidth here is PER DIRECTION in GB/s (1e9 bytes/s); vendor figures quoted
bidirectional (H100 "900 GB/s") are halved before they get here. Figures are defaults the
cost model can override (calibration, explicit PCIe generation/width)."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, replace

from topoweb.core.model import Topology, nvlink_count


@dataclass(frozen=True)
class CopyShare:
    """What a copy engine reaches of a link's line rate, per direction, as published runs of
    p2pBandwidthLatencyTest / nvbandwidth show it: the share, its relative band (the spread
    of the published figures, or wider where the figure is borrowed), and the source."""

    share: float
    band: float
    source: str


_DELL = (
    "https://manuzoid.com/manuals/46Jor-Dell%20High%20Performance%20Computing"
    "%20Solution%20Resources%20Owner's%20Manual"
)
# Copy engines over NVLink, by GPU family: each a published p2pBandwidthLatencyTest result
# divided by the bundle's line rate (25 GB/s per link per direction, 20 on NVLink1).
NVLINK_COPY_SHARE: dict[str, CopyShare] = {
    "Pascal": CopyShare(
        0.91,
        0.05,
        f"P100-SXM2 p2pBandwidthLatencyTest (Dell C4130): 18.31 of 20 GB/s per link, {_DELL}",
    ),
    "Volta": CopyShare(
        0.96,
        0.03,
        f"V100-SXM2 p2pBandwidthLatencyTest (Dell C4130): 47.88 of 50 GB/s per NV2 pair, {_DELL}",
    ),
    "Ampere": CopyShare(
        0.80,
        0.08,
        "8x A100-SXM4-80GB p2pBandwidthLatencyTest: 430-520 GB/s both ways of 600, "
        "https://github.com/NVIDIA/nccl-tests/issues/149",
    ),
    "Hopper": CopyShare(
        0.83,
        0.03,
        "HGX H100 p2pBandwidthLatencyTest: 371-377 GB/s one way of 450, "
        "https://github.com/NVIDIA/nccl/issues/1264",
    ),
    "Blackwell": CopyShare(
        0.83,
        0.08,
        "no published B200 copy matrix found: Hopper's share, with a wider band",
    ),
}
# GPU families without a figure of their own borrow the nearest one's.
_COPY_FAMILY = {"Turing": "Volta", "Ada": "Ampere", "Kepler": "Pascal", "Maxwell": "Pascal"}

# Copy engines over PCIe P2P, by PCIe generation (the link sets it, not the GPU).
PCIE_P2P_SHARE: dict[int, CopyShare] = {
    3: CopyShare(0.85, 0.05, "DOMAIN.md s2: P2P DMA at 85-90 % of the PCIe line rate"),
    4: CopyShare(
        0.835,
        0.03,
        "RTX A6000 nvbandwidth device_to_device_memcpy_read_ce: 26.34 of 31.5 GB/s, "
        "https://github.com/NVIDIA/nvbandwidth/issues/50",
    ),
    5: CopyShare(
        0.86,
        0.04,
        "p2pmark on PCIe 5.0 x16: 54.30 of 63.0 GB/s, https://github.com/lukealonso/p2pmark",
    ),
}
# cudaMemcpyPeer without P2P is staged by the driver through a pinned host buffer: a
# device-to-host leg and a host-to-device leg, pipelined. Share of an x16 line one staged copy
# reaches one way on each generation's hosts: there the host's staging path sets the rate,
# not the link. On a narrower link the copy runs at most at one leg's rate (HOST_COPY).
STAGED_COPY_SHARE: dict[int, CopyShare] = {
    3: CopyShare(
        0.365,
        0.06,
        "Gen3 x16 staged copies of 5.3-5.8 GB/s (the project's p2p_02/p2p_08/p2p_11 captures)",
    ),
    4: CopyShare(
        0.70,
        0.05,
        "P2P=Disabled matrix of a 6-GPU Gen4 server: 22.1-22.4 of 31.5 GB/s, "
        "https://github.com/NVIDIA/nccl/issues/814",
    ),
    5: CopyShare(
        0.59,
        0.05,
        "HGX H100 P2P=Disabled matrix: 36.3-38.0 of 63.0 GB/s, "
        "https://github.com/NVIDIA/nccl/issues/1264",
    ),
}
# One pinned host copy one way over a PCIe link: its share of the line. A staged copy's legs
# are pipelined, so this bounds a staged copy on a link too narrow for the host's rate.
HOST_COPY = CopyShare(
    0.79,
    0.04,
    "A100 Gen4 host copies of about 25 of 31.5 GB/s one way, "
    "https://github.com/NVIDIA/nvbandwidth/issues/53; the project's p2p_01 (Gen3 x1 risers) "
    "stages at 0.76-0.82 of 0.985 GB/s",
)
# The first PCIe generation whose staged copies both ways at once contend for each GPU's link
# (HOST_COPY_DUPLEX_SHARE); before it the hosts' staging path bounds them first.
STAGED_LEGS_OVERLAP_GEN = 4
# Host copies both ways at once over one PCIe link: each direction keeps this share of its
# one-way rate (A100 Gen4: host-to-device ~11 plus device-to-host ~25 GB/s together, of ~25
# one way, https://github.com/NVIDIA/nvbandwidth/issues/53). Staged copies with pipelined
# legs pay it when both directions run; legs in turn leave each link idle half the time.
HOST_COPY_DUPLEX_SHARE = 0.72


def nvlink_copy_share(generation: Generation) -> CopyShare:
    """The copy engines' NVLink share for a GPU generation (its family's, or the nearest)."""
    family = generation.name.split("-")[0]
    return NVLINK_COPY_SHARE[_COPY_FAMILY.get(family, family)]


def _by_gen(table: dict[int, CopyShare], gen: int) -> CopyShare:
    return table[min(max(gen, min(table)), max(table))]


def pcie_p2p_share(gen: int) -> CopyShare:
    return _by_gen(PCIE_P2P_SHARE, gen)


def staged_copy_share(gen: int) -> CopyShare:
    return _by_gen(STAGED_COPY_SHARE, gen)


# The default PCIe P2P share (Gen3's), for callers that do not know the generation.
P2P_PCIE_EFFICIENCY = PCIE_P2P_SHARE[3].share
# Fixed cost of one small peer copy, as p2pBandwidthLatencyTest's GPU latency matrices time it
# (100 back-to-back 16-byte cudaMemcpyPeerAsync on one stream, GPU events, the host queueing
# behind a blocked stream; cuda-samples p2pBandwidthLatencyTest.cu outputLatencyMatrix). That
# time is the copy engine's own per-copy work, set by the GPU generation and its driver: on
# every published matrix a peer copy over NVLink or PCIe P2P takes about what a copy inside one
# GPU takes (the diagonal), so the link adds little. Without P2P the driver stages the copy
# through pinned host memory: two copy-engine copies (device to host, host to device) and a
# hand-off between the two GPUs through host memory, 10-24 us on every published matrix.
# A server's own latency matrix replaces these (calibrate_from_p2p); answers without one say
# so with the band.


@dataclass(frozen=True)
class CopyLatency:
    """One generation's published GPU-side latency of a small peer copy: with P2P (NVLink or
    PCIe), staged through the host without it, the relative band the published cells spread
    over, and the source."""

    p2p_us: float
    staged_us: float
    band: float
    source: str


_KINGHORN = (
    "https://github.com/dbkinghorn/Notes "
    "2023/NV-4090-P2P/NVIDIAmultiGPU-RTX4090-Issues-vs-RTX6000Ada-RTX3090.md"
)
# Keyed by Generation.name first, then by family (the name before "-").
COPY_LATENCY: dict[str, CopyLatency] = {
    "Pascal-NVLink": CopyLatency(
        1.35,
        15.0,
        0.5,
        "4x P100 NVLink p2pBandwidthLatencyTest: P2P 1.31-1.39 us (public GitHub notes found "
        "by exact search, repository not recorded by the index); staged: the fallback's 15 us",
    ),
    "Ampere": CopyLatency(
        2.75,
        21.0,
        0.25,
        "A100 p2pBandwidthLatencyTest GPU latency: 8x A100-SXM4-80GB NVSwitch P2P 2.72-3.33 us, "
        "staged 15.8-23.7 (public GitHub notes, repository not recorded by the index); 4x A100 "
        "80GB PCIe with NVLink bridges P2P 2.22-2.32, staged 11.7-21.9, "
        "https://github.com/sushruta/sushruta.github.io "
        "content/post/03302024-nvlink-and-gpu/index.md",
    ),
    "Ada": CopyLatency(
        1.3,
        11.0,
        0.2,
        f"2x RTX 6000 Ada (Threadripper Pro, Gen4): P2P 1.28-1.29 us, staged 10.84-11.07; 2x "
        f"RTX 4090 on the same host staged 10.48-10.49, {_KINGHORN}",
    ),
    "Hopper": CopyLatency(
        2.8,
        16.5,
        0.2,
        "8x H100 80GB HBM3 (HGX, NVSwitch) p2pBandwidthLatencyTest: P2P 2.26-3.35 us (median "
        "2.78), staged 14.1-19.2 (public GitHub notes, repository not recorded by the index)",
    ),
    "Blackwell-consumer": CopyLatency(
        2.0,
        12.8,
        0.5,
        "2x RTX 5090 (no P2P on GeForce): staged 12.75-12.87 us, "
        "https://github.com/NVIDIA/nccl-tests/issues/287; P2P: the fallback's 2 us",
    ),
}
# Generations without a published matrix of their own: a 4-GPU NVLink server's (GPU model not
# named) 1.8-2.3 us with P2P and 11-20 us staged, https://github.com/NVIDIA/cuda-samples/issues/230;
# older drivers have shown 5-7 us with P2P, hence the wide band.
P2P_COPY_LATENCY_US = 2.0
STAGED_COPY_LATENCY_US = 15.0
COPY_LATENCY_BAND = 0.5
_FALLBACK_COPY_LATENCY = CopyLatency(
    P2P_COPY_LATENCY_US,
    STAGED_COPY_LATENCY_US,
    COPY_LATENCY_BAND,
    "no published latency matrix for this generation: a 4-GPU NVLink server's, "
    "https://github.com/NVIDIA/cuda-samples/issues/230",
)


def copy_latency_prior(generation: Generation) -> CopyLatency:
    """The published small-copy latency of a GPU generation (its own, its family's, or the
    fallback with its wide band)."""
    family = generation.name.split("-")[0]
    return COPY_LATENCY.get(generation.name, COPY_LATENCY.get(family, _FALLBACK_COPY_LATENCY))


# Relative band of NCCL's published latencies as small-message times: NCCL's tuning model
# plans with them; measured small-message rows replace them (calibrate_from_nccl).
LATENCY_PRIOR_BAND = 0.3
# Relative band of the cost model's large-message busbw of an NCCL collective: NCCL's own
# tuning model, which ours follows, is a planning figure, not a measurement.
BUSBW_MODEL_BAND = 0.10
# Pinned host<->device copies reach ~88 % of PCIe line rate (device_01: 55.5 GB/s per
# direction on Gen5 x16, 63.0 line); pageable copies 15-22 GB/s on the same link.
HOST_PINNED_EFFICIENCY = 0.88
# NCCL's SHM transport: the sender's GPU writes into host memory (posted writes, full rate),
# the receiver's GPU reads it back across PCIe (non-posted reads, ~2/3 of the rate), so the
# reading leg weighs 1.5 per byte (nccl_11: 2x RTX 2080 Ti without P2P, 4.0 GB/s busbw on a
# Gen3 switch uplink NCCL rates at 12).
SHM_READ_WEIGHT = 1.5
# What each GPU beyond the first adds to a call when one host thread drives several (nccl-tests
# -g N: the thread issues NCCL's enqueue and a kernel launch per GPU, and the collective cannot
# finish before its last GPU's kernel starts). Published: DGX-A100 all_reduce of 8-128 B, one
# thread driving N GPUs, 10.0 / 13.8 / 16.9 / 20.8 / 25.2 / 29.5 / 33.7 us for N = 2..8
# (https://github.com/NVIDIA/nccl-tests/issues/123); less NCCL's own Ring LL latency over
# NVLink (6.6 + 2 (N-1) x 0.6 us, tuning.cc) that leaves 2.2-2.7 us per extra GPU, 2.55 by
# least squares. Faster hosts and newer NCCL issue faster, older ones slower.
LAUNCH_US_PER_GPU = 2.55
# RDMA NICs deliver ~92 % of their line rate to NCCL (nccl_03: 22.1 GB/s all_gather busbw
# over a 200 Gb/s ConnectX-7; 400 Gb/s InfiniBand rails typically show 46-48 of 50).
NET_EFFICIENCY = 0.92

# NCCL's own per-link NVLink planning figures (GB/s per direction, src/graph/topo.h):
# what its collectives reach on one link. Copies use line rate x NVLINK_COPY_SHARE.
NCCL_NVLINK_GBPS: dict[str, float] = {
    "NVLink1": 18.0,  # SM60
    "NVLink2": 20.0,  # SM70 (also Turing bridges)
    "NVLink3": 20.0,  # SM80
    "NVLink3-bridge": 12.0,  # SM86
    "NVLink4": 20.6,  # SM90
    "NVLink5": 40.1,  # SM100
}


def nccl_pcie_gbps(gen: int, width: int = 16) -> float:
    """NCCL's PCIe figure: width x code / 80, codes 15/30/60/120/240/480 per generation
    (Gen3 x16 -> 12, Gen4 x16 -> 24, Gen5 x16 -> 48)."""
    codes = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}
    if gen not in codes:
        raise ValueError(f"unknown PCIe generation {gen}")
    return width * codes[gen] / 80


# Common RDMA adapters by the name a NIC legend or `ibv_devinfo` shows: Gb/s per port.
NIC_CATALOGUE_GBITS: dict[str, float] = {
    "ConnectX-4": 100.0,
    "ConnectX-5": 100.0,
    "ConnectX-6": 200.0,
    "ConnectX-7": 400.0,
    "ConnectX-8": 800.0,
    "BlueField-2": 200.0,
    "BlueField-3": 400.0,
    "EFA": 100.0,
}
# Per-link NVLink rate, per direction (DOMAIN.md s2 table, "per-link" column).
NVLINK_PER_LINK_GBPS: dict[str, float] = {
    "NVLink1": 20.0,
    "NVLink2": 25.0,
    "NVLink3": 25.0,
    "NVLink2-bridge": 25.0,  # RTX 2080 Ti / TITAN RTX / Quadro RTX (sm75) bridge, 2 links
    "NVLink3-bridge": 14.0,  # RTX 3090 / A6000 (sm86) bridge
    "NVLink4": 25.0,
    "NVLink5": 50.0,
}

# PCIe transfer rate per lane in GT/s and the line encoding (8b/10b up to Gen2, 128b/130b
# from Gen3; Gen6 FLIT mode is treated as 128/130 too, near enough for a default).
PCIE_GTS: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def pcie_line_rate_gbps(gen: int, width: int = 16) -> float:
    """Raw PCIe line rate per direction in GB/s: Gen4 x16 -> 31.5 (DOMAIN.md s2 "~32")."""
    if gen not in PCIE_GTS:
        raise ValueError(f"unknown PCIe generation {gen}")
    if width not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"PCIe width must be x1..x32, got x{width}")
    encoding = 0.8 if gen <= 2 else 128 / 130
    return PCIE_GTS[gen] * width * encoding / 8


# Inter-socket links: NCCL's planning figures, per direction (DOMAIN.md s2 table).
SOCKET_LINK_GBPS: dict[str, float] = {
    "Intel QPI (Broadwell)": 6.0,
    "Intel UPI (Skylake)": 10.0,
    "Intel UPI (Sapphire Rapids)": 22.0,
    "Intel UPI (Emerald Rapids)": 40.0,
    "AMD xGMI (Zen1-2)": 16.0,
    "AMD xGMI (Zen3-4)": 24.0,
    "AMD xGMI (Zen5)": 32.0,
}


def socket_link_of_cpu(
    name: str | None = None,
    *,
    vendor: str | None = None,
    family: int | None = None,
    model: int | None = None,
) -> str | None:
    """The socket link of a host's CPU (a key of SOCKET_LINK_GBPS), from its model name as
    /proc/cpuinfo gives it ("AMD EPYC 9654 96-Core Processor", "Intel(R) Xeon(R) Platinum
    8480C") or from the vendor, family and model ids an NCCL topology XML's <cpu> carries;
    None when neither says (an Arm or POWER host, a name not recognised).

    Intel by NCCL's own rule (src/graph/topo.cc, ncclTopoGetCpuType: family 6, model from
    0xCF Emerald Rapids, from 0x8F Sapphire Rapids, from 0x55 Skylake, else Broadwell's QPI);
    AMD by Zen generation (family 17h Zen1-2, 19h Zen3-4, 1Ah Zen5), where NCCL plans every
    AMD host at the Zen1-2 figure. An NCCL dump writes the family as base + (extended << 4)
    (Zen3's 19h as 175), a file written by hand as x86 names it (25): both are read."""
    if name:
        return _socket_link_of_name(name)
    if vendor == "GenuineIntel" and family == 6 and model is not None:
        return (
            "Intel UPI (Emerald Rapids)" if model >= 0xCF
            else "Intel UPI (Sapphire Rapids)" if model >= 0x8F
            else "Intel UPI (Skylake)" if model >= 0x55
            else "Intel QPI (Broadwell)"
        )  # fmt: skip
    if vendor == "AuthenticAMD" and family is not None:
        if family > 0x1F and family & 0xF == 0xF:  # NCCL's dump: 0xF + (extended << 4)
            family = 0xF + (family >> 4)
        zen = {0x17: "Zen1-2", 0x19: "Zen3-4", 0x1A: "Zen5"}.get(family, "Zen1-2")
        return f"AMD xGMI ({zen})"
    return None


# EPYC model numbers end in their generation (7xx1 Naples ... 9xx5 Turin); a Xeon Scalable's
# second digit is its generation (8180 Skylake ... 8580 Emerald Rapids); Xeon 6 (6960P) is
# Granite Rapids, which NCCL plans at the Sapphire Rapids figure.
_EPYC = re.compile(r"\bEPYC\s+\w{3}([1-5])", re.IGNORECASE)
_XEON_SCALABLE = re.compile(r"\b(?:Platinum|Gold|Silver|Bronze)\s+\d([1-5])\d\d", re.IGNORECASE)
_XEON_6 = re.compile(r"\bXeon(?:\(R\))?\s+6\d{3}[PE]\b", re.IGNORECASE)
_XEON_E5_E7 = re.compile(r"\bE[57]-\d{4}\w*(?:\s+v(\d))?", re.IGNORECASE)


def _socket_link_of_name(name: str) -> str | None:
    if found := _EPYC.search(name):
        generation = int(found.group(1))
        zen = "Zen1-2" if generation <= 2 else "Zen3-4" if generation <= 4 else "Zen5"
        return f"AMD xGMI ({zen})"
    if found := _XEON_SCALABLE.search(name):
        return {
            "1": "Intel UPI (Skylake)",
            "2": "Intel UPI (Skylake)",  # Cascade Lake: NCCL's Skylake figure
            "3": "Intel UPI (Skylake)",  # Ice Lake: NCCL's Skylake figure
            "4": "Intel UPI (Sapphire Rapids)",
            "5": "Intel UPI (Emerald Rapids)",
        }[found.group(1)]
    if _XEON_6.search(name):
        return "Intel UPI (Sapphire Rapids)"
    if _XEON_E5_E7.search(name):
        return "Intel QPI (Broadwell)"  # Haswell and Broadwell alike: NCCL's QPI figure
    return None


def socket_link_of_topology(topo: Topology | None) -> tuple[str, str] | None:
    """The socket link the CPUs of an NCCL topology XML name, with how it was read; None for a
    topology that names none (`topo -m`) or CPUs of no one link."""
    details = topo.details if topo is not None and isinstance(topo.details, dict) else {}
    cpus = details.get("cpus")
    if not isinstance(cpus, list):
        return None
    links: set[str | None] = set()
    for cpu in cpus:
        if not isinstance(cpu, dict):
            continue
        links.add(
            socket_link_of_cpu(
                vendor=cpu.get("vendor"), family=_int_id(cpu.get("familyid")),
                model=_int_id(cpu.get("modelid")),
            )
        )  # fmt: skip
    (link, *others) = links or {None}
    if others or link is None:
        return None
    first = next(c for c in cpus if isinstance(c, dict))
    return link, (
        f"the topology XML's CPUs ({first.get('vendor')} family {first.get('familyid')} "
        f"model {first.get('modelid')})"
    )


def _int_id(value: object) -> int | None:
    """An NCCL XML id: decimal as NCCL writes it, or 0x-prefixed hex."""
    text = value.strip().lower() if isinstance(value, str) else ""
    try:
        return int(text, 16) if text.startswith("0x") else int(text)
    except ValueError:
        return None


# Per-hop latency (alpha) in microseconds, DOMAIN.md s2 "Latency orders of magnitude", each at
# the top of its range: what a hop adds where no measurement says (a socket or NIC crossing on a
# route whose class was measured, exports). Collectives without measured latency take NCCL's own.
LATENCY_US: dict[str, float] = {
    "nvlink": 2.0,
    "pcie": 2.0,  # PCIe 1-2 us
    "socket": 2.5,  # crossing sockets adds 2-3 us
    "network": 3.0,  # InfiniBand RDMA 1-3 us
}


@dataclass(frozen=True)
class Generation:
    """What a GPU family brings: its NVLink flavour and count, its PCIe generation, and the
    CPU / NIC a server of its era usually has (the last two are defaults, not facts)."""

    name: str
    nvlink: str | None  # key of NVLINK_PER_LINK_GBPS, None without NVLink
    links_per_gpu: int
    pcie_gen: int
    socket_link: str  # key of SOCKET_LINK_GBPS
    nic_gbits: float  # typical NIC line rate of servers of this era, Gb/s
    nvls: bool = False  # NVSwitch gen3+ with NVLink SHARP (Hopper, Blackwell)
    arch: str = "Volta"  # NCCL's tuning row: Volta, Ampere, Hopper, Blackwell
    nvls_efficiency: float = 0.0  # NCCL's nvlsEfficiency for the arch

    @property
    def nvlink_per_link_gbps(self) -> float:
        return NVLINK_PER_LINK_GBPS[self.nvlink] if self.nvlink else 0.0

    @property
    def nccl_nvlink_per_link_gbps(self) -> float:
        return NCCL_NVLINK_GBPS[self.nvlink.replace("2-bridge", "2")] if self.nvlink else 20.0


GENERATIONS: dict[str, Generation] = {
    "Kepler": Generation("Kepler", None, 0, 3, "Intel QPI (Broadwell)", 56),
    "Maxwell": Generation("Maxwell", None, 0, 3, "Intel QPI (Broadwell)", 56),
    "Pascal": Generation("Pascal", None, 0, 3, "Intel QPI (Broadwell)", 100),
    "Pascal-NVLink": Generation("Pascal-NVLink", "NVLink1", 4, 3, "Intel QPI (Broadwell)", 100),
    # DGX-1V and most V100-SXM2 boxes are dual Broadwell E5-2698 v4 (QPI).
    "Volta": Generation("Volta", "NVLink2", 6, 3, "Intel QPI (Broadwell)", 100),
    # DGX-2 (V100-SXM3) is dual Skylake Platinum 8168 (UPI).
    "Volta-SXM3": Generation("Volta-SXM3", "NVLink2", 6, 3, "Intel UPI (Skylake)", 100),
    "Volta-PCIe": Generation("Volta-PCIe", None, 0, 3, "Intel UPI (Skylake)", 100),
    "Turing": Generation("Turing", "NVLink2-bridge", 2, 3, "Intel UPI (Skylake)", 100),
    "Ampere": Generation("Ampere", "NVLink3", 12, 4, "AMD xGMI (Zen1-2)", 200, arch="Ampere"),
    "Ampere-A800": Generation(
        "Ampere-A800", "NVLink3", 8, 4, "AMD xGMI (Zen1-2)", 200, arch="Ampere"
    ),
    "Ampere-sm86": Generation(
        "Ampere-sm86", "NVLink3-bridge", 4, 4, "AMD xGMI (Zen3-4)", 100, arch="Ampere"
    ),
    "Ada": Generation("Ada", None, 0, 4, "AMD xGMI (Zen3-4)", 200, arch="Ampere"),
    "Hopper": Generation(
        "Hopper", "NVLink4", 18, 5, "Intel UPI (Sapphire Rapids)", 400, True, "Hopper", 0.85
    ),
    "Hopper-H800": Generation(
        "Hopper-H800", "NVLink4", 8, 5, "Intel UPI (Sapphire Rapids)", 400, True, "Hopper", 0.85
    ),
    "Blackwell": Generation(
        "Blackwell", "NVLink5", 18, 5, "Intel UPI (Emerald Rapids)", 400, True, "Blackwell", 0.74
    ),
    "Blackwell-consumer": Generation(
        "Blackwell-consumer", None, 0, 5, "AMD xGMI (Zen5)", 200, arch="Blackwell"
    ),
}

# First match wins: specific names before families.
_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"H800", "Hopper-H800"),
    (r"H100|H200|H20\b|GH200", "Hopper"),
    (r"GB10\b|RTX 50\d0|RTX PRO \d+ Blackwell", "Blackwell-consumer"),
    (r"B100|B200|GB200|B300|GB300", "Blackwell"),
    (r"A800", "Ampere-A800"),
    (r"A100|A30\b", "Ampere"),
    (r"RTX 30[89]0|RTX A6000|A40\b|RTX A5000|A10\b", "Ampere-sm86"),
    (r"L40|L4\b|RTX 40\d0|RTX 6000 Ada|Ada Generation", "Ada"),
    (r"V100-PCIE|V100S-PCIE", "Volta-PCIe"),
    (r"V100-SXM3|DGX-2", "Volta-SXM3"),
    (r"V100|Titan V", "Volta"),
    (r"RTX 20\d0|T4\b|Quadro RTX|TITAN RTX", "Turing"),
    (r"P100-SXM|DGX-1", "Pascal-NVLink"),
    (r"P100|P40|P4\b|GTX 10\d0|TITAN X|Titan Xp", "Pascal"),
    (r"M60|M40|GTX 9\d0", "Maxwell"),
    (r"K80|K40|K20", "Kepler"),
)


@dataclass(frozen=True)
class GenerationChoice:
    generation: Generation
    source: str  # "gpu-name", "nvlink-count" or "default"
    assumption: str  # shown to the user: where the figures come from


def generation_from_name(gpu_name: str) -> Generation | None:
    for pattern, key in _NAME_RULES:
        if re.search(pattern, gpu_name, re.IGNORECASE):
            return GENERATIONS[key]
    return None


def infer_generation(topo: Topology | None, gpu_name: str | None = None) -> GenerationChoice:
    """The GPU generation from an NVML name when given; otherwise a guess from the NVLink
    bundle sizes in the matrix, said out loud in `assumption`."""
    if gpu_name:
        gen = generation_from_name(gpu_name)
        if gen is not None:
            return GenerationChoice(gen, "gpu-name", f"{gpu_name!r} is {gen.name}")
    # The distinct classes first (in C): a 576-GPU domain has 165,600 GPU pairs, one class.
    classes = set(map(operator.attrgetter("link_class"), topo.gpu_links())) if topo else set()
    counts = sorted({n for n in map(nvlink_count, classes) if n})
    named = f"unrecognised GPU name {gpu_name!r}; " if gpu_name else "no GPU name given; "
    if counts:
        top = counts[-1]
        n_gpus = len(topo.gpus) if topo else 0
        if top >= 18:
            key, why = "Hopper", f"NV{top} bundles"
        elif top >= 12:
            key, why = "Ampere", f"NV{top} bundles"
        elif top == 8:
            key, why = "Hopper-H800", "NV8 bundles"
        elif top == 6:
            key, why = "Volta", "NV6 bundles"
        elif top == 4 and n_gpus > 2:
            key, why = "Ampere", f"NV4 between {n_gpus} GPUs (HGX A100 4-GPU board)"
        elif top == 4:
            key, why = "Ampere-sm86", "an NV4 pair (workstation NVLink bridge)"
        elif counts == [1]:
            key, why = "Pascal-NVLink", "NV1-only mesh (DGX-1 P100)"
        else:
            key, why = "Volta", f"NV{'/NV'.join(map(str, counts))} mesh (DGX-1V style)"
        gen = GENERATIONS[key]
        return GenerationChoice(
            gen,
            "nvlink-count",
            f"{named}assuming {gen.name} ({gen.nvlink}, PCIe Gen{gen.pcie_gen}) from {why}",
        )
    gen = GENERATIONS["Ada"]
    return GenerationChoice(
        gen, "default", f"{named}no NVLink: assuming PCIe Gen{gen.pcie_gen} x16 GPUs"
    )


def pcie_p2p_supported(gpu_name: str | None, gen: Generation) -> bool:
    """Whether the driver allows PCIe P2P for this GPU: GeForce and TITAN cards from Turing on
    have it disabled (NVLink-bridged pairs still get P2P over the bridge)."""
    if not gpu_name or not re.search(r"GeForce|TITAN|\bRTX [2-5]0\d0", gpu_name, re.IGNORECASE):
        return True
    return gen.name.startswith(("Kepler", "Maxwell", "Pascal"))


@dataclass(frozen=True)
class Hardware:
    """The resolved figures one cost model runs on. All bandwidths effective, per direction.

    Collectives use NCCL's planning figures (`nvlink_per_link_gbps`, `nccl_pcie_gbps`); copies
    use line rate x the copy engine's efficiency (`nvlink_copy_per_link_gbps`, `pcie_gbps`)."""

    generation: Generation
    assumption: str
    nvlink_per_link_gbps: float  # NCCL's figure per link (collectives)
    pcie_gen: int
    pcie_width: int
    pcie_gbps: float  # P2P copy rate of one x-width link (line x P2P efficiency)
    socket_link: str
    socket_gbps: float
    nic_gbps: float  # GB/s per direction per NIC (speed / 8)
    p2p_enabled: bool
    latency_us: tuple[tuple[str, float], ...]
    nccl_pcie_gbps: float = 24.0  # NCCL's width x code / 80
    nvlink_copy_per_link_gbps: float = 24.25
    staged_gbps: float = 5.75  # one staged (host-bounced) copy, one way, both legs
    staged_overlap: bool = False  # staged copies both ways at once contend for each GPU link
    # Relative bands of the copy figures (from the published results they come from).
    nvlink_copy_band: float = 0.03
    pcie_copy_band: float = 0.05
    staged_band: float = 0.06
    copy_sources: tuple[str, ...] = ()
    pcie_p2p: bool = True  # the driver allows PCIe P2P (not GeForce/TITAN from Turing on)
    nic_source: str = "generation default"
    # Where the socket link comes from; without a CPU named (topo -m names none) it is the GPU
    # generation's usual platform, a guess the drawing and the analysis say is one.
    socket_source: str = ""
    socket_assumed: bool = True
    warnings: tuple[str, ...] = ()

    def latency(self, kind: str) -> float:
        return dict(self.latency_us)[kind]

    @property
    def pcie_line_gbps(self) -> float:
        return pcie_line_rate_gbps(self.pcie_gen, self.pcie_width)

    def with_pcie(self, gen: int, width: int) -> Hardware:
        """The same hardware on another PCIe generation or width (NVML's word on the links)."""
        return _pcie_figures(
            replace(
                self,
                assumption=self.assumption.replace(
                    f"; PCIe Gen{self.pcie_gen} x{self.pcie_width} assumed from the generation", ""
                ),
            ),
            gen,
            width,
        )

    def describe(self) -> dict[str, object]:
        return {
            "generation": self.generation.name,
            "assumption": self.assumption,
            "nvlink": self.generation.nvlink,
            "nvlink_per_link_gbps_per_direction": round(self.nvlink_per_link_gbps, 2),
            "nvlink_line_rate_per_link_gbps_per_direction": round(
                self.generation.nvlink_per_link_gbps, 2
            ),
            "pcie": f"Gen{self.pcie_gen} x{self.pcie_width}",
            "pcie_gbps_per_direction": round(self.nccl_pcie_gbps, 2),
            "pcie_copy_gbps_per_direction": round(self.pcie_gbps, 2),
            "pcie_line_rate_gbps_per_direction": round(self.pcie_line_gbps, 2),
            "efficiency": {
                "nvlink_copy": round(
                    self.nvlink_copy_per_link_gbps
                    / (self.generation.nvlink_per_link_gbps or NVLINK_PER_LINK_GBPS["NVLink2"]),
                    3,
                ),
                "pcie_p2p": round(self.pcie_gbps / self.pcie_line_gbps, 3),
                "staged_copy": round(self.staged_gbps / self.pcie_line_gbps, 3),
                "network": NET_EFFICIENCY,
            },
            "copy_sources": list(self.copy_sources),
            "socket_link": self.socket_link,
            "socket_gbps_per_direction": self.socket_gbps,
            "socket_link_source": self.socket_source,
            "nic_gbps_per_direction": self.nic_gbps,
            "nic_rate_source": self.nic_source,
            "pcie_p2p_supported": self.pcie_p2p,
            "nvls": self.generation.nvls,
            "warnings": list(self.warnings),
        }


def _nvlink_warnings(topo: Topology | None, gpu_name: str | None, gen: Generation) -> list[str]:
    """The capture against the catalogue: an H800 showing NV18, an H100 showing NV8."""
    if topo is None or not gpu_name or not gen.nvlink:
        return []
    counts = {lnk.nvlinks for lnk in topo.gpu_links() if lnk.is_nvlink}
    if not counts:
        return []
    top = max(counts)
    n = len(topo.gpus)
    switch_like = len(counts) == 1 and top * (n - 1) > gen.links_per_gpu
    if switch_like and top != gen.links_per_gpu:
        return [
            f"the catalogue gives {gpu_name} {gen.links_per_gpu} NVLinks per GPU but the "
            f"capture shows NV{top}: following the capture"
        ]
    return []


def resolve_hardware(
    topo: Topology | None,
    gpu_model: str | None = None,
    *,
    pcie_gen: int | None = None,
    pcie_width: int = 16,
    p2p_enabled: bool = True,
    socket_link: str | None = None,
    nic_gbits: float | None = None,
    cpu_model: str | None = None,
) -> Hardware:
    """Figures for a server: generation defaults, overridden by whatever the caller knows
    (NVML's PCIe generation and width, P2P status, the NIC rate, the host's CPU model as the
    collector reads it) or the topology says (the CPUs an NCCL topology XML names): the
    socket link comes from the CPU."""
    choice = infer_generation(topo, gpu_model)
    gen = choice.generation
    if socket_link is not None and socket_link not in SOCKET_LINK_GBPS:
        raise ValueError(f"unknown socket link {socket_link!r}")
    if nic_gbits is not None and not nic_gbits > 0:
        raise ValueError(f"the NIC rate must be positive, got {nic_gbits} Gb/s")
    pgen = pcie_gen or gen.pcie_gen
    link, socket_source = _socket_link(topo, gen, socket_link, cpu_model)
    assumption = choice.assumption
    if pcie_gen is None:
        assumption += f"; PCIe Gen{pgen} x{pcie_width} assumed from the generation"
    nv_nccl = gen.nccl_nvlink_per_link_gbps
    nv_line = gen.nvlink_per_link_gbps or NVLINK_PER_LINK_GBPS["NVLink2"]
    if topo is not None and gen.nvlink is None and any(lnk.is_nvlink for lnk in topo.gpu_links()):
        assumption += "; the matrix shows NVLink this GPU family lacks: using 25 GB/s per link"
    nv_copy = nvlink_copy_share(gen)
    hw = Hardware(
        generation=gen,
        assumption=assumption,
        nvlink_per_link_gbps=nv_nccl,
        pcie_gen=pgen,
        pcie_width=pcie_width,
        pcie_gbps=0.0,
        socket_link=link,
        socket_gbps=SOCKET_LINK_GBPS[link],
        socket_source=socket_source,
        socket_assumed=socket_source.startswith("assumed"),
        nic_gbps=(nic_gbits or gen.nic_gbits) / 8,
        p2p_enabled=p2p_enabled,
        latency_us=tuple(sorted(LATENCY_US.items())),
        nvlink_copy_per_link_gbps=nv_line * nv_copy.share,
        nvlink_copy_band=nv_copy.band,
        pcie_p2p=pcie_p2p_supported(gpu_model, gen),
        nic_source="given" if nic_gbits else f"{gen.name} era default ({gen.nic_gbits:g} Gb/s)",
        warnings=tuple(_nvlink_warnings(topo, gpu_model, gen)),
    )
    return _pcie_figures(hw, pgen, pcie_width)


def _socket_link(
    topo: Topology | None, gen: Generation, given: str | None, cpu_model: str | None
) -> tuple[str, str]:
    """The socket link and where it comes from: the caller's, the host's CPU model, the
    topology XML's CPUs, else the GPU generation's usual platform (assumed)."""
    if given is not None:
        return given, "given"
    if cpu_model and (link := socket_link_of_cpu(cpu_model)) is not None:
        return link, f"the host's CPU ({cpu_model.strip()})"
    if (found := socket_link_of_topology(topo)) is not None:
        return found
    return gen.socket_link, f"assumed: the usual platform of {gen.name} GPUs"


def _pcie_figures(hw: Hardware, gen: int, width: int) -> Hardware:
    """The PCIe figures of `hw` for a link generation and width: NCCL's planning figure and
    the copy engines' P2P and staged rates, with their published sources."""
    line = pcie_line_rate_gbps(gen, width)
    p2p, staged = pcie_p2p_share(gen), staged_copy_share(gen)
    # The host's staging rate (an x16 figure), or one host copy's rate on a narrower link.
    staged_gbps = min(pcie_line_rate_gbps(gen, 16) * staged.share, line * HOST_COPY.share)
    nv = nvlink_copy_share(hw.generation)
    return replace(
        hw,
        pcie_gen=gen,
        pcie_width=width,
        pcie_gbps=line * p2p.share,
        nccl_pcie_gbps=nccl_pcie_gbps(gen, width),
        staged_gbps=staged_gbps,
        staged_overlap=gen >= STAGED_LEGS_OVERLAP_GEN,
        pcie_copy_band=p2p.band,
        staged_band=staged.band,
        copy_sources=((f"NVLink copies: {nv.source}",) if hw.generation.nvlink else ())
        + (
            f"PCIe P2P copies (Gen{gen}): {p2p.source}",
            f"staged copies (Gen{gen}): {staged.source}; on a narrower link at most one host "
            f"copy's rate: {HOST_COPY.source}",
        ),
    )


def nvlink_bundle_gbps(hw: Hardware, link_class: str) -> float:
    """NCCL's per-direction bandwidth of an NV<k> bundle on this hardware."""
    return nvlink_count(link_class) * hw.nvlink_per_link_gbps
