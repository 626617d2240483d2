"""Topologies of the real machines in tests/fixtures, transcribed by hand from their matrices
(the cost-model tests must not depend on the topo reader), plus synthetic larger servers."""

from __future__ import annotations

import random
from collections.abc import Callable

from topoweb.core.model import Device, Link, Topology


def from_rows(
    names: list[str],
    rows: list[str],
    affinity: dict[str, tuple[str, str | None]] | None = None,
    nic_names: dict[str, str] | None = None,
) -> Topology:
    """Build from matrix rows as printed (one string per device, cells separated by blanks).

    `affinity` maps a GPU to (CPU Affinity, NUMA Affinity) as its row prints them."""
    affinity = affinity or {}
    nic_names = nic_names or {}
    devices = []
    counts = {"gpu": 0, "nic": 0}
    for name in names:
        kind = "gpu" if name.startswith("GPU") else "nic"
        cpu, numa = affinity.get(name, (None, None))
        nic = nic_names.get(name, name if kind == "nic" and not name.startswith("NIC") else None)
        devices.append(Device(name, kind, counts[kind], cpu, numa, None, nic))  # type: ignore[arg-type]
        counts[kind] += 1
    cells = [r.split() for r in rows]
    links = []
    for i, a in enumerate(names):
        assert len(cells[i]) == len(names), f"row {a} has {len(cells[i])} cells"
        for j in range(i + 1, len(names)):
            assert cells[i][j] == cells[j][i], f"{a}-{names[j]} is not symmetric"
            links.append(Link(a, names[j], cells[i][j].replace("SOC", "SYS")))
    return Topology(tuple(devices), tuple(links))


def from_function(
    n_gpus: int, cls: Callable[[int, int], str], numa: Callable[[int], int]
) -> Topology:
    devices = tuple(
        Device(f"GPU{i}", "gpu", i, None, str(numa(i)), None, None) for i in range(n_gpus)
    )
    links = tuple(
        Link(f"GPU{i}", f"GPU{j}", cls(i, j)) for i in range(n_gpus) for j in range(i + 1, n_gpus)
    )
    return Topology(devices, links)


def _same(value: tuple[str, str | None], names: list[str]) -> dict[str, tuple[str, str | None]]:
    return {n: value for n in names}


def h200_nv18_12nic() -> Topology:
    """tests/fixtures/topo_01_h200-8gpu-12nic-numaid.txt"""
    names = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(12)]
    rows = [
        "X NV18 NV18 NV18 NV18 NV18 NV18 NV18 PXB NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS",
        "NV18 X NV18 NV18 NV18 NV18 NV18 NV18 NODE NODE NODE PXB NODE NODE SYS SYS SYS SYS SYS SYS",
        "NV18 NV18 X NV18 NV18 NV18 NV18 NV18 NODE NODE NODE NODE PXB NODE SYS SYS SYS SYS SYS SYS",
        "NV18 NV18 NV18 X NV18 NV18 NV18 NV18 NODE NODE NODE NODE NODE PXB SYS SYS SYS SYS SYS SYS",
        "NV18 NV18 NV18 NV18 X NV18 NV18 NV18 SYS SYS SYS SYS SYS SYS PXB NODE NODE NODE NODE NODE",
        "NV18 NV18 NV18 NV18 NV18 X NV18 NV18 SYS SYS SYS SYS SYS SYS NODE NODE NODE PXB NODE NODE",
        "NV18 NV18 NV18 NV18 NV18 NV18 X NV18 SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB NODE",
        "NV18 NV18 NV18 NV18 NV18 NV18 NV18 X SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE PXB",
        "PXB NODE NODE NODE SYS SYS SYS SYS X NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS",
        "NODE NODE NODE NODE SYS SYS SYS SYS NODE X PIX NODE NODE NODE SYS SYS SYS SYS SYS SYS",
        "NODE NODE NODE NODE SYS SYS SYS SYS NODE PIX X NODE NODE NODE SYS SYS SYS SYS SYS SYS",
        "NODE PXB NODE NODE SYS SYS SYS SYS NODE NODE NODE X NODE NODE SYS SYS SYS SYS SYS SYS",
        "NODE NODE PXB NODE SYS SYS SYS SYS NODE NODE NODE NODE X NODE SYS SYS SYS SYS SYS SYS",
        "NODE NODE NODE PXB SYS SYS SYS SYS NODE NODE NODE NODE NODE X SYS SYS SYS SYS SYS SYS",
        "SYS SYS SYS SYS PXB NODE NODE NODE SYS SYS SYS SYS SYS SYS X NODE NODE NODE NODE NODE",
        "SYS SYS SYS SYS NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS NODE X PIX NODE NODE NODE",
        "SYS SYS SYS SYS NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS NODE PIX X NODE NODE NODE",
        "SYS SYS SYS SYS NODE PXB NODE NODE SYS SYS SYS SYS SYS SYS NODE NODE NODE X NODE NODE",
        "SYS SYS SYS SYS NODE NODE PXB NODE SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE X NODE",
        "SYS SYS SYS SYS NODE NODE NODE PXB SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE X",
    ]
    aff = _same(("0-55,112-167", "0"), names[:4]) | _same(("56-111,168-223", "1"), names[4:8])
    return from_rows(names, rows, aff, {f"NIC{i}": f"mlx5_{i}" for i in range(12)})


