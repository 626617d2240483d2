"""Tokens kept per process (fleet.authentication.KeptTokens): read without a token query while
the tokens stamp in Redis is unchanged, and refused by every process on the next request once
a change that could refuse them commits (revocation, deactivation), a flushed Redis included.
Two KeptTokens instances stand for two worker processes: only Redis passes between them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import H200, add, report
from topoweb.config import throttles
from topoweb.fleet import authentication, selectors
from topoweb.fleet.models import ApiToken, CollectorToken
from topoweb.fleet.services import create_api_token, create_collector_token, revoke_collector_token

pytestmark = pytest.mark.django_db


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def redis_cache(settings: Any) -> Iterator[None]:
    """The default cache in Redis, as deployed (the test settings keep it in process), under
    a prefix of this test's own."""
    prefix = f"topoweb-test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": django_settings.REDIS_URL,
            "KEY_PREFIX": prefix,
        }
    }
    yield
    client = redis.Redis.from_url(django_settings.REDIS_URL)  # the broker's database: no FLUSHDB
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)


@pytest.fixture
def process(monkeypatch: pytest.MonkeyPatch) -> Callable[[], authentication.KeptTokens]:
    """Switches this process to a worker of its own: returns its kept tokens, empty."""

    def start() -> authentication.KeptTokens:
        kept = authentication.KeptTokens()
        monkeypatch.setattr(authentication, "_kept_tokens", kept)
        return kept

    start()
    return start


def token_queries(captured: CaptureQueriesContext) -> list[str]:
    tables = (ApiToken._meta.db_table, CollectorToken._meta.db_table)
    return [q["sql"] for q in captured.captured_queries if any(t in q["sql"] for t in tables)]


def committed(change: Callable[[], Any], capture: Any) -> None:
    """Runs `change` and what it asked to run once committed, as a real commit would."""
    with capture(execute=True):
        change()


def revoke_the_api_token() -> None:
    """As the admin does: a save of the token row."""
    token = ApiToken.objects.get()
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])


def test_a_kept_token_is_read_without_a_token_query(redis_cache: None, process: Any) -> None:
    client = bearer(create_api_token("scheduler"))
    assert client.get("/api/v1/servers/").status_code == 200

    with CaptureQueriesContext(connection) as captured:
        assert client.get("/api/v1/servers/").status_code == 200

    assert token_queries(captured) == []


