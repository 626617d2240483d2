"""Throttles shared by every worker process: DRF's SimpleRateThrottle on Django's cache (Redis
in production, so every gunicorn worker counts against one budget).

Apart from config.api, which imports rest_framework.views: DRF imports the authentication
classes while rest_framework.views loads, and views import these."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)


class SettingRateThrottle(SimpleRateThrottle):
    """Per token (or user, or address), at the rate a setting names (read when DRF makes the
    throttle, once per request, so a settings change applies without a restart).

    Counting is the one piece not DRF's own: DRF keeps each caller's request history and
    writes it back after reading it, so callers racing on two workers can both take the last
    slot. Here a window that opens with the caller's first request is counted with the
    cache's atomic `incr` (Redis INCR), through Django's public cache API only.
    tests/web/test_throttles.py fails if DRF's or Django's side of this changes."""

    rate_setting = ""
    num_requests: int | None  # set by DRF from the rate
    duration: int | None

    def get_rate(self) -> str | None:
        return str(getattr(settings, self.rate_setting))

    def allow_request(self, request: Request, view: Any) -> bool:
        limit, duration = self.num_requests, self.duration
        key = self.get_cache_key(request, view)
        if limit is None or duration is None or key is None:
            return True
        self.remaining: float | None = None
        try:
            count = self._count(key, duration)
            if count > limit:
                self.remaining = self._left(key, duration)
        except Exception:
            # A cache that is down must not turn reports away: they are worth more than the
            # limit. The failure is logged; the budget applies again once the cache is back.
            log.warning("throttle %s not applied: the cache is unreachable", self.scope)
            return True
        return count <= limit

    def _count(self, key: str, duration: int) -> int:
        """This request's number in the caller's window, which opens with its first request
        and lasts `duration` seconds (the counter's expiry). A collector reporting less often
        than the window lasts opens one with most of its reports: two round trips then (the
        count that finds none, the add that opens it), one otherwise."""
        for _ in range(3):  # the window may close between incr and add: count again
            try:
                count = int(self.cache.incr(key))
            except ValueError:  # no window open: open one, counting this request
                if self.cache.add(key, 1, timeout=duration):
                    return 1
                continue
            if count == 1:
                # A counter left without an expiry (incr keeps the expiry a counter has, and
                # gives it none): it gets one now.
                self.cache.touch(key, duration)
            return count
        raise RuntimeError(f"throttle window {key} could not be opened")

    def _left(self, key: str, duration: int) -> float:
        """Seconds until the caller's window closes: the counter's time to live where the
        cache tells it (django-redis's `ttl`, Redis in production), else the whole window."""
        ttl = getattr(self.cache, "ttl", None)
        left = ttl(key) if ttl is not None else None
        return float(left) if isinstance(left, int) and left > 0 else float(duration)

    def wait(self) -> float | None:
        """Seconds until the caller's window closes (the Retry-After of a 429)."""
        remaining = getattr(self, "remaining", None)
        return None if remaining is None else max(0.0, remaining)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.auth is not None and hasattr(request.auth, "pk"):
            ident = f"{type(request.auth).__name__}:{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class IngestThrottle(SettingRateThrottle):
    """Reports and uploads, at TOPOWEB_INGEST_RATE."""

    scope = "ingest"
    rate_setting = "TOPOWEB_INGEST_RATE"


class QueryThrottle(SettingRateThrottle):
    """Cost, placement and selection questions (each runs the cost model), at
    TOPOWEB_QUERY_RATE: open to anonymous callers when TOPOWEB_PUBLIC_READ is on."""

    scope = "query"
    rate_setting = "TOPOWEB_QUERY_RATE"