def dgx_a100_nv12() -> Topology:
    """tests/fixtures/topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"""
    names = [f"GPU{i}" for i in range(8)] + [f"mlx5_{i}" for i in range(12)]
    pxb_nics = {
        0: (0, 1),
        1: (0, 1),
        2: (2, 3),
        3: (2, 3),
        4: (6, 7),
        5: (6, 7),
        6: (8, 9),
        7: (8, 9),
    }

    def cell(i: int, j: int) -> str:
        if i == j:
            return "X"
        if i < 8 and j < 8:
            return "NV12"
        if i >= 8 and j >= 8:
            a, b = sorted((i - 8, j - 8))
            return (
                "PXB"
                if (a, b) in {(0, 1), (2, 3), (6, 7), (8, 9)}
                else ("PIX" if (a, b) in {(4, 5), (10, 11)} else "SYS")
            )
        g, n = (i, j - 8) if i < 8 else (j, i - 8)
        return "PXB" if n in pxb_nics[g] else "SYS"

    rows = [" ".join(cell(i, j) for j in range(20)) for i in range(20)]
    aff = (
        _same(("48-63,176-191", "3"), names[0:2])
        | _same(("16-31,144-159", "1"), names[2:4])
        | _same(("112-127,240-255", "7"), names[4:6])
        | _same(("80-95,208-223", "5"), names[6:8])
    )
    return from_rows(names, rows, aff)


def dgx1_v100_mesh() -> Topology:
    """tests/fixtures/topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"""
    names = [f"GPU{i}" for i in range(8)] + ["mlx5_0"]
    rows = [
        "X NV2 NV2 NV1 NV1 NODE NODE NODE NODE",
        "NV2 X NV1 NV1 NODE NV2 NODE NODE NODE",
        "NV2 NV1 X NV2 NODE NODE NV1 NODE NODE",
        "NV1 NV1 NV2 X NODE NODE NODE NV2 NODE",
        "NV1 NODE NODE NODE X NV2 NV2 NV1 NODE",
        "NODE NV2 NODE NODE NV2 X NV1 NV1 NODE",
        "NODE NODE NV1 NODE NV2 NV1 X NV2 NODE",
        "NODE NODE NODE NV2 NV1 NV1 NV2 X NODE",
        "NODE NODE NODE NODE NODE NODE NODE NODE X",
    ]
    return from_rows(names, rows, _same(("0-19", None), names[:8]))


