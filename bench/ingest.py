"""Ingest and read speed of the running service: uploads per second (new and duplicate reports,
driven by wrk) beside a bare DRF endpoint's POST, the p95 latency of the server detail and of
the fleet page's list (pages under each sort key) with 10,000 servers stored, and a scheduler's
k-GPU selection over 1,000 of them and over all of them.

Starts gunicorn on its own database (`<DATABASE_URL's name>_bench<TOPOWEB_TEST_DB_SUFFIX>`,
recreated each run) with the Redis in REDIS_URL (defaults: the services `make test` uses, Redis
database 13), so it needs both running, and wrk (`apt-get install -y wrk`):

    .venv/bin/python bench/ingest.py --workers 2 [--duration 5 --connections 8 --servers 10000]
    .venv/bin/python bench/ingest.py --profile 200   # in process, under cProfile, with queries

Every request's body is built by wrk's Lua side from a few fixture matrices, each host with its
own collector token, so that the client costs the server's 2 cores little and no Python runs on
the client side while a figure is measured. Three kinds of report, each for a fixed duration:

- new, changed facts: a known host reports a changed `host` (its kernel), which the content
  hash covers: a new snapshot of an existing server, as a fleet's upgrades produce;
- new, first report: a host never seen, with its own token (created beforehand);
- duplicate: a known host reports what it reported before, as most of a fleet's reports are.

201 and 200 answers are counted apart (a new-report run that ran out of fresh hosts answers
200 for the rest; any other status is reported as failed). The three kinds run in rounds
(`--rounds`, 3 by default) with the bare app measured before the first and after each: a
kind's ratio in a round is against the mean of the bare runs on either side, and the figure
judged is the median round's (the machine's drift moves single runs by a third). Ports:
BENCH_PORT (topoweb) and BENCH_PORT + 1 (the bare app) when set, else free ones.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import _free_port, gunicorn, live_server, lua_string, request  # noqa: E402
from bench.live import wrk as run_wrk  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
TOPOLOGIES = sorted(p for p in FIXTURES.glob("topo_*.txt"))
CAPTURED_AT = "2026-11-29T10:00:00Z"
# Of a bare DRF POST's rate in the same run (issue 23): absolute rates follow the machine.
TARGET_NEW = 0.10
TARGET_DUPLICATE = 0.35
TARGET_READ_P95_MS = 100.0  # server detail and the fleet page's list, 10,000 servers stored

# wrk's Lua side. Thread k of n sends requests k, k + n, k + 2n, ...; request i goes to host
# h = i mod COUNT (its token is Hosts' key: TAG h "." SALT hostname), with the host's fixture
# matrix, and for changed facts a kernel no earlier request named. `done` sums the threads'
# answer counts.
LUA = r"""
local TEXTS = {texts}
local MODE, PREFIX, TAG, COUNT, SALT = {mode}, {prefix}, {tag}, {count}, {salt}
local RUN, NTHREADS = {run}, {threads}
local threads, started = {{}}, 0
function setup(thread)
  thread:set("id", started)
  started = started + 1
  table.insert(threads, thread)
end
function init(args)
  created, same, other, nxt = 0, 0, 0, id
