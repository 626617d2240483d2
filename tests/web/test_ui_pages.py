"""The dashboard's pages and static wiring, through Django's test client."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from topoweb.fleet.models import Server

pytestmark = pytest.mark.django_db

VENDOR = [
    "vendor/cytoscape.min.js",
    "vendor/uPlot.iife.min.js",
    "vendor/uPlot.min.css",
]


XSS_HOSTNAME = "<img src=x onerror=alert(1)>"


@pytest.fixture
def signed_in(client: Client, django_user_model) -> Client:  # type: ignore[no-untyped-def]
    client.force_login(django_user_model.objects.create_user("viewer"))
    Server.objects.create(hostname="gpu-a01")
    Server.objects.create(hostname=XSS_HOSTNAME)
    return client


def test_the_vendor_files_come_from_node_modules_and_nothing_else_of_it_is_exposed() -> None:
    for path in VENDOR:
        found = finders.find(path)
        assert found and "frontend/node_modules/" in str(found), path
    assert not finders.find("vendor/package.json")


def test_anonymous_visitors_are_sent_to_sign_in(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.TOPOWEB_PUBLIC_READ = False
    response = client.get("/servers/gpu-a01/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/servers/gpu-a01/"


@pytest.mark.parametrize(
    "url", ["/", "/servers/gpu-a01/", "/compare/?a=x&b=y", "/upload/", "/accounts/login/"]
)
def test_every_page_forbids_inline_script_and_has_none(signed_in: Client, url: str) -> None:
    response = signed_in.get(url)
    assert response.status_code == 200
    csp = response["Content-Security-Policy"]
    script_src = re.search(r"script-src ([^;]*)", csp)
    assert script_src and script_src.group(1) == "'self'"
    html = response.content.decode()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag, tag


def test_the_page_of_an_unknown_server_is_a_404(signed_in: Client) -> None:
    assert signed_in.get("/servers/no-such-host/").status_code == 404


def test_a_markup_hostname_reaches_the_page_only_escaped(signed_in: Client) -> None:
    response = signed_in.get(f"/servers/{XSS_HOSTNAME}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_the_upload_page_carries_a_csrf_token(signed_in: Client) -> None:
    html = signed_in.get("/upload/").content.decode()
    assert 'name="csrfmiddlewaretoken"' in html


def test_the_api_docs_keep_working_under_a_policy_of_their_own(signed_in: Client) -> None:
    response = signed_in.get("/api/docs/")
    assert response.status_code == 200
    # Swagger UI bootstraps inline; the docs show no stored data, so only they allow it.
    assert "script-src 'self' 'unsafe-inline'" in response["Content-Security-Policy"]
