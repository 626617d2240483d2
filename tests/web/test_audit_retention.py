"""The audit trail (uploads, tokens made and used, sign-ins: who, when, from where), seen by
staff in the admin and exported as JSON lines; snapshot retention (every wiring change and the
newest N kept, the rest pruned by the periodic task) with its counts on the admin page."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from tests.web.conftest import fixture_text, report
from topoweb.fleet import retention, tasks
from topoweb.fleet.access import create_api_token
from topoweb.fleet.models import AuditEvent, Benchmark, Server, Snapshot, Source
from topoweb.fleet.services import BenchmarkInput, ingest_report

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
A100 = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
PASSWORD = "audit-password"


@pytest.fixture
def staff(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("auditor", password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__endswith="auditevent"))
    user.user_permissions.add(*Permission.objects.filter(codename="view_snapshot"))
    client = Client()
    client.force_login(user)
    return client


def events(kind: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=kind).order_by("at", "id"))


def test_a_sign_in_and_a_failed_one_say_who_and_from_where(django_user_model: Any) -> None:
    django_user_model.objects.create_user("operator", password=PASSWORD)
    client = Client(REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="192.0.2.7")

    client.post("/accounts/login/", {"username": "operator", "password": "wrong"})
    client.post("/accounts/login/", {"username": "operator", "password": PASSWORD})

    (failed,) = events("sign_in_failed")
    (signed,) = events("sign_in")
    assert (failed.actor, failed.address) == ("operator", "10.1.2.3")
    assert (signed.actor, signed.address, signed.user.username) == ("operator", "10.1.2.3",
                                                                    "operator")  # fmt: skip
    assert signed.detail["forwarded_for"] == "192.0.2.7"
    assert signed.detail["backend"] == "django.contrib.auth.backends.ModelBackend"


def test_a_token_made_and_used_is_recorded_once_a_minute(client: Any) -> None:
    token = create_api_token("scheduler-a")  # as `manage.py create_api_token` does
    (made,) = events("token_created")
    prefix = token.partition(".")[0]  # the package's key: "<prefix>.<secret>"
    assert (made.actor, made.subject) == ("system", prefix)
    assert made.detail == {"token": "api", "for": "scheduler-a", "scope": "read"}

    for _ in range(3):
        answer = client.get("/api/v1/servers/", HTTP_AUTHORIZATION=f"Bearer {token}",
                            REMOTE_ADDR="10.9.8.7")  # fmt: skip
        assert answer.status_code == 200

    (used,) = events("token_used")  # three requests within a minute: one event
    assert (used.actor, used.address, used.subject) == ("scheduler-a", "10.9.8.7", prefix)
    assert used.detail["path"] == "/api/v1/servers/"


def test_a_collectors_report_records_its_token_use(collector_client: Any) -> None:
    collector_client("gpu-au1").post("/api/v1/reports", report("gpu-au1"), format="json")

    (used,) = events("token_used")
    assert used.actor == "collector gpu-au1" and used.detail["token"] == "collector"


def test_an_upload_records_who_uploaded_what(django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("uploader", password=PASSWORD)
    user.user_permissions.add(Permission.objects.get(codename="upload_files"))
    client = Client(REMOTE_ADDR="10.4.4.4")
    client.force_login(user)

    answer = client.post(
        "/api/v1/uploads/",
        {
            "hostname": "gpu-up1",
            "file": SimpleUploadedFile("topo.txt", fixture_text(H200).encode()),
            "create": "true",
        },
    )

    assert answer.status_code == 201, answer.content
    (upload,) = events("upload")
    assert (upload.actor, upload.address, upload.subject) == ("uploader", "10.4.4.4", "gpu-up1")
    snapshot = Snapshot.objects.get(server__hostname="gpu-up1")
    assert upload.detail["snapshot"] == snapshot.pk and upload.detail["created"] is True


def test_staff_read_the_trail_in_the_admin_and_export_it_as_json_lines(
    staff: Client, client: Any
) -> None:
    create_api_token("scheduler-b")
    create_api_token("scheduler-c")
    first = AuditEvent.objects.filter(kind="token_created").order_by("at").first()
    assert first is not None

    page = staff.get("/admin/fleet/auditevent/")
    exported = staff.get("/api/v1/audit/")
    after_first = (first.at + timedelta(microseconds=1)).isoformat()
    narrowed = staff.get("/api/v1/audit/", {"kind": "token_created", "since": after_first})

    assert page.status_code == 200
    prefixes = AuditEvent.objects.values_list("subject", flat=True)
    assert all(prefix.encode() in page.content for prefix in prefixes)
    assert exported.status_code == 200
    assert exported["Content-Type"] == "application/jsonl"
    lines = [json.loads(line) for line in b"".join(exported.streaming_content).splitlines()]
    assert [line["detail"]["for"] for line in lines if line["kind"] == "token_created"] == [
        "scheduler-b", "scheduler-c",
    ]  # fmt: skip
    assert set(lines[0]) == {"at", "kind", "actor", "address", "subject", "detail"}
    later = [json.loads(line) for line in b"".join(narrowed.streaming_content).splitlines()]
    assert [line["detail"]["for"] for line in later] == ["scheduler-c"]
    assert staff.get("/api/v1/audit/", {"since": "yesterday"}).status_code == 400
    # Not staff: refused.
    reader = create_api_token("not-staff")
    assert client.get("/api/v1/audit/", HTTP_AUTHORIZATION=f"Bearer {reader}").status_code == 403
    assert AuditEvent.objects.count() >= 3  # the admin cannot delete: read only
    assert staff.post(f"/admin/fleet/auditevent/{first.pk}/delete/").status_code == 403


def snapshot_of(host: str, topo: str, kernel: int, hours: int, **extra: Any) -> Snapshot:
    result = ingest_report(
        hostname=host,
        topo_text=fixture_text(topo),
        captured_at=timezone.now() - timedelta(hours=100 - hours),
        source=Source.COLLECTOR,
        host={"kernel": f"6.{kernel}"},  # new content, same wiring
        **extra,
    )
    assert result.created and result.snapshot is not None
    return result.snapshot


def test_retention_keeps_wiring_changes_and_the_newest_and_prunes_the_rest(
    settings: Any, staff: Client
) -> None:
    settings.TOPOWEB_KEEP_SNAPSHOTS = 3
    nccl = fixture_text("nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt")
    benchmark = {"benchmarks": [BenchmarkInput("nccl-tests", nccl)]}
    plan = [(H200, {}), (H200, {}), (H200, benchmark), (A100, {}), (A100, {})]
    plan += [(H200, {})] * 5
    made = [snapshot_of("gpu-ret1", topo, n, n, **extra) for n, (topo, extra) in enumerate(plan)]
    other = [snapshot_of("gpu-ret2", H200, n, n) for n in range(2)]
    pinned = Benchmark.objects.get(server__hostname="gpu-ret1").snapshot_id
    assert pinned == made[2].pk

    counts = retention.retention_counts()
    page = staff.get("/admin/fleet/snapshot/")

    assert counts == retention.RetentionCounts(
        snapshots=12, wiring_changes=4, newest=4, referenced=1, prunable=3
    )
    assert page.status_code == 200
    assert b"12 snapshots, 4 kept because each" in page.content and b"3 to prune" in page.content

    assert tasks.prune_snapshots() == 3  # what beat runs every TOPOWEB_PRUNE_EVERY_S

    left = set(Snapshot.objects.values_list("pk", flat=True))
    assert left == {made[i].pk for i in (0, 2, 3, 5, 7, 8, 9)} | {s.pk for s in other}
    assert Server.objects.get(hostname="gpu-ret1").latest_snapshot_id == made[9].pk
    assert retention.retention_counts().prunable == 0
    assert b"The last prune deleted 3." in staff.get("/admin/fleet/snapshot/").content
