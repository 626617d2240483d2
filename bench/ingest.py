"""Ingest and read speed of the running service: uploads per second (new and duplicate reports)
and the p95 latency of the server-detail endpoint with 10,000 servers stored.

Starts gunicorn on its own database (`<DATABASE_URL's name>_bench`, recreated each run) with
the Redis in REDIS_URL (defaults: the services `make test` uses, Redis database 13), so it
needs both running:

    .venv/bin/python bench/ingest.py [--servers 10000 --reports 300]
    .venv/bin/python bench/ingest.py --profile 200   # in process, under cProfile, with queries
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import live_server, request  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
TOPOLOGIES = sorted(p for p in FIXTURES.glob("topo_*.txt"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=300)
    parser.add_argument("--servers", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="N",
        default=0,
        help="instead: N new and N duplicate reports in process under cProfile, top functions",
    )
    args = parser.parse_args()
    with live_server(args.workers) as base:
        from topoweb.fleet.services import create_api_token, create_collector_token

        texts = [p.read_text(encoding="utf-8") for p in TOPOLOGIES]
        if args.profile:
            profile(texts, args.profile)
            return 0
        hosts = [f"bench-{i:05d}" for i in range(args.reports)]
        tokens = {h: create_collector_token(h) for h in hosts}

        def post(host: str) -> int:
            return request(f"{base}/api/v1/reports/", tokens[host], _report(host, texts))

        for label, expect in (("new", 201), ("duplicate", 200)):
            started = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                codes = list(pool.map(post, hosts))
            elapsed = time.perf_counter() - started
            # Fixtures the topo reader refuses answer 400 every time; they are not counted.
            counted = sum(code == expect for code in codes)
            print(
                f"ingest {label:9s}: {counted / elapsed:8.1f} reports/s "
                f"({counted} of {len(codes)} answered {expect}, {args.concurrency} clients)"
            )

        stored = _seed(args.servers)
        reader = create_api_token("bench-reader")
        sample = [
            f"seed-{i:05d}" for i in range(0, args.servers, max(1, args.servers // args.reads))
        ]
        latencies = []
        for host in sample[: args.reads]:
            started = time.perf_counter()
            code = request(f"{base}/api/v1/servers/{host}/", reader)
            latencies.append(time.perf_counter() - started)
            assert code == 200, code
        p95 = statistics.quantiles(latencies, n=20)[-1] * 1000
        print(
            f"server detail: p95 {p95:6.1f} ms, median "
            f"{statistics.median(latencies) * 1000:6.1f} ms over {len(latencies)} requests "
            f"with {stored} servers stored"
        )
    return 0


def _report(host: str, texts: list[str]) -> bytes:
    """The body a collector on `host` posts: one of the fixtures' matrices, by the host's number."""
    body = {
        "hostname": host,
        "captured_at": "2026-11-29T10:00:00Z",
        "collector_version": "bench",
        "topo_text": texts[int(host[-5:]) % len(texts)],
    }
    return json.dumps(body).encode()


def profile(texts: list[str], count: int) -> None:
    """Where a report's time goes, in this process with Django's test client (full middleware
    stack, same database and Redis): `count` new reports timed, `count` more under cProfile,
    then the same again as duplicates; the queries of one of each."""
    import cProfile
    import pstats
    from typing import Any

    from django.db import connection
    from django.test import Client

    from topoweb.fleet.services import create_collector_token

    hosts = [f"prof-{i:05d}" for i in range(2 * count + 1)]
    clients = {
        h: Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {create_collector_token(h)}")
        for h in hosts
    }
    for label, expect in (("new", 201), ("duplicate", 200)):

        def call(host: str, expect: int = expect) -> None:
            response = clients[host].post(
                "/api/v1/reports/", _report(host, texts), content_type="application/json"
            )
            assert response.status_code in (expect, 400), (host, response.status_code)

        queries: list[str] = []

        def record(execute: Any, sql: str, *rest: Any, queries: list[str] = queries) -> Any:
            queries.append(sql)
            return execute(sql, *rest)

        with connection.execute_wrapper(record):
            call(hosts[0])
        started = time.perf_counter()
        for host in hosts[1 : count + 1]:
            call(host)
        each_ms = (time.perf_counter() - started) / count * 1000
        profiler = cProfile.Profile()
        profiler.enable()
        for host in hosts[count + 1 :]:
            call(host)
        profiler.disable()
        print(f"=== {label} report: {each_ms:.2f} ms per request in process (unprofiled)")
        print(f"{len(queries)} queries: " + "; ".join(" ".join(q.split())[:100] for q in queries))
        pstats.Stats(profiler).sort_stats(
            os.environ.get("BENCH_PROFILE_SORT", "tottime")
        ).print_stats(int(os.environ.get("BENCH_PROFILE_TOP", "25")))


def _seed(count: int) -> int:
    """Bulk-insert servers sharing real snapshots' data, as a large fleet of few SKUs looks."""
    from django.db import transaction

    from topoweb.fleet.models import Server, Snapshot

    template = Snapshot.objects.order_by("id").first()
    assert template is not None, "no report was ingested; cannot seed"
    with transaction.atomic():
        servers = Server.objects.bulk_create(
            [Server(hostname=f"seed-{i:05d}", sku_name="bench-sku") for i in range(count)],
            batch_size=1000,
        )
        snapshots = Snapshot.objects.bulk_create(
            [
                Snapshot(
                    server=s,
                    content_sha256=f"{i:064x}",
                    raw_text=template.raw_text,
                    document=template.document,
                    source="upload",
                    captured_at=template.captured_at,
                    topology_class=template.topology_class,
                    gpu_count=template.gpu_count,
                    nic_count=template.nic_count,
                    gpu_model=template.gpu_model,
                    has_nvlink=template.has_nvlink,
                    nvlink_summary=template.nvlink_summary,
                )
                for i, s in enumerate(servers)
            ],
            batch_size=500,
        )
        for server, snapshot in zip(servers, snapshots, strict=True):
            server.latest_snapshot = snapshot
            server.topology_class_id = template.topology_class_id
        Server.objects.bulk_update(servers, ["latest_snapshot", "topology_class"], batch_size=1000)
    return Server.objects.count()


if __name__ == "__main__":
    raise SystemExit(main())
