"""Prometheus metrics: ingest outcomes counted where they happen, HTTP requests by
HttpMetricsMiddleware (`django_http_*`: labelled by view name, or "<unnamed view>", and
method, or "<invalid method>": fixed sets), and what the sweeps last published in the
cache: the analyses by status with the oldest pending one, and the fleet's gauges per server
and GPU (labelled as dcgm-exporter labels its series). A scrape never touches the database, so
it answers while the database is down.

Under gunicorn (topoweb/config/gunicorn.py) every worker process writes its counters to
PROMETHEUS_MULTIPROC_DIR and a scrape sums them, so consecutive scrapes never go backwards
whichever worker answers.

/metrics answers only to `Authorization: Bearer $TOPOWEB_METRICS_TOKEN`; without a token set
it is not served on the application's address at all, and `manage.py serve_metrics` serves the
same figures on a separate (internal) bind address."""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import REGISTRY as DJANGO_REGISTRY
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)

REPORTS = Counter(
    "topoweb_reports",
    "Reports and uploads received, by outcome: new, duplicate or rejected.",
    ["outcome"],
    registry=REGISTRY,
)
for _outcome in ("new", "duplicate", "rejected"):
    REPORTS.labels(_outcome)  # present at zero from the first scrape

# The analysis sweep (a worker) publishes the counts here; a scrape reads them back.
ANALYSES_CACHE_KEY = "topoweb:metrics:analyses"
ANALYSIS_STATUSES = ("pending", "running", "done", "failed")


def publish_analysis_counts(counts: dict[str, int], oldest_pending: float | None) -> None:
    """Called by the analysis sweep with the number of analyses in each status and when the
    oldest pending one was made (Unix time; None when none is pending)."""
    from django.core.cache import cache

    published = {"counts": counts, "at": time.time(), "oldest_pending": oldest_pending}
    cache.set(ANALYSES_CACHE_KEY, published, timeout=None)


class AnalysisCollector(Collector):
    """The analyses by status as last published, and when: from the cache, never the
    database; nothing at all when the cache cannot be read."""

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering must not read the cache

    def collect(self) -> Iterator[Metric]:
        from django.core.cache import cache

        try:
            published = cache.get(ANALYSES_CACHE_KEY)
        except Exception:  # the cache (Redis) is down: the other figures still answer
            log.warning("metrics: the analysis counts could not be read", exc_info=True)
            return
        if not published:
            return
        by_status = GaugeMetricFamily(
            "topoweb_analyses", "Analyses by status, as the last sweep counted.", labels=["status"]
        )
        for status in ANALYSIS_STATUSES:
            by_status.add_metric([status], published["counts"].get(status, 0))
        yield by_status
        yield GaugeMetricFamily(
            "topoweb_analyses_counted_timestamp_seconds",
            "When the sweep last counted the analyses (Unix time).",
            value=published["at"],
        )
        if published.get("oldest_pending") is not None:
            yield GaugeMetricFamily(
                "topoweb_analyses_oldest_pending_timestamp_seconds",
                "When the oldest analysis still pending was asked for (Unix time): the work "
                "queue's age is time() minus this.",
                value=published["oldest_pending"],
            )


REGISTRY.register(AnalysisCollector())


class GaugeFamily(TypedDict):
    """One gauge family as a sweep publishes it: samples are (label values, value)."""

    name: str
    help: str
    labels: list[str]
    samples: list[tuple[list[str], float]]


# The health sweep publishes the fleet's gauges (per server, labelled to join dcgm-exporter's
# series) here; a scrape reads them back, as it does the analysis counts.
FLEET_CACHE_KEY = "topoweb:metrics:fleet"


def publish_fleet_gauges(families: list[GaugeFamily]) -> None:
    from django.core.cache import cache

    cache.set(FLEET_CACHE_KEY, families, timeout=None)


class FleetCollector(Collector):
    """The fleet's gauges as the health sweep last published them (from the cache, never the
    database); nothing when the cache cannot be read."""

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        from django.core.cache import cache

        try:
            families: list[GaugeFamily] | None = cache.get(FLEET_CACHE_KEY)
        except Exception:  # the cache (Redis) is down: the other figures still answer
            log.warning("metrics: the fleet gauges could not be read", exc_info=True)
            return
        for family in families or []:
            gauge = GaugeMetricFamily(family["name"], family["help"], labels=family["labels"])
            for values, value in family["samples"]:
                gauge.add_metric(values, value)
            yield gauge


REGISTRY.register(FleetCollector())


def exposition() -> bytes:
    """The text a scrape gets: every process's counters in multiprocess mode, else this one's
    (ours, and the process and runtime figures in prometheus_client's default registry)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        registry.register(AnalysisCollector())
        registry.register(FleetCollector())
        return generate_latest(registry)
    return generate_latest(REGISTRY) + generate_latest(DJANGO_REGISTRY)


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.TOPOWEB_METRICS_TOKEN
    if not token:
        raise Http404("Metrics are not served here (set TOPOWEB_METRICS_TOKEN).")
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
        response = HttpResponse("A metrics token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="topoweb metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# The two HTTP families the dashboard and the alert rules read, under the names and labels
# django-prometheus gave them (it recorded eleven families on every request, nine of which
# nothing read). Its latency buckets.
RESPONSES = Counter(
    "django_http_responses_total_by_status_view_method",
    "Count of responses by status, view, method.",
    ["status", "view", "method"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "django_http_requests_latency_seconds_by_view_method",
    "Histogram of request processing time labelled by view.",
    ["view", "method"],
    buckets=(0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 25, 50, 75),
    registry=REGISTRY,
)


class HttpMetricsMiddleware:
    """Second in MIDDLEWARE (after the probes, which are not traffic): each response counted
    by status, view and method, and its time through every middleware after this one. A
    method outside HTTP's is labelled "<invalid method>", a path no view matched "<unnamed
    view>": made-up methods and paths must not grow the series without bound."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = request.resolver_match
        view = (match.view_name if match is not None else "") or "<unnamed view>"
        method = request.method if request.method in METHODS else "<invalid method>"
        RESPONSES.labels(str(response.status_code), view, method).inc()
        LATENCY.labels(view, method).observe(time.perf_counter() - started)
        return response


def count_report(outcome: str, **_: Any) -> None:
    REPORTS.labels(outcome).inc()
