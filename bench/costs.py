"""How the cost model scales: time to build a CostModel (topology -> hierarchy -> model) and to
price one all_reduce over every GPU, for synthetic servers up to 576 GPUs with hundreds of NICs
(NVL-style racks and PCIe rings). Prints figures, asserts nothing.

    .venv/bin/python bench/costs.py [--sizes 72,160,288,576]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from topoweb.core.costs import build_model, collective_cost  # noqa: E402
from topoweb.core.model import Device, Link, Topology  # noqa: E402


def rack(n: int, nics_per_gpu: float = 1) -> Topology:
    """n GPUs on one NVSwitch fabric (NV18), two GPUs and their NICs per NUMA node."""
    gpus = [Device(f"GPU{i}", "gpu", i, None, str(i // 2), None, None) for i in range(n)]
    nics = [
        Device(f"NIC{k}", "nic", k, None, None, None, f"mlx5_{k}")
        for k in range(int(n * nics_per_gpu))
    ]
    devices = gpus + nics

    def cls(a: Device, b: Device) -> str:
        if a.kind == b.kind == "gpu":
            return "NV18"
        ga = a.index if a.kind == "gpu" else int(a.index / nics_per_gpu)
        gb = b.index if b.kind == "gpu" else int(b.index / nics_per_gpu)
        if ga == gb:
            return "PIX"
        return "NODE" if ga // 2 == gb // 2 else "SYS"

    links = [Link(a.id, b.id, cls(a, b)) for i, a in enumerate(devices) for b in devices[i + 1 :]]
    return Topology(tuple(devices), tuple(links))


def pcie_ring(n: int) -> Topology:
    """n PCIe GPUs, pairs under one switch, eight per NUMA node (the harden helper's case)."""
    devices = [Device(f"GPU{i}", "gpu", i, None, str(i // 8), None, None) for i in range(n)]

    def cls(i: int, j: int) -> str:
        if i // 2 == j // 2:
            return "PIX"
        return "NODE" if i // 8 == j // 8 else "SYS"

    links = [Link(f"GPU{i}", f"GPU{j}", cls(i, j)) for i in range(n) for j in range(i + 1, n)]
    return Topology(tuple(devices), tuple(links))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="72,160,288,576")
    args = parser.parse_args()
    print(f"{'topology':<34} {'devices':>8} {'build cpu s':>12} {'all_reduce cpu s':>17}")
    for n in (int(x) for x in args.sizes.split(",")):
        for name, topo, gpu in (
            (f"{n} GPU NVSwitch rack, {n} NICs", rack(n), "NVIDIA GB200"),
            (f"{n} GPU NVSwitch rack, {n // 2} NICs", rack(n, 0.5), "NVIDIA GB200"),
            (f"{n} GPU PCIe ring", pcie_ring(n), "NVIDIA L40S"),
        ):
            # CPU time of this process: the figure that does not depend on the neighbours.
            t0 = time.process_time()
            model = build_model(topo, gpu)
            t1 = time.process_time()
            collective_cost(model, "all_reduce", range(n), 1 << 30)
            t2 = time.process_time()
            print(f"{name:<34} {len(topo.devices):>8} {t1 - t0:>12.3f} {t2 - t1:>17.3f}")


if __name__ == "__main__":
    main()
