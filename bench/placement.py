"""Latency of the placement search: p50/p95 over repeated runs for 8-, 16- and 72-GPU
servers (synthetic topologies from tests/core/topologies.py). Prints figures, asserts nothing.

`bench_core()` returns the rows; the service's HTTP benchmark (p50/p95 of the REST endpoints
under concurrent load) is meant to be added next to it as `bench_http()`."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.core import topologies as T  # noqa: E402
from topoweb.core.costs import build_model  # noqa: E402
from topoweb.core.ledger import Layout  # noqa: E402
from topoweb.core.placement import place  # noqa: E402

CASES: list[tuple[str, Callable[[], object], str | None, Layout]] = [
    ("8 GPU DGX-1 mesh, TP4 PP2", T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(4, 2, 1)),
    ("8 GPU PCIe box, TP2 DP4", T.pcie_only_8gpu, "NVIDIA H100 PCIe", Layout(2, 1, 4)),
    ("16 GPU PCIe + NV4 pairs, TP2 PP2 DP4", T.pcie_nv4_pairs_16gpu, None, Layout(2, 2, 4)),
    ("16 GPU NVSwitch (NV6), TP8 DP2", T.nvswitch_16gpu, "Tesla V100-SXM3-32GB",
     Layout(8, 1, 2)),
    ("72 GPU NVL72, TP8 PP9", T.nvl72, "NVIDIA GB200", Layout(8, 9, 1)),
]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bench_core(repeats: int = 7) -> list[tuple[str, float, float]]:
    rows = []
    for name, build, gpu, layout in CASES:
        times = []
        for _ in range(repeats):
            model = build_model(build(), gpu)  # type: ignore[arg-type]  # a fresh model: no warm caches
            start = time.perf_counter()
            place(model, layout)
            times.append((time.perf_counter() - start) * 1e3)
        rows.append((name, statistics.median(times), _percentile(times, 0.95)))
    return rows


def main() -> None:
    print("placement search (core, cold model per run)")
    print(f"{'case':44} {'p50 ms':>8} {'p95 ms':>8}")
    for name, p50, p95 in bench_core():
        print(f"{name:44} {p50:8.1f} {p95:8.1f}")


if __name__ == "__main__":
    main()
