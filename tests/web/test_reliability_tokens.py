"""Who may write (issue 15, hole 3): collector tokens write their own host's reports only, API
tokens read unless made with the upload scope, signed-in people upload only with the permission
staff grant, and the OpenAPI schema says which scheme each endpoint takes."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.web.conftest import fixture_text, keep_tasks_here, report, uploader
from topoweb.fleet.access import create_api_token
from topoweb.fleet.models import CollectorToken, Server, Snapshot

pytestmark = pytest.mark.django_db

V100 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"
H200 = "topo_01_h200-8gpu-12nic-numaid.txt"


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def upload(client: APIClient, hostname: str = "gpu-a01") -> Any:
    body = {"hostname": hostname, "text": fixture_text(V100), "create": True}
    return client.post("/api/v1/uploads", body)


def test_a_read_api_token_cannot_upload_for_any_host_and_the_answer_says_how_to(
    reader: APIClient,
) -> None:
    response = upload(reader)
    preview = reader.post("/api/v1/uploads/preview", {"text": fixture_text(V100)})

    assert response.status_code == 403
    assert "--scope upload" in response.json()["error"]["message"]
    assert preview.status_code == 403
    assert not Snapshot.objects.exists()
    assert reader.get("/api/v1/servers/").status_code == 200  # it still reads


def test_an_api_token_made_with_the_upload_scope_uploads() -> None:
    out = io.StringIO()
    call_command(
        "create_api_token", "lab-bot", "--scope", "upload", stdout=out, stderr=io.StringIO()
    )
    client = bearer(out.getvalue().strip().splitlines()[-1])

    assert upload(client).status_code == 201
    assert Snapshot.objects.get().uploaded_by.username == "lab-bot"
    assert client.get("/api/v1/servers/").status_code == 200


def test_an_unknown_scope_is_refused_when_the_token_is_made() -> None:
    with pytest.raises(ValueError, match="unknown scope 'admin'"):
        create_api_token("x", "admin")


def test_a_signed_in_person_without_the_upload_permission_cannot_upload(
    django_user_model: Any,
) -> None:
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("viewer"))

    response = upload(client)

    assert response.status_code == 403
    assert "fleet.upload_files" in response.json()["error"]["message"]
    assert not Server.objects.exists()


def test_staff_grant_the_upload_permission_and_then_the_person_uploads(
    django_user_model: Any,
) -> None:
    client = APIClient()
    client.force_login(uploader(django_user_model.objects.create_user("ana")))

    assert upload(client).status_code == 201


def test_a_collector_token_writes_its_own_host_only_and_nothing_else(
    collector_client: Any,
) -> None:
    client = collector_client("gpu-a01")

    own = client.post("/api/v1/reports", report("gpu-a01", H200), format="json")
    other = client.post("/api/v1/reports", report("gpu-a02", H200), format="json")
    as_upload = upload(client, "gpu-a01")

    assert (own.status_code, other.status_code, as_upload.status_code) == (201, 403, 401)
    assert [s.hostname for s in Server.objects.all()] == ["gpu-a01"]


def test_an_api_token_cannot_post_collector_reports(reader: APIClient) -> None:
    response = reader.post("/api/v1/reports", report("gpu-a01", H200), format="json")

    assert response.status_code == 401
    assert not Server.objects.exists()


def test_the_schema_names_the_scheme_of_each_endpoint(reader: APIClient) -> None:
    schema = reader.get("/api/schema/", {"format": "json"}).json()
    paths = schema["paths"]

    def security(path: str, method: str) -> list[str]:
        return sorted(k for item in paths[path][method]["security"] for k in item)

    assert security("/api/v1/reports/", "post") == ["collectorToken"]
    assert security("/api/v1/uploads/", "post") == ["apiToken", "cookieAuth"]
    assert security("/api/v1/servers/", "get") == ["apiToken", "cookieAuth"]
    assert "--scope upload" in paths["/api/v1/uploads/"]["post"]["description"]
    schemes = schema["components"]["securitySchemes"]
    assert "one host" in schemes["collectorToken"]["description"]
    assert "--scope upload" in schemes["apiToken"]["description"]


@pytest.mark.django_db(transaction=True)
def test_staff_make_a_collector_token_in_the_admin_see_it_once_and_revoke_it(
    django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package's admin page of keys, with the fleet's columns (committed for real, as the
    admin commits: the kept copy is forgotten after commit)."""
    keep_tasks_here(monkeypatch)
    staff = APIClient()
    staff.force_login(django_user_model.objects.create_superuser("op", password="pw"))

    made = staff.post(
        "/admin/fleet/collectortoken/add/",
        {"name": "gpu-a01", "hostname": "gpu-a01", "revoked": "", "_save": "Save"},
        follow=True,
    )

    token = CollectorToken.objects.get()
    shown = " ".join(str(m.message) for m in made.context["messages"])
    found = re.search(re.escape(token.prefix) + r"\.\w+", shown)  # shown once, here
    assert found is not None and "not be able to see it again" in shown
    client = bearer(found.group())
    assert client.post("/api/v1/reports", report("gpu-a01", H200), format="json").status_code == 201
    listed = staff.get("/admin/fleet/collectortoken/")
    assert token.prefix.encode() in listed.content and b"gpu-a01" in listed.content

    staff.post(
        f"/admin/fleet/collectortoken/{token.pk}/change/",
        {"name": "gpu-a01", "hostname": "gpu-a01", "revoked": "on", "_save": "Save"},
    )
    assert CollectorToken.objects.get().revoked
    refused = client.post("/api/v1/reports", report("gpu-a01", V100), format="json")
    assert refused.status_code == 401
