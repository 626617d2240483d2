"""The dashboard's pages: each renders a shell with its facts in json_script; its ES module
fetches the rest from the JSON API."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from topoweb.config.permissions import may_read
from topoweb.fleet.selectors import server_by_hostname

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
