"""Ingest of the largest accepted reports through the running service: a 576-GPU NVLink domain
and an 8-GPU server with 600 NICs (issue 24: each answers its upload in under 2 s), plus the
NCCL XML of 256 GPUs x 18 NVLinks. Each is sent three times (new content each time: the
host's kernel differs), the first to a new host. Prints each answer's time and status.

    .venv/bin/python bench/ingest_large.py [--workers 2 --port 18191 --profile]

With --profile, one 576-GPU ingest runs in this process under cProfile instead (no server),
and the functions that took the most time are printed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import live_server, request  # noqa: E402
from tests import synthetic  # noqa: E402

TARGET_S = 2.0
CASES = {
    "576 GPUs (topo -m)": lambda: synthetic.nvswitch_domain(576),
    "8 GPUs x 600 NICs (topo -m)": lambda: synthetic.many_nics(8, 600),
    "256 GPUs x 18 NVLinks (XML)": lambda: synthetic.nccl_xml(256, nvlinks=18),
}


def body(host: str, topo: str, n: int) -> bytes:
    return json.dumps(
        {
            "hostname": host,
            "captured_at": f"2026-11-29T10:{n:02d}:00Z",
            "topo_text": topo,
            "host": {"kernel": f"6.8.0-{n}"},
        }
    ).encode()


def profile() -> None:
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")
    with live_server(1):
        from django.utils import timezone

        from topoweb.fleet.models import Source
        from topoweb.fleet.services import ingest_report

        topo = synthetic.nvswitch_domain(576)
        profiler = cProfile.Profile()
        profiler.enable()
        ingest_report(
            hostname="profiled", topo_text=topo, captured_at=timezone.now(), source=Source.COLLECTOR
        )
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.profile:
        profile()
        return 0
    rates = {"TOPOWEB_INGEST_RATE": "1000000/min"}
    over = 0
    with live_server(args.workers, args.port, **rates) as base:
        from topoweb.fleet.access import create_collector_token

        print(f"{'report':<30} {'bytes':>9} {'first s':>8} {'then s':>14} {'status':>7}")
        for k, (label, make) in enumerate(CASES.items()):
            topo = make()
            host = f"large-{k}"
            token = create_collector_token(host)
            times, codes = [], []
            for n in range(3):
                started = time.perf_counter()
                codes.append(request(f"{base}/api/v1/reports", token, body(host, topo, n)))
                times.append(time.perf_counter() - started)
            over += sum(t > TARGET_S for t in times)
            then = " ".join(f"{t:.2f}" for t in times[1:])
            print(
                f"{label:<30} {len(topo):>9} {times[0]:>8.2f} {then:>14} "
                f"{'/'.join(map(str, sorted(set(codes)))):>7}"
            )
            print(f"{'':<30} median {statistics.median(times):.2f} s (target {TARGET_S:.0f} s)")
    print(f"answers over {TARGET_S:.0f} s: {over}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
