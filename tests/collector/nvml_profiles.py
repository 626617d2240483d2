"""NVML answers of three real machine shapes, for the fake NVML in conftest.py.

Each profile follows the `nvidia-smi topo -m` fixture it names: GPU count, names, NVLink
bundles (which peer, how many links), CPU affinity and NUMA affinity columns, and "GPU NUMA ID"
N/A (NVML's nvmlDeviceGetNumaNodeId: NOT_SUPPORTED on x86). What topo -m cannot tell (UUIDs,
PCI bus ids, driver versions, NVSwitch bus ids) is representative, not captured, and says so.

Profile keys: driver/cuda/nvml versions; `gpus`, one dict per GPU; `p2p(i, j, cap) -> status`;
`missing`: NVML functions this driver lacks (the binding raises NVMLError_FunctionNotFound).
Per GPU: `nvlink_slots` (link indexes that exist; beyond: INVALID_ARGUMENT), `nvlinks` (one
entry per link), `fabric` (None: NOT_SUPPORTED).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
OK = pynvml.NVML_P2P_STATUS_OK
NOT_SUPPORTED = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
IOH_TOPOLOGY = pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
CHIPSET = pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
NVLINK_CAP = 2

Profile = dict[str, Any]


def _uuid(model: int, index: int) -> str:
    return f"GPU-{model:08x}-{index:04x}-{index:04x}-{index:04x}-{index:012x}"


# --- 8x H100 SXM with NVSwitch: tests/fixtures/topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt
# NV18 between every pair, GPUs 0-3 on NUMA 0 (CPUs 0-95,192-287), 4-7 on NUMA 1.
# Bus ids as on an HGX H100 baseboard; the 18 links of each GPU go to 4 NVSwitches (5+4+4+5).
H100_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]
H100_SWITCH_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("05", "06", "07", "08")]
_H100_LINK_SWITCH = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5


def h100_nvswitch() -> Profile:
    gpus = []
    for i in range(8):
        gpus.append(
            {
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": _uuid(0x2330, i),
                "bus_id": H100_BUS_IDS[i],
                "device_id": 0x233010DE,
                "memory_total": 85520809984,  # 81559 MiB, what an H100 80GB reports
                "cpus": "0-95,192-287" if i < 4 else "96-191,288-383",
                "numa_nodes": "0" if i < 4 else "1",
                "pcie": (5, 5, 16, 16),
                "nvlink_slots": 18,
                "nvlinks": [
                    {
                        "state": 1,
                        "version": pynvml.NVML_NVLINK_VERSION_4_0,
                        "remote_type": SWITCH,
                        "remote_bus_id": H100_SWITCH_BUS_IDS[_H100_LINK_SWITCH[link]],
                    }
                    for link in range(18)
                ],
                # A single HGX box: the fabric manager runs, but no multi-node clique.
                "fabric": {"state": pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, "clique": 0},
            }
        )
    return {
        "driver_version": "550.54.15",
        "cuda": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": gpus,
        "p2p": lambda i, j, cap: OK,
        "missing": set(),
    }


# --- DGX-1 V100 hybrid cube mesh:
# tests/fixtures/topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt
# Rows of the fixture's matrix: NV<k> = k point-to-point links to that peer (6 links per GPU).
DGX1_MATRIX = """
 X  NV2  NV2  NV1  NV1  NODE NODE NODE
