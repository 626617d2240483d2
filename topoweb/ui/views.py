"""The dashboard's pages: each renders a shell with its facts in json_script; its ES module
fetches the rest from the JSON API."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from topoweb.core.export import cytoscape_elements
from topoweb.core.formats import ParseError, parse_text
from topoweb.core.model import NcclRun, Parsed, Topology
from topoweb.fleet.selectors import server_by_hostname

View = Callable[..., HttpResponse]


def readable(view: View) -> View:
    """Pages follow the API's read rule: signed-in users, or anyone with TOPOWEB_PUBLIC_READ."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not (request.user.is_authenticated or settings.TOPOWEB_PUBLIC_READ):
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


@require_POST
def preview(request: HttpRequest) -> JsonResponse:
    """Parse pasted output without storing it: the upload page's preview (stateless, read-only).

    Answers the graph elements and a one-line summary, or 400 with the parser's message and line.
    """
    if not request.user.is_authenticated:
        return JsonResponse(
            {"error": {"code": "not_authenticated", "message": "Sign in first."}}, status=403
        )
    upload = request.FILES.get("file")
    try:
        text = upload.read().decode("utf-8") if upload else request.POST.get("text", "")
    except UnicodeDecodeError:
        return _parse_error("the file is not UTF-8 text", None)
    if len(text.encode()) > settings.TOPOWEB_MAX_REPORT_BYTES:
        return JsonResponse(
            {
                "error": {
                    "code": "too_large",
                    "message": "The output is larger than the upload limit.",
                }
            },
            status=413,
        )
    try:
        parsed = parse_text(text)
    except ParseError as exc:
        return _parse_error(exc.message, exc.line)
    return JsonResponse(preview_of(parsed))


def _parse_error(message: str, line: int | None) -> JsonResponse:
    shown = f"line {line}: {message}" if line is not None else message
    return JsonResponse(
        {"error": {"code": "parse_error", "message": shown, "line": line}}, status=400
    )


def preview_of(parsed: Parsed) -> dict[str, Any]:
    if isinstance(parsed, Topology):
        gpus, nics = parsed.gpus, parsed.nics
        nv = sorted({lnk.link_class for lnk in parsed.gpu_links() if lnk.is_nvlink})
        summary = f"nvidia-smi topo -m: {len(gpus)} GPUs, {len(nics)} NICs, " + (
            f"NVLink {'/'.join(nv)}" if nv else "no NVLink"
        )
        if parsed.warnings:
            summary += (
                f" ({len(parsed.warnings)} reader warning{'s' if len(parsed.warnings) > 1 else ''})"
            )
        # The same export the graph API draws, so the preview is what the server page will show.
        return {"kind": "topology", "summary": summary, "elements": cytoscape_elements(parsed)}
    if isinstance(parsed, NcclRun):
        summary = f"nccl-tests {parsed.collective or ''}: {len(parsed.rows)} sizes"
        if parsed.avg_busbw_gbps is not None:
            summary += f", average bus bandwidth {parsed.avg_busbw_gbps:g} GB/s"
        if parsed.errors:
            summary += f", {len(parsed.errors)} error(s) reported"
        return {"kind": "nccl-tests", "summary": summary, "elements": []}
    summary = f"p2pBandwidthLatencyTest: {len(parsed.gpus)} GPUs, matrices: " + (
        ", ".join(sorted(parsed.matrices)) or "none"
    )
    return {"kind": "p2p-bandwidth-latency", "summary": summary, "elements": []}
