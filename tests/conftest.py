"""Suite-wide wiring: Playwright beside Django's live server, and the session's Celery worker
going idle before any test's database is truncated."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API + live_server

# The session's Celery worker thread (tests/web/conftest.py starts it) and its tasks in flight.
WORKER = {"running": False, "in_flight": 0}


@pytest.fixture(autouse=True)
def no_kept_reads_from_earlier_tests() -> None:
    """Each test's database starts afresh but this process's caches do not: reads kept under
    the fleet's version (config.answers.kept_read) by an earlier test must not answer this one
    (a test's rolled-back writes never replace the version on commit)."""
    from django.core.cache import caches

    caches["answers"].clear()


@pytest.fixture(autouse=True)
def worker_settles_before_teardown() -> Iterator[None]:
    """Once the session's worker runs, any test that commits (an ingest queues its analysis and
    health check) leaves tasks behind. Wait for the worker to finish them before the database
    is truncated under it; otherwise the next test, or the flush itself, fails at random."""
    yield
    if not WORKER["running"]:
        return
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.REDIS_URL)
    deadline = time.monotonic() + 30
    quiet = 0
    # Idle twice in a row: a message between the queue and the worker's prerun is not missed.
    while quiet < 2 and time.monotonic() < deadline:
        busy = (
            WORKER["in_flight"]
            or any(broker.llen(queue.name) for queue in settings.CELERY_TASK_QUEUES)
            or broker.hlen("unacked")
        )
        quiet = 0 if busy else quiet + 1
        if quiet < 2:
            time.sleep(0.02)
