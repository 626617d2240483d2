"""Prometheus metrics: ingest outcomes and request latency counted in-process, analysis states
and durations read from the database at scrape time (so the worker processes need no exporter)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from topoweb.analysis.models import Analysis

REGISTRY = CollectorRegistry(auto_describe=True)

REPORTS = Counter(
    "topoweb_reports",
    "Reports and uploads received, by outcome: new, duplicate or rejected.",
    ["outcome"],
    registry=REGISTRY,
)
for _outcome in ("new", "duplicate", "rejected"):
    REPORTS.labels(_outcome)  # present at zero from the first scrape

REQUEST_SECONDS = Histogram(
    "topoweb_request_duration_seconds",
    "Time to answer an HTTP request, by method and route.",
    ["method", "route"],
    registry=REGISTRY,
)


class AnalysisCollector(Collector):
    def describe(self) -> Iterator[Metric]:
        # Named here so that registering at import time never queries the database.
        yield GaugeMetricFamily("topoweb_analyses", "Analyses by status.", labels=["status"])
        yield GaugeMetricFamily("topoweb_analysis_duration_seconds_sum", "")
        yield GaugeMetricFamily("topoweb_analysis_duration_seconds_count", "")

    def collect(self) -> Iterator[Metric]:
        by_status = GaugeMetricFamily("topoweb_analyses", "Analyses by status.", labels=["status"])
        counts = dict(
            Analysis.objects.values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        for status in Analysis.Status.values:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status
        done = Analysis.objects.filter(duration_s__isnull=False).aggregate(
            total=Sum("duration_s"), n=Count("id")
        )
        yield GaugeMetricFamily(
            "topoweb_analysis_duration_seconds_sum",
            "Total seconds spent computing finished analyses.",
            value=done["total"] or 0.0,
        )
        yield GaugeMetricFamily(
            "topoweb_analysis_duration_seconds_count",
            "Number of finished analyses with a recorded duration.",
            value=done["n"],
        )


REGISTRY.register(AnalysisCollector())


def metrics_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


class RequestLatencyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        # The route pattern, not the path: hostnames in URLs would explode the label set.
        route = match.route if match is not None else "unmatched"
        REQUEST_SECONDS.labels(request.method or "", route).observe(time.perf_counter() - started)
        return response


def count_report(outcome: str, **_: Any) -> None:
    REPORTS.labels(outcome).inc()
