"""Throttles shared by every worker process (an atomic counter per caller in the cache), and
the one Redis round trip a request makes before its view: the throttle counts, with the stamp
that says whether the tokens a process keeps are still valid (fleet.authentication).

Apart from config.api, which imports rest_framework.views: DRF imports the authentication
classes while rest_framework.views loads, and they use this module."""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Sequence
from typing import Any, cast

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.redis import RedisCache
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)


# What a request needs from Redis before its view runs, in one round trip: a stamp (read, and
# set to the caller's fresh random value when missing: KEYS[1], ARGV[1]; skipped when ARGV[1] is
# empty), then for each throttle window (KEYS[i], ARGV[i] milliseconds, i >= 2) INCR and, for the
# window's first request (or a counter somehow left without expiry), the expiry. Answers the
# stamp, then each window's count and the milliseconds it has left.
_TRIP_LUA = """
local out = {false}
if ARGV[1] ~= '' then
  out[1] = redis.call('GET', KEYS[1])
  if not out[1] then
    redis.call('SET', KEYS[1], ARGV[1])
    out[1] = ARGV[1]
  end
end
for i = 2, #KEYS do
  local count = redis.call('INCR', KEYS[i])
  local left = redis.call('PTTL', KEYS[i])
  if left < 0 then
    redis.call('PEXPIRE', KEYS[i], ARGV[i])
    left = tonumber(ARGV[i])
  end
  out[#out + 1] = count
  out[#out + 1] = left
end
return out
"""


@functools.lru_cache(maxsize=8)
def _redis_client(client_class: Any, pool: Any) -> tuple[Any, Any]:
    """A client over the cache's connection pool, and the trip script registered on it (sent
    by its SHA-1), built once. The client holds no connection of its own (each command borrows
    one from the pool), so threads may share it, and the pool starts afresh in a forked process
    (it checks its pid), so a gunicorn worker may too. Bounded: threads' caches each have their
    own pool."""
    client = client_class(connection_pool=pool)
    return client, client.register_script(_TRIP_LUA)


def _redis(cache: Any = None) -> tuple[Any, Any, Any] | None:
    """The default cache (or `cache`) when it is Django's Redis backend, with its kept client
    and trip script; None otherwise (per-process caches, tests)."""
    backend: Any = cache if isinstance(cache, BaseCache) else caches[DEFAULT_CACHE_ALIAS]
    if not isinstance(backend, RedisCache):  # DRF's `cache` is the default cache's proxy
        return None
    # Django's get_client builds a new client (and its table of reply callbacks) per call: one
    # per connection pool is kept instead.
    inner = cast(Any, backend)._cache
    client, trip = _redis_client(inner._client, inner._get_connection_pool(True))
    return backend, client, trip


def redis_trip(
    stamp: str | None, windows: Sequence[tuple[str, float]], cache: Any = None
) -> tuple[str | None, list[tuple[int, float]]] | None:
    """One Redis round trip: the value of the cache key `stamp` (set to a fresh random value
    when missing, so that a flushed or restarted Redis never gives back a value seen before),
    and each throttle window's count (the key counted, its duration in seconds) with the
    seconds it has left. None when the cache is not Redis; raises when Redis fails. Django
    stores integers raw, so counters stay readable by cache.get and resettable by
    cache.delete."""
    found = _redis(cache)
    if found is None:
        return None
    backend, client, trip = found
    keys = [backend.make_and_validate_key(stamp or "-")]
    keys += [backend.make_and_validate_key(key) for key, _ in windows]
    args: list[str | int] = [secrets.token_hex(8) if stamp else ""]
    args += [max(1, int(duration * 1000)) for _, duration in windows]
    if windows:
        answer = trip(keys=keys, args=args)
    else:  # a plain GET costs this process a third less than the script
        answer = [client.get(keys[0])]
        if answer[0] is None:  # set once, by whoever comes first
            client.set(keys[0], args[0], nx=True)
            answer = [client.get(keys[0])]
    value = answer[0].decode() if isinstance(answer[0], bytes) else answer[0]
    counts = [
        (int(c), float(ms) / 1000.0) for c, ms in zip(answer[1::2], answer[2::2], strict=True)
    ]
    return value, counts


def renew_stamp(stamp: str) -> bool:
    """Sets the cache key `stamp` to a fresh random value (never one seen before), so that
    whoever kept something under the old value knows it is stale; False without Redis."""
    found = _redis()
    if found is None:
        return False
    backend, client, _ = found
    client.set(backend.make_and_validate_key(stamp), secrets.token_hex(8))
    return True


