"""The API negotiates content with DRF's own negotiation (JSON, or 406); messages are made for
pages only."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient


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
