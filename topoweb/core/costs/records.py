"""The cost model's vocabulary: the operations it prices, the records it answers with
(`CollectiveCost`), what it is built from (`Resource`, `Calibration`) and the small pure
helpers every part of the package shares (the tightest resource of a load, a ring's flows)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
CALIBRATION_CLASSES = ("nvlink", "pcie", "socket")
# nccl-tests rows under this size are latency-bound (8 B - 32 KiB in a default sweep): they
# calibrate a class's latency, larger rows its bandwidth, and the fidelity bench's latency slice.
SMALL_MESSAGE_BYTES = 64 << 10
# Calibration.alpha_us keys of one peer copy's fixed time (us), P2P and staged through the host.
COPY_LATENCY_KEY = "copy"
STAGED_LATENCY_KEY = "copy_staged"
P2PMode = Literal["auto", "on", "off"]

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


@dataclass(frozen=True)
class Variant:
    """One way of running an operation (an algorithm and protocol NCCL would consider, a copy,
    a chain) with its time: what `collectives` compares and turns into a `CollectiveCost`."""

    algorithm: str
    time_us: float
    order: tuple[int, ...]
    bandwidth: float
    alpha: float
    bottleneck: int
    protocol: str = "Simple"


# Ring form of each collective: (latency steps, bytes-over-B factor) for p ranks.
RING_STEPS: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {
    "all_reduce": (lambda p: 2 * (p - 1), lambda p: 2 * (p - 1) / p),
    "reduce_scatter": (lambda p: p - 1, lambda p: (p - 1) / p),
    "all_gather": (lambda p: p - 1, lambda p: (p - 1) / p),
    "broadcast": (lambda p: p - 1, lambda p: 1.0),
    "reduce": (lambda p: p - 1, lambda p: 1.0),
    "alltoall": (lambda p: p - 1, lambda p: 1 / p),
    "sendrecv": (lambda p: 1, lambda p: 1.0),
}


def transfer_us(nbytes: float, gbps: float) -> float:
    """Microseconds to move `nbytes` at `gbps` GB/s (infinite at no rate)."""
    return nbytes / (gbps * 1e3) if gbps > 0 else math.inf


def tightest(caps: list[float], load: dict[int, float]) -> Rate:
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


def ring_flows(order: Sequence[int]) -> list[Flow]:
    """The sends of a ring in `order`, closing it back to its first GPU."""
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
