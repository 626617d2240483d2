"""The API's shared plumbing, used by every app and importing none: one JSON error shape for
every failure (and its OpenAPI description), the hostname rule, pagination, and the refusal of
paths no row can match. The throttles are in config.throttles, the one read rule in
config.permissions.

Every error answers `{"error": {"code": str, "message": str, "line": int | null,
"details": object | null}}`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from django.contrib.messages.middleware import MessageMiddleware
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.paginator import Page
from django.core.paginator import Paginator as DjangoPaginator
from django.core.validators import RegexValidator
from django.db import InterfaceError, OperationalError
from django.db.models import Count, QuerySet, Window
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found, server_error
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from topoweb.config.limits import LimitExceeded
from topoweb.core.formats import ParseError

# One serializer per class and thread, made once: DRF deep-copies every declared field each time
# a serializer is made, which can cost more than checking the body itself.
_readers = threading.local()


def validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """The body as `serializer_class(data=data).is_valid()` validates it: by the kept
    serializer of this class (validation keeps no state on it); a body it refuses goes
    through a fresh serializer, which words the 400 exactly as DRF always has."""
    kept: dict[type[serializers.Serializer], serializers.Serializer]
    kept = _readers.__dict__.setdefault("by_class", {})
    reader = kept.get(serializer_class)
    if reader is None:
        reader = kept[serializer_class] = serializer_class()
    try:
        return dict(reader.run_validation(data))
    except serializers.ValidationError:
        pass
    checked = serializer_class(data=data)
    checked.is_valid(raise_exception=True)
    return dict(checked.validated_data)


hostname_field = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "A hostname is letters, digits, dots, dashes, underscores."
)


class ErrorSerializer(serializers.Serializer):  # documents the one error shape
    class ErrorBody(serializers.Serializer):
        code = serializers.CharField()
        message = serializers.CharField()
        line = serializers.IntegerField(allow_null=True)
        details = serializers.JSONField(allow_null=True)

    error = ErrorBody()


ERRORS = {
    code: OpenApiResponse(ErrorSerializer, description=text)
    for code, text in (
        (400, "Invalid request or unparseable text (message and line from the parser)"),
        (401, "Missing or unknown token"),
        (403, "Not allowed"),
        (404, "Not found"),
        (413, "Larger than TOPOWEB_MAX_REPORT_BYTES"),
        (415, "A body that is not JSON, or for uploads not multipart or a form either"),
        (429, "Throttled"),
    )
}
READ_ERRORS = {k: ERRORS[k] for k in (400, 401, 403, 404)}

log = logging.getLogger(__name__)


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The report is larger than the server accepts."
    default_code = "too_large"


def error_body(
    code: str, message: str, line: int | None = None, details: Any = None
) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "line": line, "details": details}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ParseError):
        return Response(error_body("parse_error", exc.message, exc.line), status=400)
    if isinstance(exc, OperationalError | InterfaceError):
        # The database is down or unreachable: nothing was stored, and a collector keeps the
        # report in its spool and sends it again after Retry-After.
        log.warning("answering 503: the database is unavailable (%s)", exc)
        response = Response(
            error_body("unavailable", "The database is unavailable; retry later."), status=503
        )
        response["Retry-After"] = "30"
        return response
    if isinstance(exc, LimitExceeded):
        return Response(error_body("too_large", exc.message), status=413)
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    answer = drf_exception_handler(exc, context)
    if answer is None:
        return None  # a real bug: Django's handler500 answers it (also as JSON under /api/)
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        answer.data = error_body("invalid", "The request is not valid.", details=exc.detail)
    else:
        codes = exc.get_codes()
        answer.data = error_body(
            codes if isinstance(codes, str) else exc.default_code, str(exc.detail)
        )
    return answer


def json_404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Unknown URLs under /api/ answer the same JSON shape as everything else there."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "No such API endpoint."), status=404)
    return page_not_found(request, exception or Http404())


@csrf_exempt
def api_not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """The last route under /api/: a path no endpoint matches answers the JSON error shape
    whatever DEBUG says (handler404 answers only with DEBUG off; the debug page is HTML). A
    route rather than one more middleware, so that a request's stack stays as deep as it was."""
    return JsonResponse(error_body("not_found", "No such API endpoint."), status=404)


class ApiTrailingSlashMiddleware:
    """Every API route is written with a trailing slash. The same path without it (as deployed
    collectors post reports, and schedulers type questions by hand) reaches the same view for
    every method, with no redirect that would drop a POST body."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if path.startswith("/api/") and not path.endswith("/"):
            try:
                resolve(path + "/")
            except Resolver404:
                pass
            else:
                request.path_info = path + "/"
        return self.get_response(request)


class PageMessagesMiddleware(MessageMiddleware):
    """Django's messages (the admin's notices), for everything but the API: no API view adds
    or shows a message, and an untouched store writes nothing on the way out, yet making one
    (a cookie store with its signer, and a session store) is work an API request never uses."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith("/api/"):
            return cast(HttpResponse, self.get_response(request))
        return cast(HttpResponse, super().__call__(request))


class NulInPathMiddleware:
    """U+0000 names nothing stored (PostgreSQL cannot hold the character) and would fail as a
    500 in the first query that used it: before any view runs, a path with it answers 404 and
    a query parameter with it 400 (the error shape under /api/), whichever view it reaches."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path:
            raise Http404("No such path.")
        for key, value in request.GET.items():
            if "\x00" in key or "\x00" in value:
                problem = {key: ["Null characters are not allowed."]}
                if request.path.startswith("/api/"):
                    body = error_body("invalid", "The request is not valid.", details=problem)
                    return JsonResponse(body, status=400)
                return HttpResponseBadRequest("Null characters are not allowed.")
        return self.get_response(request)


def json_500(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("server_error", "Internal server error."), status=500)
    return server_error(request)


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


MAX_PAGE_NUMBER = 1_000_000


def window_page(queryset: QuerySet[Any, Any], bottom: int, top: int) -> QuerySet[Any, Any]:
    """The rows bottom..top of `queryset`, each with the total (`_window_total`)."""
    page: QuerySet[Any, Any] = queryset.annotate(_window_total=Window(Count("pk")))[bottom:top]
    return page


class WindowCountPaginator(DjangoPaginator):
    """Django's paginator over querysets (of models or values() dicts), except that a page
    with rows brings the total with it (COUNT(*) OVER ()): one query per page instead of a
    COUNT and then the page. An empty or unusual page (not a plain number, past the end) goes
    Django's way."""

    def page(self, number: Any) -> Page:
        plain = isinstance(number, int) or (isinstance(number, str) and number.isdigit())
        # A page number past any real fleet (its OFFSET could overflow PostgreSQL's bigint)
        # goes Django's way too: counted first, then a 404.
        if plain and 1 <= int(number) <= MAX_PAGE_NUMBER and "count" not in self.__dict__:
            bottom = (int(number) - 1) * self.per_page
            top = bottom + self.per_page
            rows = list(window_page(cast(QuerySet[Any, Any], self.object_list), bottom, top))
            if rows:
                first = rows[0]
                total = first["_window_total"] if isinstance(first, dict) else first._window_total
                self.__dict__["count"] = total  # the cached property's slot
                return Page(rows, int(number), self)
        return super().page(number)


class WindowCountPagination(Pagination):
    """Pagination of model querysets in one query per page (WindowCountPaginator)."""

    django_paginator_class = WindowCountPaginator
