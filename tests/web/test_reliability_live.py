"""Fault tests on real processes (issue 15): gunicorn with two workers over the test database
and Redis, and a prefork Celery worker. Throttles and metrics are shared by the workers; a web
worker killed mid-upload, a Redis or a database that is down, and a Celery worker killed
mid-analysis lose nothing."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from tests.web import live
from tests.web.conftest import keep_tasks_here, report, wait_for
from topoweb.analysis.models import Analysis
from topoweb.fleet.access import create_api_token, create_collector_token
from topoweb.fleet.models import Snapshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
V100 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"


@pytest.fixture(scope="module")
def web(django_db_setup: None, tmp_path_factory: Any) -> Any:
    """gunicorn, 2 workers, ingest throttled at 10/min, metrics in multiprocess mode."""
    metrics_dir = tmp_path_factory.mktemp("prometheus")
    with live.gunicorn(
        2, TOPOWEB_INGEST_RATE="10/min", PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)
    ) as (base, master):
        yield base, master


@pytest.fixture(autouse=True)
def no_tasks_leave_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingests made here in-process must not queue work for the session's worker thread."""
    keep_tasks_here(monkeypatch)


def forget_throttles() -> None:
    """Throttle histories of earlier runs (token ids repeat once the tables are flushed)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter("topoweb:*throttle_*"):
        client.delete(key)


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body, _ = live.call(f"{base}/metrics", live.METRICS_TOKEN)
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_the_ingest_throttle_is_one_budget_for_both_workers(web: Any) -> None:
    base, _ = web
    forget_throttles()
    token = create_collector_token("gpu-a01")
    bodies = [report("gpu-a01", H200, host={"kernel": f"6.8.{i}"}) for i in range(41)]

    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(lambda b: live.call(f"{base}/api/v1/reports", token, b)[0], bodies[:40])
        )

    assert len(codes) == 40
    assert sorted(codes) == [201] * 10 + [429] * 30, codes
    assert Snapshot.objects.filter(server__hostname="gpu-a01").count() == 10
    # Over budget, a report already stored is still answered (a duplicate is not counted)...
    stored = bodies[codes.index(201)]
    assert live.call(f"{base}/api/v1/reports", token, stored)[0] == 200
    # ...and a new one is refused until the window closes.
    status, _, headers = live.call(f"{base}/api/v1/reports", token, bodies[40])
    assert status == 429
    assert 0 < int(headers["Retry-After"]) <= 60  # until the caller's window closes
    forget_throttles()


def test_metrics_are_summed_over_the_workers_and_their_labels_stay_bounded(web: Any) -> None:
    base, _ = web
    token = create_api_token("scraper-test")
    route = (
        "django_http_requests_latency_seconds_by_view_method_count",
        (("method", "GET"), ("view", "api:server-list")),
    )
    before = scrape(base).get(route, 0)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: live.call(f"{base}/api/v1/servers/", token), range(30)))

    # Whichever worker answers the scrape, every worker's requests are in it.
    counts = [scrape(base)[route] - before for _ in range(8)]
    assert counts == [30] * 8

    labels_before = {labels for name, labels in scrape(base) if name == route[0]}
    junk = [
        (f"X{uuid.uuid4().hex[:8].upper()}", f"/no/such/{uuid.uuid4().hex}") for _ in range(100)
    ]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda mp: live.call(f"{base}{mp[1]}", method=mp[0]), junk))
    after = scrape(base)
    labels_after = {labels for name, labels in after if name == route[0]}

    # At most ("<invalid method>", "<unnamed view>") and ("GET", ...): the metrics middleware's
    # fixed sets.
    assert len(labels_after - labels_before) <= 2
    assert {dict(labels)["method"] for labels in labels_after} <= {
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "OPTIONS",
        "<invalid method>",
    }
    assert live.call(f"{base}/metrics")[0] == 401  # without the token


def test_a_web_worker_killed_mid_upload_loses_nothing(web: Any) -> None:
    base, master = web
    forget_throttles()
    token = create_collector_token("gpu-k01")
    import json

    body = json.dumps(report("gpu-k01", V100)).encode()
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = (
            f"POST /api/v1/reports HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body[: len(body) // 2])
        time.sleep(0.5)  # a worker has the request and waits for the rest of the body
        for pid in live.children(master.pid):
            os.kill(pid, signal.SIGKILL)
        sock.settimeout(10)
        try:
            answer = sock.recv(1024)
        except OSError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 2")  # never told "stored"
    assert not Snapshot.objects.filter(server__hostname="gpu-k01").exists()

    live.wait_until_up(base, 2, master.pid)
    # The collector keeps the report in its spool and sends it again: stored exactly once.
    again = live.call(f"{base}/api/v1/reports", token, json.loads(body))
    duplicate = live.call(f"{base}/api/v1/reports", token, json.loads(body))
    assert (again[0], duplicate[0]) == (201, 200)
    assert Snapshot.objects.filter(server__hostname="gpu-k01").count() == 1
    forget_throttles()


def test_with_redis_down_reports_are_stored_and_metrics_answer(tmp_path: Any) -> None:
    token = create_collector_token("gpu-r01")
    dead = "redis://127.0.0.1:1/0"
    with live.gunicorn(1, REDIS_URL=dead, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)) as (base, _):
        status, _, _ = live.call(f"{base}/api/v1/reports", token, report("gpu-r01", H200))
        metrics = live.call(f"{base}/metrics", live.METRICS_TOKEN)

    assert status == 201  # throttle open, the analysis left pending for the sweep
    assert metrics[0] == 200
    assert b"topoweb_reports_total" in metrics[1]
    assert Snapshot.objects.filter(server__hostname="gpu-r01").count() == 1
    assert Analysis.objects.get().status == "pending"


def test_with_the_database_down_reports_answer_503_and_are_stored_when_it_is_back(
    web: Any, tmp_path: Any
) -> None:
    forget_throttles()
    token = create_collector_token("gpu-d01")
    body = report("gpu-d01", H200)
    params = settings.DATABASES["default"]
    dead = f"postgres://{params['USER']}@127.0.0.1:1/{params['NAME']}"
    with live.gunicorn(1, DATABASE_URL=dead, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)) as (base, _):
        status, answer, headers = live.call(f"{base}/api/v1/reports", token, body)
        alive = live.call(f"{base}/healthz")[0]
        ready = live.call(f"{base}/readyz")[0]
        metrics = live.call(f"{base}/metrics", live.METRICS_TOKEN)[0]

    assert (status, alive, ready, metrics) == (503, 200, 503, 200)
    assert b'"unavailable"' in answer
    assert headers["Retry-After"] == "30"
    assert not Snapshot.objects.exists()
    # The collector sends the spooled report again once the database is back.
    assert live.call(f"{web[0]}/api/v1/reports", token, body)[0] == 201
    forget_throttles()


def test_a_celery_worker_killed_mid_analysis_is_recovered_by_the_redelivered_message(
    collector_client: Any,
) -> None:
    from tests import synthetic
    from topoweb.analysis.tasks import run_analysis

    # Large enough that its analysis runs for seconds: the kill lands mid-analysis.
    body = report("nvswitch-288", topo_text=synthetic.nvswitch_domain(288))
    assert (
        collector_client("nvswitch-288").post("/api/v1/reports", body, format="json").status_code
        == 201
    )
    analysis = Analysis.objects.get()
    queue = f"reliability-{uuid.uuid4().hex[:8]}"
    fast = {"TOPOWEB_ANALYSIS_HEARTBEAT_S": "0.5", "TOPOWEB_STALE_CLAIM_AFTER_S": "3"}
    with live.celery_worker(queue, **fast) as worker:
        run_analysis.apply_async(args=[analysis.pk], queue=queue)
        wait_for(lambda: Analysis.objects.filter(pk=analysis.pk, status="running").exists(), 60)
        time.sleep(1.0)  # beating: the analysis of 288 GPUs takes seconds
        (child,) = live.children(worker.pid)
        os.kill(child, signal.SIGKILL)
        done = wait_for(lambda: Analysis.objects.filter(pk=analysis.pk, status="done").first(), 120)

    assert done.attempts == 2
    assert done.result["summary"]["gpu_count"] == 288
