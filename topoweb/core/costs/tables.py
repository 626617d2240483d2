"""NCCL's published tuning constants (src/graph/tuning.cc, NCCL 2.30), as data: the latencies,
protocol caps, tree corrections and NVLS speed ladders its own cost model uses. Nothing here
computes; `collectives` and `bounds` read these tables."""

from __future__ import annotations

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