def l40s_4gpu() -> Topology:
    """tests/fixtures/topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"""
    names = ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    rows = [
        "X NODE SYS SYS SYS SYS",
        "NODE X SYS SYS SYS SYS",
        "SYS SYS X NODE NODE NODE",
        "SYS SYS NODE X NODE NODE",
        "SYS SYS NODE NODE X PIX",
        "SYS SYS NODE NODE PIX X",
    ]
    aff = _same(("0-95,192-287", "0"), names[:2]) | _same(("96-191,288-383", "1"), names[2:4])
    return from_rows(names, rows, aff, {"NIC0": "mlx5_0", "NIC1": "mlx5_1"})


def rtx6000ada_4gpu() -> Topology:
    """tests/fixtures/topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt"""
    names = ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3"]
    rows = [
        "X NODE SYS SYS NODE NODE SYS SYS",
        "NODE X SYS SYS NODE NODE SYS SYS",
        "SYS SYS X NODE SYS SYS NODE NODE",
        "SYS SYS NODE X SYS SYS NODE NODE",
        "NODE NODE SYS SYS X PIX SYS SYS",
        "NODE NODE SYS SYS PIX X SYS SYS",
        "SYS SYS NODE NODE SYS SYS X PIX",
        "SYS SYS NODE NODE SYS SYS PIX X",
    ]
    aff = _same(("0-31", "0"), names[:2]) | _same(("32-63", "1"), names[2:4])
    return from_rows(names, rows, aff, {f"NIC{i}": f"mlx5_{i}" for i in range(4)})


