"""A Content-Security-Policy on every HTML response (issue 15, hole 8): the acceptance pages
(a server's and a SKU's, whose name may hold a '/'), the admin, sign-in and the error pages
too, not only the dashboard; and none of them carries an inline script."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.web.conftest import report

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
SKU = "HGX H200/8-GPU"


@pytest.fixture
def signed_in(client: Client, django_user_model: Any, collector_client: Any) -> Client:
    body = report("gpu-a01", H200, host={"product_name": SKU})
    assert (
        collector_client("gpu-a01").post("/api/v1/reports", body, format="json").status_code == 201
    )
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    return client


def strict(response: Any) -> None:
    assert response["Content-Type"].startswith("text/html")
    policy = response["Content-Security-Policy"]
    assert re.search(r"script-src ([^;]*)", policy).group(1) == "'self'"  # type: ignore[union-attr]
    assert "frame-ancestors 'none'" in policy
    for tag in re.findall(r"<script\b[^>]*>", response.content.decode()):
        assert "src=" in tag or 'type="application/json"' in tag, tag


@pytest.mark.parametrize(
    "url",
    [
        "/servers/gpu-a01/acceptance/",
        "/skus/HGX%20H200/8-GPU/acceptance/",
        "/admin/",
        "/admin/fleet/server/",
        "/accounts/login/",
    ],
)
def test_every_html_page_carries_the_strict_policy(signed_in: Client, url: str) -> None:
    response = signed_in.get(url)

    assert response.status_code == 200, url
    strict(response)


def test_an_html_404_carries_the_policy_too(signed_in: Client) -> None:
    response = signed_in.get("/servers/no-such-host/acceptance/")

    assert response.status_code == 404
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_json_answers_carry_no_html_policy(signed_in: Client) -> None:
    response = signed_in.get("/api/v1/servers/")

    assert response["Content-Type"] == "application/json"
    assert "Content-Security-Policy" not in response
