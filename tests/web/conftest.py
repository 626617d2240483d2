"""Web tests run against the real PostgreSQL and Redis, with one real Celery worker thread for
the whole session. A missing service fails the run; it is never skipped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from rest_framework.test import APIClient

from tests.conftest import WORKER as _WORKER

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Real captures (tests/fixtures) that several web tests build their fleets from.
H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
V100 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"
V100_OTHER_MESH = "topo_31_v100-8gpu-alt-mesh-2mlx5-slurm-noise-lines.txt"
RTX6000 = "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt"
RTX6000_P2P = "p2p_05_rtx6000ada-4gpu-p2pwrites-gpu-cpu-latency.txt"


@pytest.fixture(scope="session", autouse=True)
def real_services() -> None:
    """PostgreSQL and Redis, as CI runs them; SQLite or a missing Redis fail every web test."""
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.fail("tests/web need PostgreSQL: set DATABASE_URL=postgres://...", pytrace=False)
    if not settings.REDIS_URL:
        pytest.fail("tests/web need Redis: set REDIS_URL=redis://...", pytrace=False)
    import psycopg
    import redis

    params = settings.DATABASES["default"]
    try:
        psycopg.connect(
            host=params["HOST"] or "127.0.0.1",
            port=params["PORT"] or 5432,
            user=params["USER"],
            dbname="postgres",
            connect_timeout=3,
        ).close()
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is unreachable: {exc}", pytrace=False)
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is unreachable at {settings.REDIS_URL}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def celery_worker(django_db_setup: None, django_db_blocker: Any) -> Iterator[Any]:
    """One real worker thread (solo pool) on the project's app, consuming from the test Redis.

    Tests that use it are marked django_db(transaction=True): the worker has its own database
    connection and sees only committed rows."""
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun, task_prerun

    from topoweb.config.celery_app import app

    def task_started(**kwargs: Any) -> None:
        _WORKER["in_flight"] += 1

    def close_worker_connections(**kwargs: Any) -> None:
        # The worker thread's connection must not outlive the task: the test database is
        # truncated between tests and dropped at the end.
        connections.close_all()
        _WORKER["in_flight"] -= 1

    task_prerun.connect(task_started, weak=False)
    task_postrun.connect(close_worker_connections, weak=False)
    app.control.purge()  # messages left by an earlier, interrupted run
    with start_worker(app, perform_ping_check=False, pool="solo", loglevel="WARNING"):
        _WORKER["running"] = True
        yield app
        _WORKER["running"] = False
    task_prerun.disconnect(task_started)
    task_postrun.disconnect(close_worker_connections)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll until the predicate is truthy (the worker runs in another thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s")


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def report(hostname: str, topo: str = "topo_01_h200-8gpu-12nic-numaid.txt", **extra: Any) -> dict:
    body: dict[str, Any] = {
        "hostname": hostname,
        "captured_at": "2026-11-29T10:00:00Z",
        "collector_version": "0.1.0",
        "topo_text": fixture_text(topo),
    }
    body.update(extra)
    return body


def collector_client_for(hostname: str) -> APIClient:
    """A client carrying a fresh collector token for the given hostname."""
    from topoweb.fleet.access import create_collector_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_collector_token(hostname)}")
    return client


@pytest.fixture
def collector_client() -> Callable[[str], APIClient]:
    """A client carrying a fresh collector token for the given hostname."""
    return collector_client_for


@pytest.fixture
def reader() -> APIClient:
    """A client reading with an API token, as a scheduler does."""
    from topoweb.fleet.access import create_api_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token('scheduler')}")
    return client


def uploader(user: Any) -> Any:
    """Give a person the permission staff grant to those who upload files; returns the user."""
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="upload_files"))
    return type(user).objects.get(pk=user.pk)  # a fresh object: permissions are cached


@pytest.fixture
def person(django_user_model: Any) -> APIClient:
    """A signed-in person allowed to upload files, as in the browser."""
    client = APIClient()
    client.force_login(uploader(django_user_model.objects.create_user("ana", password="pw")))
    return client


def add(hostname: str, topo: str, sku: str = "", model: str = "", **extra: Any) -> Any:
    """Store a collector report of the fixture `topo` for `hostname`, as ingest does."""
    from django.utils import timezone

    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report

    return ingest_report(
        hostname=hostname,
        topo_text=fixture_text(topo),
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        host={"product_name": sku} if sku else None,
        gpu_model_hint=model,
        **extra,
    )


CACHE_CALLS = ("get", "get_many", "add", "set", "incr", "touch", "delete", "set_many")


def count_cache_calls(monkeypatch: pytest.MonkeyPatch, alias: str = "default") -> list[str]:
    """The calls made to a cache from now on, one per round trip: a backend's get_many that
    calls its own get counts once."""
    from django.core.cache import caches

    calls: list[str] = []
    inside: list[str] = []
    backend = caches[alias]
    for name in CACHE_CALLS:
        original = getattr(backend, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            if not inside:
                calls.append(_name)
            inside.append(_name)
            try:
                return _original(*args, **kw)
            finally:
                inside.pop()

        monkeypatch.setattr(backend, name, counted)
    return calls


def collector_tokens_last_used(when: datetime) -> None:
    """Every collector token last used at `when`, as a minute's passing leaves what the cache
    holds of it (fleet.cached_tokens): the gate of its last mark expired, its kept copy (read
    before that mark) as it was."""
    from django.core.cache import cache

    from topoweb.fleet.models import CollectorToken

    CollectorToken.objects.update(last_used_at=when)
    prefixes = CollectorToken.objects.values_list("prefix", flat=True)
    cache.delete_many([f"collector-token:marked:{prefix}" for prefix in prefixes])


def keep_tasks_here(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Tasks fleet.work sends (a report's analysis and health check, the sweeps') are recorded
    as sent, and none reaches the broker: a test that commits for real must not have the
    session's worker run them while the test database is truncated under it."""
    from topoweb.fleet import work

    sent: list[tuple[str, tuple[Any, ...]]] = []

    def record(task_name: str, *args: Any, **_: Any) -> bool:
        sent.append((task_name, args))
        return True

    monkeypatch.setattr(work, "enqueue", record)
    return sent