NV2  X   NV1  NV1  NODE NV2  NODE NODE
NV2 NV1   X   NV2  NODE NODE NV1  NODE
NV1 NV1  NV2   X   NODE NODE NODE NV2
NV1 NODE NODE NODE  X   NV2  NV2  NV1
NODE NV2 NODE NODE NV2   X   NV1  NV1
NODE NODE NV1 NODE NV2  NV1   X   NV2
NODE NODE NODE NV2 NV1  NV1  NV2   X
"""
DGX1_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("06", "07", "0A", "0B", "85", "86", "89", "8A")]


def dgx1_links() -> list[list[int]]:
    """For each GPU, the peer at the end of each of its links, in link order."""
    rows = [line.split() for line in DGX1_MATRIX.strip().splitlines()]
    return [
        [j for j, cell in enumerate(row) if cell.startswith("NV") for _ in range(int(cell[2:]))]
        for row in rows
    ]


def dgx1_v100_mesh() -> Profile:
    peers = dgx1_links()
    gpus = []
    for i in range(8):
        gpus.append(
            {
                "name": "Tesla V100-SXM2-32GB",
                "uuid": _uuid(0x1DB5, i),
                "bus_id": DGX1_BUS_IDS[i],
                "device_id": 0x1DB510DE,
                "memory_total": 34089730048,
                "cpus": "0-19",
                "pcie": (3, 3, 16, 16),
                "nvlink_slots": 6,
                "nvlinks": [
                    {
                        "state": 1,
                        "version": pynvml.NVML_NVLINK_VERSION_2_0,
                        "remote_type": GPU,
                        "remote_bus_id": DGX1_BUS_IDS[peer],
                    }
                    for peer in peers[i]
                ],
                "fabric": None,
            }
        )

    # CUDA P2P on DGX-1 exists only between NVLink peers (the 0/1 connectivity pattern of
    # tests/fixtures/p2p_08_dgx1-v100-8gpu-ELIDED-partial-matrices.txt).
    def p2p(i: int, j: int, cap: int) -> int:
        if j in peers[i]:
            return OK
        return NOT_SUPPORTED if cap == NVLINK_CAP else IOH_TOPOLOGY

    return {
        # The fixture's driver prints no NUMA columns: an older driver, without the functions
        # that came later.
        "driver_version": "418.87.01",
        "cuda": 10010,
        "nvml_version": "10.418.87.01",
        "gpus": gpus,
        "p2p": p2p,
        "missing": {
            "nvmlDeviceGetMemoryAffinity",
            "nvmlDeviceGetNumaNodeId",
            "nvmlDeviceGetGpuFabricInfoV",
            "nvmlDeviceGetGpuFabricInfo",
            "nvmlDeviceGetNvLinkRemoteDeviceType",
        },
    }


# --- 4x L40S, PCIe only: tests/fixtures/topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt
# GPU0-1 NODE on NUMA 0, GPU2-3 NODE on NUMA 1, SYS across; no NVLink at all.
L40S_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("4A", "61", "CA", "E1")]


def l40s_pcie() -> Profile:
    gpus = []
    for i in range(4):
        gpus.append(
            {
                "name": "NVIDIA L40S",
                "uuid": _uuid(0x26B9, i),
                "bus_id": L40S_BUS_IDS[i],
                "device_id": 0x26B910DE,
                "memory_total": 48305799168,
                "cpus": "0-95,192-287" if i < 2 else "96-191,288-383",
                "numa_nodes": "0" if i < 2 else "1",
                # GPU3 trained down to Gen4 x8: what the health page should flag.
                "pcie": (4, 4, 8, 16) if i == 3 else (4, 4, 16, 16),
                "nvlink_slots": 0,
                "nvlinks": [],
                "fabric": None,
            }
        )

    # Representative: PCIe P2P within a socket, refused across the SMP interconnect.
    def p2p(i: int, j: int, cap: int) -> int:
        if cap == NVLINK_CAP:
            return NOT_SUPPORTED
        return OK if (i < 2) == (j < 2) else CHIPSET

    return {
        "driver_version": "535.129.03",
        "cuda": 12020,
        "nvml_version": "12.535.129.03",
        "gpus": gpus,
        "p2p": p2p,
        "missing": set(),
    }


PROFILES: dict[str, Callable[[], Profile]] = {
    "h100_nvswitch": h100_nvswitch,
    "dgx1_v100_mesh": dgx1_v100_mesh,
    "l40s_pcie": l40s_pcie,
}
