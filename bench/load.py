"""Mixed load on the running service for a fixed time: reads (server list, detail, graph,
affinity), questions (collective cost, GPU selection) and ingests (new and repeated collector
reports), from several client threads at once. Prints throughput, p50/p95/p99 per kind and
overall, errors, and reports lost (answered 2xx but not stored).

The fleet is seeded first, through the API: servers of the real fixtures, a 160-GPU NVLink
ring (neighbours NV1, the rest SYS) and a DGX A100 class whose six servers carry 36 large
nccl-tests outputs (900 rows each); the load starts once the worker has drawn their graphs.
Starts gunicorn with 2 workers on its own database (`<DATABASE_URL's name>_bench`, recreated)
and the Redis in REDIS_URL:

    .venv/bin/python bench/load.py [--seconds 30 --clients 8 --workers 2 --port 18190]

The load runs twice with a Celery worker beside the web (both queues): on the clean fleet,
then after poisoned hosts joined it (issue 24's cases, each uploaded first: a host whose GPU
count changes between snapshots, a host claiming another SKU's product name, an NCCL XML of
256 GPUs x 18 NVLinks, and the values ingest must refuse). Both runs are printed, with the
ratio of their p95; the script fails on any error or lost report in either run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import live_server, request  # noqa: E402
from tests import synthetic  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
A100 = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
FLEET = [
    "topo_01_h200-8gpu-12nic-numaid.txt",
    "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt",
    "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt",
    "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt",
]
# (kind, weight): what a scheduler, a dashboard and a fleet of collectors send together.
MIX = [("read", 5), ("query", 3), ("ingest", 2)]


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def report(hostname: str, topo: str, **extra: object) -> bytes:
    body = {
        "hostname": hostname,
        "captured_at": "2026-11-29T10:00:00Z",
        "collector_version": "bench",
        "topo_text": topo,
        **extra,
    }
    return json.dumps(body).encode()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def celery_worker() -> Iterator[None]:
    """The Celery workers on the live server's database and Redis, one per queue as
    docker-compose.yml runs them (`analysis`: class analyses, a large one takes many seconds;
    `default`: health evaluations, which draw the graphs, and the rest): the work the ingests
    ask for runs beside the load, and an evaluation never waits behind an analysis. In
    production the workers have their own containers; sharing this machine's cores with the
    web, they run at a lower CPU priority (nice 10), as a host running all would start them."""
    workers = []
    for queue in ("analysis", "default"):
        command = ["nice", "-n", "10", sys.executable, "-m", "celery", "-A"]
        command += ["topoweb.config.celery_app:app", "worker", "-n", f"{queue}@%h"]
        command += ["-Q", queue, "--concurrency", "1", "--loglevel", "WARNING"]
        workers.append(subprocess.Popen(command, cwd=ROOT, env=dict(os.environ)))
    try:
        yield
    finally:
        # SIGTERM is Celery's warm shutdown: it finishes the task at hand, and a class analysis
        # can run for minutes. What is left after the load is not measured: killed past 10 s.
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def poison(base: str) -> list[str]:
    """Issue 24's hostile cases, uploaded before the second run: the hosts now in the fleet.
    The values ingest must refuse are sent too, and must be answered 400 or 413."""
    from topoweb.fleet.access import create_collector_token

    h200 = text(FLEET[0])
    accepted = [
        ("poison-grows", synthetic.nvswitch_domain(8), {}),
        ("poison-grows", synthetic.nvswitch_domain(45), {"captured_at": "2026-11-29T11:00:00Z"}),
        ("poison-sku", synthetic.nvswitch_domain(45), {"host": {"product_name": "bench H200"}}),
        ("poison-sku-ref", h200, {"host": {"product_name": "bench H200"}}),
        ("poison-xml", synthetic.nccl_xml(256, nvlinks=18), {}),
    ]
    refused = [
        h200.replace("0-55,112-167", "0-999999999999"),
        h200.replace("NIC0: mlx5_0", "NIC0: <mlx5_0>"),
        synthetic.nccl_xml(2000, nvlinks=0),
    ]
    hosts = []
    for host, topo, extra in accepted:
        code = request(
            f"{base}/api/v1/reports", create_collector_token(host), report(host, topo, **extra)
        )
        assert code == 201, (host, code)
        hosts.append(host)
    for n, topo in enumerate(refused):
        host = f"poison-refused-{n}"
        code = request(f"{base}/api/v1/reports", create_collector_token(host), report(host, topo))
        assert code in (400, 413), (host, code)
    memory = {"gpus": [{"index": 0, "memory_total_bytes": 2**80}]}
    code = request(
        f"{base}/api/v1/reports",
        create_collector_token("poison-memory"),
        report("poison-memory", h200, nvml=memory),
    )
    assert code == 400, code
    return sorted(set(hosts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per run")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--large-benchmarks", type=int, default=36)
    args = parser.parse_args()
    rates = {"TOPOWEB_INGEST_RATE": "1000000/min", "TOPOWEB_QUERY_RATE": "1000000/min"}
    with live_server(args.workers, args.port, **rates) as base, celery_worker():
        from django.db import connection

        from topoweb.fleet.access import create_api_token, create_collector_token
        from topoweb.fleet.models import Snapshot

        reader = create_api_token("bench-load")
        started = time.perf_counter()
        # --- the fleet -------------------------------------------------------------------
        seeded: list[str] = []
        for i, name in enumerate(FLEET * 3):
            host = f"fleet-{i:02d}"
            code = request(
                f"{base}/api/v1/reports", create_collector_token(host), report(host, text(name))
            )
            assert code == 201, (host, code)
            seeded.append(host)
        ring = "ring-160"
        code = request(
            f"{base}/api/v1/reports",
            create_collector_token(ring),
            report(ring, synthetic.gpu_ring(160)),
        )
        assert code == 201, code
        large = synthetic.long_nccl(900)
        a100_hosts = [f"a100-{i:02d}" for i in range(6)]
        per_host = max(1, args.large_benchmarks // len(a100_hosts))
        for n, host in enumerate(a100_hosts):
            # Each run differs by a comment line, so each is stored on its own.
            runs = [
                {"kind": "nccl-tests", "text": f"# run {n}-{k}\n" + large} for k in range(per_host)
            ]
            body = report(host, text(A100), benchmarks=runs)
            code = request(f"{base}/api/v1/reports", create_collector_token(host), body)
            assert code == 201, (host, code)
        # The worker draws a server's graph after its report (the 160-GPU ring's takes it a
        # moment; until then its graph answers 409, "ask again"): the load starts once every
        # seeded server's graph is drawn, as a fleet's reads come long after its reports.
        settle_until = time.monotonic() + 120
        for host in [*seeded, ring, *a100_hosts]:
            graph = f"{base}/api/v1/servers/{host}/graph/"
            while request(graph, reader) == 409 and time.monotonic() < settle_until:
                time.sleep(0.2)
        print(
            f"seeded {len(seeded) + 1 + len(a100_hosts)} servers, "
            f"{per_host * len(a100_hosts)} large benchmarks "
            f"in {time.perf_counter() - started:.1f} s (graphs drawn)"
        )

        def run_load(label: str) -> tuple[float, int, int]:
            # --- the load ----------------------------------------------------------------------
            new_hosts = iter(f"load-{label}-{i:05d}" for i in itertools.count())
            tokens_lock = threading.Lock()
            ingested: list[tuple[str, int]] = []
            everyone = seeded + [ring] + a100_hosts

            def read(rng: random.Random) -> tuple[int, str]:
                host = rng.choice(everyone)
                what, path = rng.choice(
                    [
                        ("list", "servers/"),
                        ("detail", f"servers/{host}/"),
                        ("graph", f"servers/{host}/graph/"),
                        ("affinity", f"servers/{host}/affinity"),
                    ]
                )
                return request(f"{base}/api/v1/{path}", reader), what

            def query(rng: random.Random) -> tuple[int, str]:
                if rng.random() < 0.5:
                    host = rng.choice(a100_hosts)
                    body = {"collective": "all_reduce", "gpus": list(range(8)), "bytes": 1 << 28}
                    url = f"{base}/api/v1/servers/{host}/cost"
                    return request(url, reader, json.dumps(body).encode()), "cost"
                names = rng.sample(seeded + a100_hosts, 3) + [ring]
                body = {"k": 4, "servers": [{"hostname": h} for h in names]}
                url = f"{base}/api/v1/placement/select"
                return request(url, reader, json.dumps(body).encode()), "select"

            def ingest(rng: random.Random) -> tuple[int, str]:
                with tokens_lock:
                    repeat = ingested and rng.random() < 0.3
                    host = rng.choice(ingested)[0] if repeat else next(new_hosts)
                token = create_collector_token(host) if not repeat else tokens[host]
                tokens[host] = token
                code = request(
                    f"{base}/api/v1/reports", token, report(host, text(rng.choice(FLEET)))
                )
                with tokens_lock:
                    ingested.append((host, code))
                return code, "repeat" if repeat else "new"

            tokens: dict[str, str] = {}
            calls = {"read": read, "query": query, "ingest": ingest}
            kinds = [kind for kind, weight in MIX for _ in range(weight)]
            latencies: dict[str, list[float]] = defaultdict(list)
            by_what: dict[str, list[float]] = defaultdict(list)
            errors: dict[str, int] = defaultdict(int)
            deadline = time.monotonic() + args.seconds

            def client(seed: int) -> None:
                rng = random.Random(seed)
                while time.monotonic() < deadline:
                    kind = rng.choice(kinds)
                    t0 = time.perf_counter()
                    try:
                        code, what = calls[kind](rng)
                    except Exception:  # a dropped connection counts as an error
                        code, what = 0, "?"
                    latencies[kind].append(time.perf_counter() - t0)
                    by_what[f"{kind} {what}"].append(time.perf_counter() - t0)
                    if not 200 <= code < 300:
                        errors[kind] += 1

            load_started = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(client, range(args.clients)))
            elapsed = time.perf_counter() - load_started

            connection.close()
            accepted = {host for host, code in ingested if 200 <= code < 300}
            stored = set(
                Snapshot.objects.filter(server__hostname__in=accepted).values_list(
                    "server__hostname", flat=True
                )
            )
            lost = len(accepted - stored)
            everything = [v for values in latencies.values() for v in values]
            print(
                f"{label}: {args.seconds:.0f} s of mixed load, {args.clients} clients, "
                f"{args.workers} gunicorn workers, a Celery worker per queue"
            )
            print(
                f"{'kind':<8} {'requests':>9} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} "
                f"{'p99 ms':>8} {'errors':>7}"
            )
            for kind in [k for k, _ in MIX] + ["all"]:
                values = everything if kind == "all" else latencies[kind]
                errs = sum(errors.values()) if kind == "all" else errors[kind]
                print(
                    f"{kind:<8} {len(values):>9} {len(values) / elapsed:>7.1f} "
                    f"{percentile(values, 0.5) * 1000:>8.0f} "
                    f"{percentile(values, 0.95) * 1000:>8.0f} "
                    f"{percentile(values, 0.99) * 1000:>8.0f} {errs:>7}"
                )
            for what, values in sorted(by_what.items()):
                print(
                    f"  {what:<16} {len(values):>6} p50 {percentile(values, 0.5) * 1000:>6.0f} ms "
                    f"p95 {percentile(values, 0.95) * 1000:>6.0f} ms"
                )
            print(f"reports accepted: {len(accepted)} hosts; reports lost: {lost}")
            print(f"mean latency {statistics.mean(everything) * 1000:.0f} ms" if everything else "")
            return percentile(everything, 0.95), sum(errors.values()), lost

        clean = run_load("clean")
        # The second run starts from the same fleet as the first, but for the poisoned hosts:
        # the servers the first run's ingests made go (their count would slow the list).
        # Deleted as the service deletes servers, while the workers may still be evaluating
        # them (fleet.changes.delete_servers).
        from topoweb.fleet.changes import delete_servers
        from topoweb.fleet.models import Server

        made = Server.objects.filter(hostname__startswith="load-clean-")
        delete_servers(made.values_list("pk", flat=True))
        connection.close()
        poisoned_hosts = poison(base)
        print(f"poisoned hosts in the fleet: {', '.join(poisoned_hosts)}")
        dirty = run_load("poisoned")
        print(
            f"p95 clean {clean[0] * 1000:.0f} ms, poisoned {dirty[0] * 1000:.0f} ms "
            f"({dirty[0] / clean[0]:.2f}x); errors {clean[1]} / {dirty[1]}, "
            f"lost reports {clean[2]} / {dirty[2]}"
        )
        return 1 if clean[1] or clean[2] or dirty[1] or dirty[2] else 0


if __name__ == "__main__":
    raise SystemExit(main())