def rtx6000ada_2gpu() -> Topology:
    """tests/fixtures/topo_10_rtx6000ada-2gpu-phb-2nic-threadripper.txt"""
    names = ["GPU0", "GPU1", "NIC0", "NIC1"]
    rows = ["X PHB NODE NODE", "PHB X NODE NODE", "NODE NODE X PIX", "NODE NODE PIX X"]
    return from_rows(
        names, rows, _same(("0-23", "0"), names[:2]), {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    )


def a100_nv4_4gpu() -> Topology:
    """tests/fixtures/topo_13_polaris-a100-4gpu-nv4-2mlx5-mixed-sep-header.txt"""
    names = ["GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0", "mlx5_1"]
    rows = [
        "X NV4 NV4 NV4 SYS SYS",
        "NV4 X NV4 NV4 SYS PHB",
        "NV4 NV4 X NV4 SYS SYS",
        "NV4 NV4 NV4 X PHB SYS",
        "SYS SYS SYS PHB X SYS",
        "SYS PHB SYS SYS SYS X",
    ]
    aff = {
        "GPU0": ("24-31,56-63", "3"),
        "GPU1": ("16-23,48-55", "2"),
        "GPU2": ("8-15,40-47", "1"),
        "GPU3": ("0-7,32-39", "0"),
    }
    return from_rows(names, rows, aff)


def rtx3090_nv4_pair() -> Topology:
    """tests/fixtures/topo_17_rtx3090-2gpu-nv4-bridge-numaid-trailing-prompt.txt"""
    return from_rows(["GPU0", "GPU1"], ["X NV4", "NV4 X"], _same(("0-23", "0"), ["GPU0", "GPU1"]))


def h100_nv18_no_nic() -> Topology:
    """tests/fixtures/topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"""
    names = [f"GPU{i}" for i in range(8)]
    rows = [" ".join("X" if i == j else "NV18" for j in range(8)) for i in range(8)]
    aff = _same(("0-95,192-287", "0"), names[:4]) | _same(("96-191,288-383", "1"), names[4:])
    return from_rows(names, rows, aff)


def gtx1070_7gpu() -> Topology:
    """tests/fixtures/topo_04_gtx1070x6-1080-7gpu-pix-phb.txt"""
    names = [f"GPU{i}" for i in range(7)]
    rows = [
        "X PIX PIX PHB PHB PHB PHB",
        "PIX X PIX PHB PHB PHB PHB",
        "PIX PIX X PHB PHB PHB PHB",
        "PHB PHB PHB X PIX PIX PIX",
        "PHB PHB PHB PIX X PIX PIX",
        "PHB PHB PHB PIX PIX X PIX",
        "PHB PHB PHB PIX PIX PIX X",
    ]
    return from_rows(names, rows, _same(("0-19", None), names))


def rtx2080ti_pix_pair() -> Topology:
    """tests/fixtures/topo_32_rtx2080ti-2gpu-pix-plus-topo-p2p-status-matrix.txt"""
    return from_rows(
        ["GPU0", "GPU1"], ["X PIX", "PIX X"], _same(("24-47,72-95", "1"), ["GPU0", "GPU1"])
    )


# --- synthetic servers -------------------------------------------------------------------


def pcie_only_8gpu() -> Topology:
    """An 8-GPU PCIe box (H100 PCIe style, no NVLink): two sockets, each with two PCIe
    switches of two GPUs under one host bridge."""

    def cls(i: int, j: int) -> str:
        if i // 4 != j // 4:
            return "SYS"
        return "PIX" if i // 2 == j // 2 else "PXB"

    return from_function(8, cls, lambda i: i // 4)


def pcie_nv4_pairs_16gpu() -> Topology:
    """16 GPUs: NV4 bridges join pairs (2k, 2k+1); PCIe switches hold 4 GPUs, two switches
    per host bridge (PXB), one host bridge per socket."""

    def cls(i: int, j: int) -> str:
        if i // 2 == j // 2:
            return "NV4"
        if i // 8 != j // 8:
            return "SYS"
        return "PIX" if i // 4 == j // 4 else "PXB"

    return from_function(16, cls, lambda i: i // 8)


def nvl72() -> Topology:
    """An NVL72-style rack: 72 GPUs all NV18 through NVSwitch trays, two GPUs per CPU."""
    return from_function(72, lambda i, j: "NV18", lambda i: i // 2)


def pcie_tree(sockets: int, switches: int, per_switch: int) -> Topology:
    """PCIe GPUs only: `per_switch` under each PCIe switch (PIX), `switches` switches under
    each socket (PXB), `sockets` sockets (SYS across)."""
    socket, switch = switches * per_switch, per_switch
    return from_function(
        sockets * socket,
        lambda i, j: (
            "SYS"
            if i // socket != j // socket
            else ("PIX" if i // switch == j // switch else "PXB")
        ),
        lambda i: i // socket,
    )


def pcie_72gpu() -> Topology:
    """72 PCIe GPUs: 8 switches of 9 under 2 sockets (no such server exists; the shape of the
    largest PCIe boxes scaled up, to time and test the search on a 72-GPU tree, not to advise)."""
    return pcie_tree(2, 4, 9)


def nvswitch_16gpu() -> Topology:
    """A DGX-2 style 16-GPU NVSwitch box (NV6 everywhere), four GPUs per NUMA node."""
    return from_function(16, lambda i, j: "NV6", lambda i: i // 4)


def asymmetric_box(n: int, seed: int, nvlink_share: float) -> Topology:
    """GPUs on random sockets and PCIe switches with random NV1/NV2/NV4 bridges between about
    `nvlink_share` of the pairs: few symmetries, rings of unequal links (the same `seed` and
    share give the same box)."""
    rng = random.Random(seed)
    sock = [rng.randrange(2) for _ in range(n)]
    switch = [rng.randrange(3) for _ in range(n)]
    bridges = {
        (i, j): rng.choice(["NV1", "NV2", "NV4"])
        for i in range(n)
        for j in range(i + 1, n)
        if rng.random() < nvlink_share
    }

    def cls(i: int, j: int) -> str:
        if (i, j) in bridges:
            return bridges[(i, j)]
        if sock[i] != sock[j]:
            return "SYS"
        return "PIX" if switch[i] == switch[j] else "PXB"

    return from_function(n, cls, lambda i: sock[i])
