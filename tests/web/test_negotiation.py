"""The API's content negotiation answers what DRF's answers, for every request; messages are
made for pages only."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import renderers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from topoweb.config.renderers import ContentNegotiation, JSONRenderer


class _JsonWithCharset(renderers.JSONRenderer):
    media_type = "application/json; charset=utf-8"


class _Anything(renderers.BaseRenderer):
    media_type = "*/*"
    format = "any"


RENDERER_SETS = [
    [JSONRenderer()],
    [JSONRenderer(), renderers.BrowsableAPIRenderer()],
    [renderers.BrowsableAPIRenderer(), JSONRenderer()],
    [_JsonWithCharset()],
    [_Anything(), JSONRenderer()],
    [renderers.StaticHTMLRenderer()],
    [],
]
ACCEPTS = [
    None,
    "*/*",
    "",
    " */*",
    "application/json",
    "application/json; indent=4",
    "text/html",
    "text/html, */*;q=0.1",
    "*/*; q=0.5",
    "application/*",
    "image/png",
    "*/*, application/json",
]
QUERIES = ["", "format=json", "format=api", "format=", "format=xml", "page=2"]


def _outcome(negotiation: Any, request: Request, renderer_set: list[Any], suffix: Any) -> Any:
    try:
        renderer, media_type = negotiation.select_renderer(request, renderer_set, suffix)
    except Exception as exc:  # noqa: BLE001 - the refusal is part of the answer
        return type(exc).__name__
    return renderer_set.index(renderer), media_type


@pytest.mark.parametrize("renderer_set", RENDERER_SETS)
def test_the_negotiation_picks_what_drfs_picks(renderer_set: list[Any]) -> None:
    factory = APIRequestFactory()
    for accept in ACCEPTS:
        for query in QUERIES:
            for suffix in (None, "json", "api"):
                headers = {} if accept is None else {"HTTP_ACCEPT": accept}
                request = Request(factory.get(f"/api/v1/servers/?{query}", **headers))
                ours = _outcome(ContentNegotiation(), request, renderer_set, suffix)
                request = Request(factory.get(f"/api/v1/servers/?{query}", **headers))
                drfs = _outcome(DefaultContentNegotiation(), request, renderer_set, suffix)
                assert ours == drfs, (accept, query, suffix)


@pytest.mark.django_db
def test_the_api_answers_json_or_406_as_before(reader: APIClient) -> None:
    assert reader.get("/api/v1/servers/").headers["Content-Type"] == "application/json"
    assert reader.get("/api/v1/servers/", HTTP_ACCEPT="*/*").status_code == 200
    assert reader.get("/api/v1/servers/", HTTP_ACCEPT="text/html").status_code == 406
    assert reader.get("/api/v1/servers/", {"format": "xml"}).status_code == 404


@pytest.mark.django_db
def test_messages_are_made_for_pages_and_not_for_the_api(reader: APIClient) -> None:
    from django.contrib import messages
    from django.contrib.auth import get_user_model
    from django.test import Client

    api = reader.get("/api/v1/servers/")
    assert api.status_code == 200 and not hasattr(api.wsgi_request, "_messages")
    staff = get_user_model().objects.create_superuser("staff", "s@example.com", "pw")
    client = Client()
    client.force_login(staff)
    added = client.post(
        "/admin/auth/group/add/", {"name": "operators", "_save": "Save"}, follow=True
    )
    assert added.status_code == 200
    shown = [m.message for m in messages.get_messages(added.wsgi_request)]
    assert any("operators" in str(m) for m in shown), shown