def test_a_revoked_api_token_is_refused_by_another_process_on_its_next_request(
    redis_cache: None, process: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = bearer(create_api_token("scheduler"))
    first = process()
    assert client.get("/api/v1/servers/").status_code == 200
    process()  # the worker that serves the revocation
    assert client.get("/api/v1/servers/").status_code == 200

    committed(revoke_the_api_token, django_capture_on_commit_callbacks)
    authentication._kept_tokens = first  # back to the first worker (the fixture restores it)

    assert client.get("/api/v1/servers/").status_code == 401


def test_a_deactivated_user_is_refused_on_the_next_request(
    redis_cache: None, process: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = bearer(create_api_token("scheduler"))
    assert client.get("/api/v1/servers/").status_code == 200
    user = ApiToken.objects.get().user

    def deactivate() -> None:
        user.is_active = False
        user.save()

    committed(deactivate, django_capture_on_commit_callbacks)

    assert client.get("/api/v1/servers/").status_code == 401


def test_a_flushed_redis_does_not_bring_back_a_revoked_token(
    redis_cache: None, process: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = bearer(create_api_token("scheduler"))
    first = process()
    assert client.get("/api/v1/servers/").status_code == 200  # kept under the first stamp
    process()
    committed(revoke_the_api_token, django_capture_on_commit_callbacks)
    caches["default"].delete(authentication.TOKENS_STAMP)  # Redis flushed or restarted empty
    authentication._kept_tokens = first

    assert client.get("/api/v1/servers/").status_code == 401


def test_a_revoked_collector_token_is_refused_on_its_next_report(
    redis_cache: None, process: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = bearer(create_collector_token("gpu-a01"))
    body = report("gpu-a01", H200)
    assert client.post("/api/v1/reports/", body, format="json").status_code == 201
    with CaptureQueriesContext(connection) as captured:
        assert client.post("/api/v1/reports/", body, format="json").status_code == 200
    assert token_queries(captured) == []

    committed(
        lambda: revoke_collector_token(CollectorToken.objects.get()),
        django_capture_on_commit_callbacks,
    )

    assert client.post("/api/v1/reports/", body, format="json").status_code == 401


def test_a_kept_token_is_still_marked_used_once_a_minute(
    redis_cache: None, process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = bearer(create_api_token("scheduler"))
    assert client.get("/api/v1/servers/").status_code == 200
    first_mark = ApiToken.objects.get().last_used_at
    assert first_mark is not None

    with CaptureQueriesContext(connection) as captured:
        assert client.get("/api/v1/servers/").status_code == 200
    assert token_queries(captured) == []  # marked less than a minute ago: no write

    later = first_mark + timedelta(minutes=2)
    monkeypatch.setattr(selectors.timezone, "now", lambda: later)
    assert client.get("/api/v1/servers/").status_code == 200
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/api/v1/servers/").status_code == 200

    assert ApiToken.objects.get().last_used_at == later
    assert token_queries(captured) == []  # the process knows it marked it


def test_a_throttled_question_makes_one_redis_round_trip_and_counts_once(
    redis_cache: None, process: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.TOPOWEB_QUERY_RATE = "3/min"
    add("h200-01", H200)
    client = bearer(create_api_token("scheduler"))
    question = {"collective": "all_reduce", "gpus": [0, 1], "bytes": 1 << 20}
    trips: list[Any] = []
    real_trip = throttles.redis_trip

    def counting_trip(*args: Any, **kwargs: Any) -> Any:
        trips.append(args)
        return real_trip(*args, **kwargs)

    monkeypatch.setattr(throttles, "redis_trip", counting_trip)
    codes = [
        client.post("/api/v1/servers/h200-01/cost", question, format="json").status_code
        for _ in range(4)
    ]

    assert codes == [200, 200, 200, 429]
    # The first request looks its token up (and its throttle counts alone); the others count
    # their throttle in the round trip that reads the stamp.
    assert len(trips) == 5
    assert [len(windows) for _, windows, *_ in trips[2:]] == [1, 1, 1]


def test_without_redis_every_request_looks_its_token_up(process: Any) -> None:
    client = bearer(create_api_token("scheduler"))
    assert client.get("/api/v1/servers/").status_code == 200

    with CaptureQueriesContext(connection) as captured:
        assert client.get("/api/v1/servers/").status_code == 200
    assert len(token_queries(captured)) == 1

    ApiToken.objects.update(revoked_at=timezone.now())  # no signal: nothing to renew
    assert client.get("/api/v1/servers/").status_code == 401


def test_an_unreachable_redis_falls_back_to_the_token_query(
    redis_cache: None, process: Any, settings: Any
) -> None:
    client = bearer(create_api_token("scheduler"))
    assert client.get("/api/v1/servers/").status_code == 200
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }

    ApiToken.objects.update(revoked_at=timezone.now())  # no signal, and no Redis to tell

    assert client.get("/api/v1/servers/").status_code == 401


def test_the_stamp_is_set_once_when_missing_and_never_comes_back_after_a_flush(
    redis_cache: None,
) -> None:
    window = [("throttle_query_test", 60.0)]
    first, _ = throttles.redis_trip("a-stamp", window) or (None, None)
    again, counts = throttles.redis_trip("a-stamp", window) or (None, [])
    by_get, _ = throttles.redis_trip("a-stamp", []) or (None, None)
    caches["default"].delete("a-stamp")
    after_flush, _ = throttles.redis_trip("a-stamp", []) or (None, None)

    assert first and first == again == by_get
    assert counts[0][0] == 2  # the window counted in the same trip
    assert after_flush and after_flush != first
