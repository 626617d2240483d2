"""The orchestrator's two probes, answered before any other middleware (no Host check, no
session, not counted in the request metrics):

- `/healthz`, liveness: the process answers. It does no I/O, so a database or Redis blip never
  gets every web container restarted.
- `/readyz`, readiness: the database answers a query and Redis (the broker and cache) a ping;
  503 naming what failed otherwise, so a load balancer sends traffic elsewhere meanwhile."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)


@functools.cache
def _redis(url: str) -> redis.Redis:
    # A Redis that is down must fail the probe within its own timeout, not hang it.
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def readiness_problems() -> dict[str, str]:
    """What is not ready, by part ({} when all are)."""
    problems: dict[str, str] = {}
    try:
        _select_one()
    except DatabaseError:
        # A connection kept from before a database blip fails once though the database is
        # back: only a fresh connection's failure says the database is not ready.
        connection.close()
        try:
            _select_one()
        except DatabaseError as exc:
            problems["database"] = str(exc).strip() or type(exc).__name__
    if settings.REDIS_URL:
        try:
            _redis(settings.REDIS_URL).ping()
        except redis.RedisError as exc:
            problems["redis"] = str(exc).strip() or type(exc).__name__
    return problems


def healthz() -> HttpResponse:
    return JsonResponse({"status": "ok"})


def readyz() -> HttpResponse:
    problems = readiness_problems()
    if problems:
        log.warning("not ready: %s", problems)
        return JsonResponse({"status": "unavailable", "problems": problems}, status=503)
    return JsonResponse({"status": "ok"})


PROBES: dict[str, Callable[[], HttpResponse]] = {"/healthz": healthz, "/readyz": readyz}


class ProbeMiddleware:
    """First in MIDDLEWARE: a probe by IP address (Kubernetes sends the pod's) must not be
    refused by ALLOWED_HOSTS, and probes are not traffic worth a latency histogram."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is not None and request.method in ("GET", "HEAD"):
            return probe()
        return self.get_response(request)