class SettingRateThrottle(SimpleRateThrottle):
    """Per token (or user, or address), at the rate a setting names, read per request."""

    rate_setting = ""

    def get_rate(self) -> str | None:
        return str(getattr(settings, self.rate_setting))

    def window(self, auth: Any) -> tuple[str, float] | None:
        """The Redis key counted for a caller authenticated by `auth` (a token row) and the
        window's seconds, for an authentication that counts it ahead (`counted_ahead`)."""
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        if self.num_requests is None or self.duration is None or not hasattr(auth, "pk"):
            return None
        return self._key(self._token_ident(auth)), self.duration

    def allow_request(self, request: Request, view: Any) -> bool:
        """One counter per caller in the cache (Redis when configured), so every worker process
        counts against the same budget. The window opens with the caller's first request and
        lasts the rate's period; the count is an atomic increment, so callers racing on two
        workers cannot both take the last slot (DRF's own read-then-write history can)."""
        # The rate is read per request so that a settings change applies without a restart.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        key = self.get_cache_key(request, view)
        if key is None or self.num_requests is None or self.duration is None:
            return True
        self.remaining: float | None = None
        ahead = getattr(request, COUNTED_AHEAD, {})
        try:
            if key in ahead:  # counted in the authentication's round trip
                counted = ahead.pop(key)
                if counted is None:
                    raise ConnectionError("that round trip failed")
            else:
                # One round trip in Redis (INCR and the window's expiry together), else a few
                # calls.
                trip = redis_trip(None, [(key, self.duration)], self.cache)
                counted = trip[1][0] if trip else self._count_in_cache(key, self.duration)
            if counted is None:
                return True
            count, self.remaining = counted
        except Exception:
            # A cache that is down must not turn reports away: they are worth more than the
            # limit. The failure is logged; the budget applies again once the cache is back.
            log.warning("throttle %s not applied: the cache is unreachable", self.scope)
            return True
        return bool(count <= self.num_requests)

    def _count_in_cache(self, key: str, duration: int) -> tuple[int, float] | None:
        """The same window with Django's cache API (per-process caches, tests): the count and
        the seconds the window has left, or None when no window could be opened."""
        now = self.timer()
        self.cache.add(f"{key}:opened", now, timeout=duration)
        for _ in range(2):  # the window may close between add and incr: open a new one
            self.cache.add(key, 0, timeout=duration)
            try:
                count = int(self.cache.incr(key))
                break
            except ValueError:
                continue
        else:
            return None
        opened = float(self.cache.get(f"{key}:opened", now))
        return count, duration - (now - opened)

    def wait(self) -> float | None:
        """Seconds until the caller's window closes (the Retry-After of a 429)."""
        remaining = getattr(self, "remaining", None)
        return None if remaining is None else max(0.0, remaining)

    @staticmethod
    def _token_ident(auth: Any) -> str:
        return f"{type(auth).__name__}:{auth.pk}"

    def _key(self, ident: str) -> str:
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.auth is not None and hasattr(request.auth, "pk"):
            ident = self._token_ident(request.auth)
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = self.get_ident(request)
        return self._key(ident)


# The request attribute where counted_ahead leaves the throttle counts it took (None for a
# round trip that failed), each taken by its throttle instead of counting again.
COUNTED_AHEAD = "_topoweb_counted_ahead"


def counted_ahead(request: Request, stamp: str, auth: Any) -> str | None:
    """The cache key `stamp`'s value (see redis_trip), read in the round trip that also counts
    the throttle windows (SettingRateThrottle) of the request's view for a caller authenticated
    by `auth` (a token row; None: nothing is counted), so that a throttled endpoint makes one
    Redis round trip, not two. The counts are taken before the permission check, where DRF
    counts after it: a request the permissions refuse counts too. None without Redis; raises
    when Redis fails (the throttles then let the request through, as they would have)."""
    view = (getattr(request, "parser_context", None) or {}).get("view")
    windows: list[tuple[str, float]] = []
    if auth is not None and view is not None:
        for throttle in view.get_throttles():
            window = throttle.window(auth) if isinstance(throttle, SettingRateThrottle) else None
            if window is not None:
                windows.append(window)
    try:
        trip = redis_trip(stamp, windows)
    except Exception:
        setattr(request, COUNTED_AHEAD, dict.fromkeys(key for key, _ in windows))
        raise
    if trip is None:
        return None
    value, counts = trip
    setattr(request, COUNTED_AHEAD, {key: c for (key, _), c in zip(windows, counts, strict=True)})
    return value


class IngestThrottle(SettingRateThrottle):
    """Reports and uploads, at TOPOWEB_INGEST_RATE."""

    scope = "ingest"
    rate_setting = "TOPOWEB_INGEST_RATE"


class QueryThrottle(SettingRateThrottle):
    """Cost, placement and selection questions (each runs the cost model), at
    TOPOWEB_QUERY_RATE: open to anonymous callers when TOPOWEB_PUBLIC_READ is on."""

    scope = "query"
    rate_setting = "TOPOWEB_QUERY_RATE"
