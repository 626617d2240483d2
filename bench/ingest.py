"""Ingest and read speed of the running service: uploads per second (new and duplicate reports)
and the p95 latency of the server-detail endpoint with 10,000 servers stored.

Starts gunicorn on its own database (`<DATABASE_URL's name>_bench`, recreated each run) with
the Redis in REDIS_URL (defaults: the services `make test` uses, Redis database 13), so it
needs both running:

    .venv/bin/python bench/ingest.py [--servers 10000 --reports 300]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TOPOLOGIES = sorted(p for p in FIXTURES.glob("topo_*.txt"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=300)
    parser.add_argument("--servers", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    args = parser.parse_args()
    database_url = os.environ.setdefault(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/topoweb"
    )
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    if not database_url.startswith("postgres"):
        print(
            "bench/ingest.py measures PostgreSQL: DATABASE_URL must be postgres://", file=sys.stderr
        )
        return 2
    bench_url = database_url.rstrip("/") + "_bench"
    env = {
        **os.environ,
        "DATABASE_URL": bench_url,
        "DEBUG": "0",
        "SECRET_KEY": "bench-only",
        "TOPOWEB_INGEST_RATE": "100000/min",
        "LOG_LEVEL": "WARNING",
        "STATICFILES_BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage",
    }
    _recreate_database(bench_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from topoweb.fleet.services import create_api_token, create_collector_token

    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "topoweb.config.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(args.workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base)
        texts = [p.read_text(encoding="utf-8") for p in TOPOLOGIES]
        hosts = [f"bench-{i:05d}" for i in range(args.reports)]
        tokens = {h: create_collector_token(h) for h in hosts}

        def post(host: str) -> int:
            body = {
                "hostname": host,
                "captured_at": "2026-11-29T10:00:00Z",
                "collector_version": "bench",
                "topo_text": texts[int(host[-5:]) % len(texts)],
            }
            return _request(f"{base}/api/v1/reports", tokens[host], json.dumps(body).encode())

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
            code = _request(f"{base}/api/v1/servers/{host}/", reader)
            latencies.append(time.perf_counter() - started)
            assert code == 200, code
        p95 = statistics.quantiles(latencies, n=20)[-1] * 1000
        print(
            f"server detail: p95 {p95:6.1f} ms, median "
            f"{statistics.median(latencies) * 1000:6.1f} ms over {len(latencies)} requests "
            f"with {stored} servers stored"
        )
    finally:
        server.terminate()
        server.wait(timeout=20)
        from topoweb.config.celery_app import app

        app.control.purge()  # no worker ran: drop the analyses the reports enqueued
    return 0


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


def _request(url: str, token: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _recreate_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/metrics", timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("gunicorn did not come up within 30 s")


if __name__ == "__main__":
    raise SystemExit(main())