end
function request()
  local i = nxt
  nxt = nxt + NTHREADS
  local h = i % COUNT
  local host = string.format("%s%05d", PREFIX, h)
  local key = string.format("%s%07d", TAG, h) .. "." .. SALT .. host
  local body = '{{"hostname":"' .. host .. '","captured_at":"{captured_at}",'
    .. '"collector_version":"bench","topo_text":' .. TEXTS[h % #TEXTS + 1]
  if MODE == "changed" then
    body = body .. ',"host":{{"kernel":"' .. RUN .. "-" .. i .. '"}}'
  end
  return wrk.format("POST", "/api/v1/reports/",
    {{["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}},
    body .. "}}")
end
function response(status, headers, body)
  if status == 201 then created = created + 1
  elseif status == 200 then same = same + 1
  else other = other + 1 end
end
function done(summary, latency, requests)
  local c, s, o = 0, 0, 0
  for _, t in ipairs(threads) do
    c, s, o = c + t:get("created"), s + t:get("same"), o + t:get("other")
  end
  local e = summary.errors
  io.write(string.format(
    'WRK {{"duration_us": %d, "created": %d, "same": %d, "other": %d, "errors": %d, '
    .. '"p50": %d, "p95": %d}}\n', summary.duration, c, s, o,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(95)))
end
"""

# The bare endpoint: one fixed body of the same size, every answer 200.
BARE_LUA = r"""
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK {{"duration_us": %d, "created": 0, "same": %d, "other": %d, "errors": %d, '
    .. '"p50": %d, "p95": %d}}\n', summary.duration, summary.requests - e.status, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(95)))
end
"""


@dataclass(frozen=True)
class Run:
    seconds: float
    created: int
    same: int
    failed: int
    p50_ms: float
    p95_ms: float

    def rate(self, status: int) -> float:
        return (self.created if status == 201 else self.same) / self.seconds


def wrk(url: str, script: str, seconds: int, args: argparse.Namespace) -> Run:
    s = run_wrk(url, script, seconds, args.threads, args.connections)
    return Run(
        seconds=s["duration_us"] / 1e6,
        created=s["created"],
        same=s["same"],
        failed=s["other"] + s["errors"],
        p50_ms=s["p50"] / 1000,
        p95_ms=s["p95"] / 1000,
    )


@dataclass(frozen=True)
class Hosts:
    """Hosts PREFIX00000 ... reporting texts[n % len], with collector tokens in the package's
    format: "<tag><n, 7 digits>.<salt><hostname>" (a tag letter per set: prefixes are unique)."""

    prefix: str
    tag: str
    count: int
    salt: str
    texts: list[str]

    def name(self, n: int) -> str:
        return f"{self.prefix}{n:05d}"

    def script(self, mode: str, run: str, threads: int) -> str:
        return LUA.format(
            texts="{" + ", ".join(lua_string(json.dumps(t)) for t in self.texts) + "}",
            mode=lua_string(mode),
            prefix=lua_string(self.prefix),
            tag=lua_string(self.tag),
            count=self.count,
            salt=lua_string(self.salt),
            run=lua_string(run),
            threads=threads,
            captured_at=CAPTURED_AT,
        )

    def create_tokens(self) -> None:
        from rest_framework_api_key.crypto import concatenate

        from topoweb.fleet.models import CollectorToken

        hash_key = CollectorToken.objects.key_generator.hash  # the package's, as create_key's
        rows = []
        for n in range(self.count):
            host, prefix = self.name(n), f"{self.tag}{n:07d}"
            hashed = hash_key(concatenate(prefix, self.salt + host))
            rows.append(
                CollectorToken(
                    id=concatenate(prefix, hashed),
                    prefix=prefix,
                    hashed_key=hashed,
                    name=host,
                    hostname=host,
                )
            )
        CollectorToken.objects.bulk_create(rows, batch_size=1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    parser.add_argument(
        "--rounds", type=int, choices=range(1, 17), default=3, help="rounds of the three kinds"
    )
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn sync workers")
    parser.add_argument("--hosts", type=int, default=200, help="known hosts (duplicates)")
    parser.add_argument(
        "--fresh", type=int, default=2000, help="hosts never seen, for each round's first reports"
    )
    parser.add_argument("--servers", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument(
        "--profile",
        type=int,
        metavar="N",
        default=0,
        help="instead: N new and N duplicate reports in process under cProfile, top functions",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None and not args.profile:
        print("bench/ingest.py needs wrk: apt-get install -y wrk", file=sys.stderr)
        return 2
    port = int(os.environ.get("BENCH_PORT", "0")) or None
    with live_server(args.workers, port) as base:
        texts = [p.read_text(encoding="utf-8") for p in TOPOLOGIES]
        if args.profile:
            profile(texts, args.profile)
            return 0
        salt = secrets.token_hex(8)
        known = Hosts("bench-", "b", args.hosts, salt, _readable(texts))
        # Each round's first reports come from hosts no round has seen (a tag letter each).
        fresh = [
            Hosts(f"fresh{n}-", "fghijklmnopqrstu"[n], args.fresh, salt, known.texts)
            for n in range(args.rounds)
        ]
        known.create_tokens()
        for hosts in fresh:
            hosts.create_tokens()
        timing = (args.duration, args)
        _store_first_reports(known)
        url = base + "/api/v1/reports/"
        size = len(
            json.dumps(
                {
                    "hostname": known.name(0),
                    "captured_at": CAPTURED_AT,
                    "collector_version": "bench",
                    "topo_text": known.texts[0],
                }
            )
        )
        bare_port = port + 1 if port else _free_port()
        bare = f"http://127.0.0.1:{bare_port}/bare"
        body = {"pad": "x" * max(0, size - 11)}  # the same bytes on the wire
        bare_script = BARE_LUA.format(body=lua_string(json.dumps(body)))
        with gunicorn(
            "bench.bare_drf:application", bare_port, args.workers, dict(os.environ), bare
        ):
            # Warm-up: every topoweb worker has parsed, classified and stored before anything
            # is timed, and the bare app has answered.
            wrk(url, known.script("changed", "warm", args.threads), 1, args)
            wrk(bare, bare_script, 1, args)
            # Rounds of the three kinds between runs of the bare app: each kind's ratio in a
            # round is against the mean of the bare runs around it, so that a machine drifting
            # during the runs moves both sides, and the figure is the rounds' median.
            baseline = [wrk(bare, bare_script, *timing)]
            rounds: list[list[Run]] = []
            for number, hosts in enumerate(fresh):
                rounds.append(
                    [
                        wrk(url, known.script("changed", f"run{number}", args.threads), *timing),
                        wrk(url, hosts.script("first", "", args.threads), *timing),
                        wrk(url, known.script("same", "", args.threads), *timing),
                    ]
                )
                baseline.append(wrk(bare, bare_script, *timing))

        print(
            f"{args.connections} connections (wrk, {args.threads} threads), {args.workers} "
            f"gunicorn sync workers, {args.duration} s per run, {args.rounds} rounds, reports "
            f"of {size} bytes and more"
        )
        bare_rates = [b.rate(200) for b in baseline]
        print(
            "bare DRF POST, between the rounds: "
            + ", ".join(f"{rate:.0f}" for rate in bare_rates)
            + "/s (the framework's ceiling on this machine)"
        )
        print(
            f"{'run':<20} {'reports/s':>9} {'p50 ms':>7} {'p95 ms':>7} {'of bare':>8} "
            f"{'rounds':>13}  target (the median round)"
        )
        kinds = (("new, changed facts", 201), ("new, first report", 201), ("duplicate", 200))
        for index, (label, status) in enumerate(kinds):
            runs = [each[index] for each in rounds]
            ratios = [
                run.rate(status) / ((bare_rates[n] + bare_rates[n + 1]) / 2)
                for n, run in enumerate(runs)
            ]
            ratio = statistics.median(ratios)
            # Latencies of the median round (the lower of the two middle ones, for even rounds).
            middle = runs[ratios.index(statistics.median_low(ratios))]
            target = TARGET_NEW if status == 201 else TARGET_DUPLICATE
            notes = [f"{sum(r.failed for r in runs)} failed"] if any(r.failed for r in runs) else []
            other = sum(r.same if status == 201 else r.created for r in runs)
            if other:
                notes.append(f"{other} answered {200 if status == 201 else 201}")
            print(
                f"{label:<20} {statistics.median(r.rate(status) for r in runs):9.1f} "
                f"{middle.p50_ms:7.1f} {middle.p95_ms:7.1f} {ratio:7.1%} "
                f"{min(ratios):6.1%}-{max(ratios):5.1%}  >= {target:.0%} of bare "
                f"{'ok' if ratio >= target else 'MISSED'}"
                + (f"  ({', '.join(notes)})" if notes else "")
            )

        stored = _seed(args.servers)
        from topoweb.fleet.access import create_api_token

        reader = create_api_token("bench-reader")
        sample = [
            f"seed-{i:05d}" for i in range(0, args.servers, max(1, args.servers // args.reads))
        ]
        detail = [f"{base}/api/v1/servers/{host}/" for host in sample[: args.reads]]
        # What the fleet page asks for (frontend/src/fleet.js): a page of the list under one of
        # the page's sort keys, deep pages included, as someone paging through the fleet would.
        pages = max(1, stored // 50)
        fleet = [
            f"{base}/api/v1/servers/?page={1 + (n * 37) % pages}"
            + (f"&ordering={ordering}" if ordering != "hostname" else "")
            for n, ordering in zip(
                range(args.reads),
                itertools.cycle(("hostname", "-last_seen_at", "gpu_count", "-sku")),
            )
        ]
        for label, urls in (("server detail", detail), ("fleet page's list", fleet)):
            latencies = []
            for url in urls:
                started = time.perf_counter()
                code = request(url, reader)
                latencies.append(time.perf_counter() - started)
                assert code == 200, (url, code)
            p95 = statistics.quantiles(latencies, n=20)[-1] * 1000
            print(
                f"{label}: p95 {p95:6.1f} ms, median "
                f"{statistics.median(latencies) * 1000:6.1f} ms over {len(latencies)} requests "
                f"with {stored} servers stored  target p95 < {TARGET_READ_P95_MS:g} ms "
                f"{'ok' if p95 < TARGET_READ_P95_MS else 'MISSED'}"
            )
        _fleet_questions(
            base, reader, [f"seed-{i:05d}" for i in range(min(1000, args.servers))], stored
        )
    return 0


def _fleet_questions(base: str, reader: str, named: list[str], stored: int) -> None:
    """A scheduler's k-GPU question over many servers at once: the `named` ones, each with
    its own free GPUs (a new question every time, so no answer is reused), and the whole
    fleet (no servers named). Each kind of server is priced once (they share a cost model),
    so these grow with the servers' rows, not with their pricing."""
    import random

    rng = random.Random(11)
    url = f"{base}/api/v1/placement/select/"

    def ask(body: dict[str, object]) -> float:
        started = time.perf_counter()
        code = request(url, reader, json.dumps(body).encode())
        assert code == 200, (url, code)
        return time.perf_counter() - started

    def masks() -> list[dict[str, object]]:
        return [{"hostname": h, "free": sorted(rng.sample(range(8), 6))} for h in named]

    first = ask({"k": 4, "servers": masks()})
    each = [ask({"k": 4, "servers": masks()}) for _ in range(20)]
    print(
        f"select k=4 over {len(named)} named servers (own free GPUs each): first "
        f"{first * 1000:.0f} ms, then median {statistics.median(each) * 1000:.0f} ms, max "
        f"{max(each) * 1000:.0f} ms over {len(each)} new questions (no target in issue 11)"
    )
    whole = [ask({"k": k}) for k in (2, 3, 4, 5, 6)]
    print(
        f"select over the whole fleet ({stored} servers, none named), k=2..6: median "
        f"{statistics.median(whole) * 1000:.0f} ms, max {max(whole) * 1000:.0f} ms "
        "(no target in issue 11)"
    )


def _readable(texts: list[str]) -> list[str]:
    """The fixture matrices the reader accepts (some fixtures are refused on purpose)."""
    from topoweb.core.formats import ParseError, parse_text

    readable = []
    for text in texts:
        try:
            parse_text(text, expected="topology")
        except ParseError:
            continue
        readable.append(text)
    return readable


def _store_first_reports(hosts: Hosts) -> None:
    """Each known host's first report, stored in this process as the server would."""
    from django.utils.dateparse import parse_datetime

    from topoweb.fleet.services import ingest_report

    captured_at = parse_datetime(CAPTURED_AT)
    assert captured_at is not None
    for n in range(hosts.count):
        ingest_report(
            hostname=hosts.name(n),
            topo_text=hosts.texts[n % len(hosts.texts)],
            captured_at=captured_at,
            source="collector",
            collector_version="bench",
        )


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

    from topoweb.fleet.access import create_collector_token

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

    from topoweb.fleet.changes import servers_changed
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
                    wiring_sha256=template.wiring_sha256,
                    raw_text=template.raw_text,
                    document=template.document,
                    source="upload",
                    captured_at=template.captured_at,
                    topology_class=template.topology_class,
                    gpu_count=template.gpu_count,
                    nic_count=template.nic_count,
                    gpu_model=template.gpu_model,
                    gpu_memory_bytes=template.gpu_memory_bytes,
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
        # Their stored list rows and details, as the services write them for every server.
        for start in range(0, len(servers), 500):
            servers_changed([s.pk for s in servers[start : start + 500]])
    return Server.objects.count()


if __name__ == "__main__":
    raise SystemExit(main())
