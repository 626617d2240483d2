"""Printable HTML acceptance reports (plain templates, no scripts) for vendors and buyers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from topoweb.config.permissions import may_read
from topoweb.health import selectors

_PLOT_WIDTH = 560
_ROW_HEIGHT = 22


def server_acceptance_page(request: HttpRequest, hostname: str) -> HttpResponse:
    if not may_read(request.user):
        return redirect_to_login(request.get_full_path())
    server = selectors.server_with_health(hostname)
    if server.latest_snapshot_id is None:
        # A host known only by its benchmarks: say what is missing rather than answer 404.
        return render(request, "health/server_acceptance_empty.html", {"server": server})
    report = selectors.acceptance_document(server)  # read only: stale ones are queued already
    computed_at = datetime.fromisoformat(report["computed_at"]) if report["computed_at"] else None
    context = {"server": server, "report": report, "computed_at": computed_at}
    return render(request, "health/server_acceptance.html", context)


def _strip_plot(distribution: list[dict[str, Any]]) -> dict[str, Any]:
    """Positions for a server-rendered SVG strip plot: one row per figure, one dot per server,
    scaled to that figure's own maximum so rows of different magnitude stay readable."""
    rows = []
    for i, item in enumerate(distribution):
        top = max(item["max_gbps"], 1e-9)
        y = 14 + i * _ROW_HEIGHT
        dots = [
            {
                "x": round(200 + (_PLOT_WIDTH - 220) * v / top, 1),
                "y": y,
                "host": host,
                "value": v,
                "outlier": host in item["outliers"],
            }
            for host, v in item["values"].items()
        ]
        median_x = round(200 + (_PLOT_WIDTH - 220) * item["median_gbps"] / top, 1)
        rows.append({"label": item["figure"], "y": y, "dots": dots, "median_x": median_x})
    return {"width": _PLOT_WIDTH, "height": 20 + len(rows) * _ROW_HEIGHT, "rows": rows}


def sku_acceptance_page(request: HttpRequest, sku_name: str) -> HttpResponse:
    if not may_read(request.user):
        return redirect_to_login(request.get_full_path())
    data = selectors.sku_acceptance(sku_name)
    return render(
        request,
        "health/sku_acceptance.html",
        {"data": data, "plot": _strip_plot(data["distribution"])},
    )
