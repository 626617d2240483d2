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
                opened = self.cache.get(f"{key}:opened")
                self.remaining = duration - (self.timer() - opened) if opened else duration
        except Exception:
            # A cache that is down must not turn reports away: they are worth more than the
            # limit. The failure is logged; the budget applies again once the cache is back.
            log.warning("throttle %s not applied: the cache is unreachable", self.scope)
            return True
        return count <= limit

    def _count(self, key: str, duration: int) -> int:
        """This request's number in the caller's window, which opens with its first request
        and lasts `duration` seconds (the counter's expiry)."""
        for _ in range(3):  # the window may close between add and incr: open a new one
            try:
                count = int(self.cache.incr(key))
                break
            except ValueError:  # no window open: open one
                self.cache.add(key, 0, timeout=duration)
        else:
            raise RuntimeError(f"throttle window {key} could not be opened")
        if count == 1:
            # The window's first request. `touch` also gives an expiry to a counter left
            # without one (incr keeps the expiry a counter has, and gives it none).
            self.cache.touch(key, duration)
            self.cache.set(f"{key}:opened", self.timer(), timeout=duration)
        return count

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
