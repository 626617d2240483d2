"""Latency of the placement search: p50/p95 over repeated runs for 8-, 16- and 72-GPU
servers (synthetic topologies from tests/core/topologies.py), and of the REST endpoints (cost,
placement, select, affinity) under concurrent load on a live gunicorn over loopback (see
bench/live.py: its own PostgreSQL database, REDIS_URL for the broker). Prints figures,
asserts nothing.

    .venv/bin/python bench/placement.py [--core-only] [--requests 200 --concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.live import live_server, request  # noqa: E402
from tests.core import topologies as T  # noqa: E402
from topoweb.core.costs import build_model  # noqa: E402
from topoweb.core.ledger import PRESETS, Layout  # noqa: E402
from topoweb.core.placement import place, recommend  # noqa: E402
from topoweb.core.steptime import gpu_spec  # noqa: E402

CASES: list[tuple[str, Callable[[], object], str | None, Layout]] = [
    ("8 GPU NVSwitch H200, TP2 PP2 DP2", T.h200_nv18_12nic, "NVIDIA H200", Layout(2, 2, 2)),
    ("8 GPU DGX-1 mesh, TP4 PP2", T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(4, 2, 1)),
    ("8 GPU DGX-1 mesh, TP2 PP2 DP2", T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(2, 2, 2)),
    ("8 GPU PCIe box, TP2 DP4", T.pcie_only_8gpu, "NVIDIA H100 PCIe", Layout(2, 1, 4)),
    ("16 GPU PCIe + NV4 pairs, TP2 PP2 DP4", T.pcie_nv4_pairs_16gpu, None, Layout(2, 2, 4)),
    ("16 GPU NVSwitch (NV6), TP8 DP2", T.nvswitch_16gpu, "Tesla V100-SXM3-32GB", Layout(8, 1, 2)),
    ("72 GPU NVL72, TP8 PP9", T.nvl72, "NVIDIA GB200", Layout(8, 9, 1)),
    ("72 GPU PCIe (synthetic), TP2 PP4 DP9", T.pcie_72gpu, "NVIDIA L40S", Layout(2, 4, 9)),
]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# Issue 11's targets for an exact search, cold (ms), by GPU count.
TARGET_MS = {8: 5.0, 16: 50.0, 72: 500.0}


def bench_core(repeats: int = 7) -> list[tuple[str, float, float, float, str, int]]:
    """Per case: cold p50/p95 (a fresh cost model and no cached structures: the first question
    about a topology class) and warm p50 (the class's model asked again, as the API does)."""
    rows = []
    for name, build, gpu, layout in CASES:
        times, search, count = [], "", 0
        spec = gpu_spec(gpu, None)
        for _ in range(repeats):
            model = build_model(build(), gpu)  # type: ignore[arg-type]  # a fresh model: no warm caches
            count = len(model.gpu_ids)
            start = time.perf_counter()
            search = place(model, layout, spec=spec).search
            times.append((time.perf_counter() - start) * 1e3)
        warm = []
        for _ in range(repeats):
            start = time.perf_counter()
            place(model, layout, spec=spec)
            warm.append((time.perf_counter() - start) * 1e3)
        rows.append(
            (
                name,
                statistics.median(times),
                _percentile(times, 0.95),
                statistics.median(warm),
                search,
                count,
            )
        )
    return rows


def bench_recommend() -> list[tuple[str, str, float, float, str]]:
    """Every layout of each preset ranked (what the analysis stores per class): cold, warm."""
    rows = []
    for name, build, gpu in (
        ("8 GPU NVSwitch H200", T.h200_nv18_12nic, "NVIDIA H200"),
        ("8 GPU DGX-1 mesh", T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB"),
        ("8 GPU PCIe box", T.pcie_only_8gpu, "NVIDIA H100 PCIe"),
    ):
        spec = gpu_spec(gpu, None)
        for key, shape in PRESETS.items():
            model = build_model(build(), gpu)
            start = time.perf_counter()
            rec = recommend(model, shape, spec=spec)
            cold = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            recommend(model, shape, spec=spec)
            warm = (time.perf_counter() - start) * 1e3
            best = rec.best
            answer = (
                f"TP{best.layout.tp} PP{best.layout.pp} DP{best.layout.dp} EP{best.layout.ep}"
                if best
                else "fits no layout"
            )
            rows.append((name, key, cold, warm, answer))
    return rows


HTTP_SERVERS = (
    ("h200-bench", "topo_01_h200-8gpu-12nic-numaid.txt", "NVIDIA H200"),
    ("dgx1-bench", "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt", "Tesla V100-SXM2-32GB"),
    ("l40s-bench", "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt", "NVIDIA L40S"),
)
HTTP_QUERIES: list[tuple[str, str, dict[str, object] | None]] = [
    (
        "cost",
        "/api/v1/servers/h200-bench/cost",
        {"collective": "all_reduce", "gpus": [0, 1, 2, 3], "bytes": 1 << 28},
    ),
    ("placement", "/api/v1/servers/dgx1-bench/placement", {"tp": 4, "pp": 2, "dp": 1}),
    (
        "select",
        "/api/v1/placement/select",
        {"k": 2, "servers": [{"hostname": "l40s-bench"}, {"hostname": "h200-bench"}]},
    ),
    ("affinity", "/api/v1/servers/h200-bench/affinity", None),
]


def bench_http(
    requests: int = 200, concurrency: int = 8, workers: int = 2
) -> list[tuple[str, float, float, int]]:
    """p50/p95 (ms) and the count of non-200 answers of each query, `requests` per endpoint
    sent by `concurrency` threads against a live server with three real fixtures ingested."""
    rows = []
    with live_server(workers) as base:
        from django.utils import timezone

        from topoweb.fleet.access import create_api_token
        from topoweb.fleet.models import Source
        from topoweb.fleet.services import ingest_report

        fixtures = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
        for host, name, gpu in HTTP_SERVERS:
            ingest_report(
                hostname=host,
                topo_text=(fixtures / name).read_text(),
                captured_at=timezone.now(),
                source=Source.COLLECTOR,
                gpu_model_hint=gpu,
            )
        token = create_api_token("bench-scheduler")
        for label, path, body in HTTP_QUERIES:
            data = json.dumps(body).encode() if body is not None else None

            def one(_: int, path: str = path, data: bytes | None = data) -> tuple[float, int]:
                start = time.perf_counter()
                code = request(base + path, token, data)
                return (time.perf_counter() - start) * 1e3, code

            for _ in range(concurrency * workers):  # warm every worker's model cache
                one(0)
            with ThreadPoolExecutor(concurrency) as pool:
                results = list(pool.map(one, range(requests)))
            times = [t for t, _ in results]
            rows.append(
                (
                    label,
                    statistics.median(times),
                    _percentile(times, 0.95),
                    sum(code != 200 for _, code in results),
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core-only", action="store_true")
    parser.add_argument("--requests", type=int, default=200, help="per endpoint")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    args = parser.parse_args()
    print("placement search by predicted step time (core; cold: fresh model, warm: asked again)")
    print(
        f"{'case':40} {'cold p50':>9} {'cold p95':>9} {'warm p50':>9} {'target':>7} "
        f"{'met':>4}  search"
    )
    for name, p50, p95, warm, search, count in bench_core():
        target = TARGET_MS.get(count, 0.0)
        met = "yes" if search.startswith("exact") and p50 < target else "no"
        print(f"{name:40} {p50:9.1f} {p95:9.1f} {warm:9.2f} {target:7.0f} {met:>4}  {search}")
    print("\nevery layout of a preset ranked, ms (the analysis does this per class and preset)")
    print(f"{'server':22} {'preset':14} {'cold':>8} {'warm':>8}  recommended")
    for name, key, cold, warm, answer in bench_recommend():
        print(f"{name:22} {key:14} {cold:8.1f} {warm:8.1f}  {answer}")
    if args.core_only:
        return
    rows = bench_http(args.requests, args.concurrency, args.workers)
    print(
        f"\nREST endpoints ({args.requests} requests each, {args.concurrency} threads, "
        f"{args.workers} gunicorn workers, loopback, warm model cache)"
    )
    print(f"{'endpoint':44} {'p50 ms':>8} {'p95 ms':>8} {'non-200':>8}")
    for label, p50, p95, bad in rows:
        print(f"{label:44} {p50:8.1f} {p95:8.1f} {bad:8d}")


if __name__ == "__main__":
    main()
