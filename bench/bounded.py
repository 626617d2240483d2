"""Bounded work on the largest machines (issue 15): CPU seconds of each request-path computation
(graph drawing, health check, cost model + one question, affinity, k-GPU selection) against
"under 1 s", and of a worker's whole class analysis against its soft time limit, for a 64- and
160-GPU ring (neighbours NV1, the rest SYS), an NVL72 rack, a 576-GPU NV18 domain and 8 GPUs
with 600 NICs. Prints figures, asserts nothing.

    .venv/bin/python bench/bounded.py [--cases ring-64,nvl72] [--no-analyse]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import synthetic  # noqa: E402
from topoweb.core import analysis  # noqa: E402
from topoweb.core.costs import CostModel, build_model, collective_cost  # noqa: E402
from topoweb.core.export import graph_document  # noqa: E402
from topoweb.core.formats.topo import parse  # noqa: E402
from topoweb.core.health import check_health  # noqa: E402
from topoweb.core.model import Topology  # noqa: E402
from topoweb.core.placement import ServerPool, affinity, select_job  # noqa: E402

REQUEST_S = 1.0
WORKER_S = 120.0  # analysis.run's soft_time_limit

CASES: dict[str, Callable[[], str]] = {
    "ring-64": lambda: synthetic.gpu_ring(64),
    "ring-160": lambda: synthetic.gpu_ring(160),
    "nvl72": lambda: synthetic.nvswitch_domain(72),
    "nv18-576": lambda: synthetic.nvswitch_domain(576),
    "nics-600": lambda: synthetic.many_nics(8, 600),
}


def timed(f: Callable[[], Any]) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def row(case: str, what: str, seconds: float, limit: float) -> None:
    verdict = "ok" if seconds < limit else "SLOW"
    print(f"{case:<10} {what:<34} {seconds:8.2f} s   under {limit:>5.0f} s: {verdict}")


def measure(case: str, topo: Topology, analyse: bool) -> None:
    n = len(topo.gpus)
    k = min(8, n)
    group = list(range(k))

    def fresh() -> CostModel:
        return build_model(topo, None)

    row(case, "graph drawing (worker, cached)", timed(lambda: graph_document(topo)), REQUEST_S)
    row(case, "health check", timed(lambda: check_health(topo)), REQUEST_S)
    row(case, "cost model build", timed(fresh), REQUEST_S)
    row(
        case,
        f"all_reduce on {k} GPUs, cold model",
        timed(lambda: collective_cost(fresh(), "all_reduce", group, 1 << 28)),
        REQUEST_S,
    )
    row(case, "affinity, cold model", timed(lambda: affinity(fresh())), REQUEST_S)
    for size in sorted({2, k, min(64, n)}):
        pool = {case: ServerPool(fresh(), tuple(range(n)), "rail")}
        start = time.perf_counter()
        select_job(pool, k=size)
        row(case, f"placement/select k={size}", time.perf_counter() - start, REQUEST_S)
    if analyse:
        row(case, "worker: whole analysis", timed(lambda: analysis.analyse(topo)), WORKER_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--no-analyse", action="store_true", help="request-path figures only")
    args = parser.parse_args()
    for case in args.cases.split(","):
        measure(case, parse(CASES[case]()), not args.no_analyse)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
