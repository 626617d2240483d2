"""The shared throttles: DRF's SimpleRateThrottle on Django's cache, counting a fixed window with
the cache's atomic incr. These fail if DRF, Django or django-redis change what the throttle
builds on (the rate parsed at construction, the `cache` it counts in, `incr` raising ValueError
for a key not there, Redis' INCR being atomic under concurrent callers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import cache as default_cache
from django_redis.cache import RedisCache
from rest_framework.test import APIRequestFactory
from rest_framework.throttling import SimpleRateThrottle

from topoweb.config.throttles import IngestThrottle, QueryThrottle


class _Caller:
    def __init__(self, pk: int) -> None:
        self.pk = pk


def _request(pk: int) -> Any:
    request = APIRequestFactory().post("/api/v1/reports/")
    request.auth = _Caller(pk)
    request.user = None
    return request


@pytest.fixture
def redis_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisCache]:
    """The shared cache as production has it (django-redis), under a prefix of this test's
    own."""
    shared = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": "topoweb-throttle-test"})
    monkeypatch.setattr(SimpleRateThrottle, "cache", shared)
    yield shared
    shared.clear()


def test_the_throttles_are_drfs_on_the_default_cache() -> None:
    assert issubclass(IngestThrottle, SimpleRateThrottle)
    assert IngestThrottle.cache is default_cache and QueryThrottle.cache is default_cache


def test_racing_callers_never_take_more_than_the_budget(
    redis_cache: RedisCache, settings: Any
) -> None:
    settings.TOPOWEB_INGEST_RATE = "10/min"
    allowed: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def caller() -> None:
        start.wait()
        for _ in range(5):
            ok = IngestThrottle().allow_request(_request(7), None)
            with lock:
                allowed.append(ok)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(allowed) == 10, allowed
    other = IngestThrottle()
    assert other.allow_request(_request(8), None)  # another caller has its own budget


def test_a_throttled_caller_is_told_when_its_window_closes(
    redis_cache: RedisCache, settings: Any
) -> None:
    settings.TOPOWEB_QUERY_RATE = "1/hour"
    first, second = QueryThrottle(), QueryThrottle()
    assert first.allow_request(_request(3), None)
    assert not second.allow_request(_request(3), None)
    assert 3590 < (second.wait() or 0) <= 3600


def test_a_counter_left_without_expiry_gets_one_on_its_first_count(
    redis_cache: RedisCache, settings: Any
) -> None:
    # A counter without expiry (left by an older version, whose incr checked that the key
    # existed and then counted, a window expiring in between): its first count gives it one.
    settings.TOPOWEB_INGEST_RATE = "5/min"
    throttle = IngestThrottle()
    key = throttle.get_cache_key(_request(11), None)
    assert key is not None
    redis_cache.set(key, 0, timeout=None)
    assert throttle.allow_request(_request(11), None)
    assert redis_cache.get(key) == 1
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert 0 < client.ttl(redis_cache.make_and_validate_key(key)) <= 60


def test_a_cache_that_is_down_lets_requests_through(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.TOPOWEB_INGEST_RATE = "1/min"

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(SimpleRateThrottle.cache, "incr", down)
    assert all(IngestThrottle().allow_request(_request(5), None) for _ in range(3))


def test_a_window_opens_in_two_round_trips_and_counts_in_one(
    redis_cache: RedisCache, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A collector reporting less often than the window lasts opens one with most reports.
    settings.TOPOWEB_INGEST_RATE = "5/min"
    calls: list[str] = []
    for name in ("get", "get_many", "add", "set", "incr", "touch"):
        method = getattr(redis_cache, name)

        def counted(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
            calls.append(_name)
            return _method(*args, **kw)

        monkeypatch.setattr(redis_cache, name, counted)
    assert IngestThrottle().allow_request(_request(12), None)
    opened = list(calls)
    calls.clear()
    assert IngestThrottle().allow_request(_request(12), None)
    assert (opened, calls) == (["incr", "add"], ["incr"])


def test_redis_replies_are_parsed_in_c() -> None:
    # hiredis (requirements.txt): each cache, throttle and broker round trip costs redis-py
    # less CPU with it; redis-py falls back to its Python parser, silently, without it.
    from redis.utils import HIREDIS_AVAILABLE

    assert HIREDIS_AVAILABLE
