"""Scheduler queries against the framework's limit: req/s and latency of topoweb's hot read
endpoints beside a bare DRF APIView (bench/bare_drf.py), both under gunicorn with the same
settings (sync workers, DEBUG off, PostgreSQL), driven by the same client (wrk) in one run.

topoweb runs on its own database (`<DATABASE_URL's name>_bench<TOPOWEB_TEST_DB_SUFFIX>`,
recreated) loaded with the demo fleet, and is read with an API token as a scheduler would. The
bare app is measured before and after the endpoints; each ratio is against their mean.

    apt-get install -y wrk
    .venv/bin/python bench/query.py [--duration 5 --connections 16 --workers 2]

Ports: BENCH_PORT (topoweb) and BENCH_PORT + 1 (bare app) when set, else free ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import _free_port, gunicorn, live_server, lua_string  # noqa: E402
from bench.live import wrk as run_wrk  # noqa: E402

HOST = "hgx-h200-a01"  # the demo fleet's 8-GPU + 12-NIC H200 (tests/fixtures/topo_01)
# (label, method, path, body): the questions a scheduler asks.
SELECT = {"k": 4, "servers": [{"hostname": HOST}]}
PLACE = {"tp": 4, "pp": 2, "dp": 1}
LIST = "/api/v1/servers/?gpu_count=8&has_nvlink=true&no_critical=1"
QUERIES = (
    ("server list (filtered)", "GET", LIST, None),
    ("server detail", "GET", f"/api/v1/servers/{HOST}/", None),
    ("select k=4, one server", "POST", "/api/v1/placement/select/", SELECT),
    ("placement TP4 PP2", "POST", f"/api/v1/servers/{HOST}/placement/", PLACE),
)
TARGET_RATIO = 0.25  # of the bare endpoint's req/s, same run (issue 23)
TARGET_P95_TIMES = 4.0  # p95 within this many times the bare endpoint's p95, same run

# wrk's Lua side: the request, and a summary line this script reads back.
LUA = """
wrk.method = {method}
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = {authorization}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK {{\\"requests\\": %d, \\"duration_us\\": %d, \\"errors\\": %d, \\"bad_status\\": %d, "
    .. "\\"p50\\": %d, \\"p95\\": %d, \\"p99\\": %d}}\\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class Result:
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    failed: int


def drive(url: str, method: str, body: object, token: str, args: argparse.Namespace) -> Result:
    """wrk against one URL: a short warm-up, then the measured run."""
    script = LUA.format(
        method=lua_string(method),
        body=lua_string(json.dumps(body)) if body is not None else "nil",
        authorization=lua_string(f"Bearer {token}"),
    )
    run_wrk(url, script, args.warmup, args.threads, args.connections)
    s = run_wrk(url, script, args.duration, args.threads, args.connections)
    return Result(
        rps=s["requests"] / (s["duration_us"] / 1e6),
        p50_ms=s["p50"] / 1000,
        p95_ms=s["p95"] / 1000,
        p99_ms=s["p99"] / 1000,
        failed=s["errors"] + s["bad_status"],
    )


def check(url: str, method: str, body: object, token: str) -> None:
    """One request first: the bench measures answers, not errors."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200, (url, response.status)
        response.read()


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process on this machine (its PostgreSQL backend)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(token: str, count: int) -> None:
    """Where a request's time goes, in this process with Django's test client (full
    middleware stack, same database), after one warm-up request per endpoint."""
    import cProfile
    import pstats
    import time

    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    for label, method, path, body in QUERIES:

        def call(method: str = method, path: str = path, body: object = body) -> None:
            if method == "GET":
                response = client.get(path)
            else:
                response = client.post(path, json.dumps(body), content_type="application/json")
            assert response.status_code == 200, (path, response.status_code)

        queries: list[str] = []

        def record(execute: Any, sql: str, *rest: Any, queries: list[str] = queries) -> Any:
            queries.append(sql)
            return execute(sql, *rest)

        with connection.execute_wrapper(record):
            call()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        started, cpu, db_cpu = time.perf_counter(), time.process_time(), _cpu_seconds(backend)
        for _ in range(count):
            call()
        each_ms = (time.perf_counter() - started) / count * 1000
        cpu_ms = (time.process_time() - cpu) / count * 1000
        db_cpu_ms = (_cpu_seconds(backend) - db_cpu) / count * 1000
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(count):
            call()
        profiler.disable()
        print(f"=== {label}: {each_ms:.2f} ms per request in process (unprofiled)")
        # CPU time moves less than wall time when other programs share the machine.
        print(
            f"CPU per request: {cpu_ms:.2f} ms here, {db_cpu_ms:.2f} ms in its PostgreSQL backend"
        )
        print(f"{len(queries)} queries: " + "; ".join(sql[:150] for sql in queries))
        pstats.Stats(profiler).sort_stats(
            os.environ.get("BENCH_PROFILE_SORT", "tottime")
        ).print_stats(int(os.environ.get("BENCH_PROFILE_TOP", "12")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of warm-up per run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn sync workers")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="N",
        default=0,
        help="instead: N in-process requests per endpoint under cProfile, top functions",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print(
            "bench/query.py needs wrk, the HTTP load generator: apt-get install -y wrk",
            file=sys.stderr,
        )
        return 2
    port = int(os.environ.get("BENCH_PORT", "0")) or None
    with live_server(args.workers, port) as base:
        from django.core.management import call_command

        from topoweb.config.celery_app import app
        from topoweb.fleet.access import create_api_token

        # The demo fleet as a running site has it: analyses and health checks done (in this
        # process, as a worker would), so that filters such as no_critical match servers.
        app.conf.task_always_eager = True
        call_command("load_demo", stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
        token = create_api_token("bench-scheduler")
        if args.profile:
            profile(token, args.profile)
            return 0
        bare_port = port + 1 if port else _free_port()
        bare = f"http://127.0.0.1:{bare_port}/bare"
        env = dict(os.environ)
        with gunicorn("bench.bare_drf:application", bare_port, args.workers, env, bare):
            for _, method, path, body in QUERIES:
                check(base + path, method, body, token)
            baseline = [drive(bare, "GET", None, token, args)]
            results = [
                (label, drive(base + path, m, b, token, args)) for label, m, path, b in QUERIES
            ]
            baseline.append(drive(bare, "GET", None, token, args))
    bare_rps = sum(r.rps for r in baseline) / len(baseline)
    bare_p95 = sum(r.p95_ms for r in baseline) / len(baseline)
    print(
        f"{args.connections} clients, {args.workers} gunicorn sync workers, "
        f"{args.duration} s per run (wrk)"
    )
    print(
        f"{'endpoint':<26} {'req/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'of bare':>8} "
        f"{'p95/bare':>8}"
    )
    for n, b in enumerate(baseline):
        print(
            f"{'bare DRF APIView ' + ('before' if n == 0 else 'after'):<26} {b.rps:8.0f} "
            f"{b.p50_ms:7.1f} {b.p95_ms:7.1f} {b.p99_ms:7.1f} {'':>8}"
        )
    for label, r in results:
        ratio = r.rps / bare_rps
        ok = ratio >= TARGET_RATIO and r.p95_ms <= TARGET_P95_TIMES * bare_p95 and not r.failed
        note = "" if not r.failed else f"  {r.failed} failed"
        print(
            f"{label:<26} {r.rps:8.0f} {r.p50_ms:7.1f} {r.p95_ms:7.1f} {r.p99_ms:7.1f} "
            f"{ratio:8.0%} {r.p95_ms / bare_p95:7.1f}x {'ok' if ok else 'MISSED'}{note}"
        )
    print(
        f"targets: >= {TARGET_RATIO:.0%} of the bare endpoint's req/s, p95 within "
        f"{TARGET_P95_TIMES:g}x its p95 (both from this run)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
