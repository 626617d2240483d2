"""The dashboard's pages: each renders a shell with its facts in json_script; its ES module
fetches the rest from the JSON API."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from topoweb.config.permissions import may_read
from topoweb.core.export import matrix_csv
from topoweb.core.svg import graph_svg
from topoweb.fleet.fabric_selectors import fabric_by_name
from topoweb.fleet.models import Server
from topoweb.fleet.selectors import GraphNotDrawn, graph_elements, server_by_hostname
from topoweb.health.selectors import stored_matrix

View = Callable[..., HttpResponse]


def readable(view: View) -> View:
    """Pages follow the API's read rule: signed-in users, or anyone with TOPOWEB_PUBLIC_READ."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not may_read(request.user):
            return redirect_to_login(request.get_full_path())
        return view(request, *args, **kwargs)

    return wrapper


def _page(request: HttpRequest, template: str, page: str, **data: Any) -> HttpResponse:
    context = {
        "page": page,
        "page_data": {"page": page, "signed_in": request.user.is_authenticated, **data},
    }
    return render(request, template, context)


@require_GET
@readable
def fleet(request: HttpRequest) -> HttpResponse:
    return _page(request, "ui/fleet.html", "fleet", query=request.GET.dict())


@require_GET
@readable
def server(request: HttpRequest, hostname: str) -> HttpResponse:
    server_by_hostname(hostname)  # an unknown hostname is a 404 page, not an empty shell
    return _page(request, "ui/server.html", "server", hostname=hostname)


def _with_topology(hostname: str) -> Server:
    """The server, 404 before its first topology; its topology is not read (a 576-GPU one
    takes a second): the exports below serve what the worker stored."""
    server = server_by_hostname(hostname)
    if server.latest_snapshot is None:
        raise Http404(f"{hostname!r} has no topology yet")
    return server


@require_GET
@readable
def graph_svg_export(request: HttpRequest, hostname: str) -> HttpResponse:
    """The server's graph as SVG, drawn from the same positions as the page; ?nics=all or
    grouped picks the NIC-group mode."""
    server = _with_topology(hostname)
    nics = request.GET.get("nics", "")
    collapsed = {"all": False, "grouped": True}.get(nics)
    assert server.latest_snapshot is not None  # _with_topology answered 404 otherwise
    try:
        graph = graph_elements(server.latest_snapshot)
    except GraphNotDrawn as exc:
        return HttpResponse(str(exc), status=409, content_type="text/plain")
    svg = graph_svg(graph, collapsed=collapsed, title=f"{hostname} topology")
    response = HttpResponse(svg, content_type="image/svg+xml; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="{_file_name(hostname)}-graph.svg"'
    return response


@require_GET
@readable
def matrix_csv_export(request: HttpRequest, hostname: str) -> HttpResponse:
    """The matrix view as CSV: ?mode=class|measured|ratio, ?direction=uni|bi."""
    server = _with_topology(hostname)
    mode = request.GET.get("mode", "class")
    direction = request.GET.get("direction", "uni")
    if mode not in ("class", "measured", "ratio") or direction not in ("uni", "bi"):
        return HttpResponse(
            "mode must be class, measured or ratio; direction uni or bi",
            status=400,
            content_type="text/plain",
        )
    doc = stored_matrix(server)
    if doc is None:
        raise Http404(f"{hostname!r} is not assessed yet: its matrix comes with the assessment")
    response = HttpResponse(matrix_csv(doc, mode, direction), content_type="text/csv")
    response["Content-Disposition"] = (
        f'attachment; filename="{_file_name(hostname)}-matrix-{mode}.csv"'
    )
    return response


def _file_name(hostname: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in hostname)[:100] or "server"


@require_GET
@readable
def compare(request: HttpRequest) -> HttpResponse:
    return _page(
        request,
        "ui/compare.html",
        "compare",
        a=request.GET.get("a", ""),
        b=request.GET.get("b", ""),
    )


@require_GET
@readable
def upload(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    return _page(request, "ui/upload.html", "upload", hostname=request.GET.get("host", ""))


@require_GET
@readable
def fabrics(request: HttpRequest) -> HttpResponse:
    """The InfiniBand fabrics, and (signed in) a form to upload an ibnetdiscover capture."""
    return _page(request, "ui/fabrics.html", "fabrics")


@require_GET
@readable
def fabric(request: HttpRequest, name: str) -> HttpResponse:
    fabric_by_name(name)  # an unknown name is a 404 page, not an empty shell
    return _page(request, "ui/fabric.html", "fabric", name=name, host=request.GET.get("host", ""))
