"""`manage.py load_demo`: a demo fleet from the real fixtures, loaded idempotently."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.web.conftest import FIXTURES
from topoweb.fleet.changes import servers_changed
from topoweb.fleet.management.commands import load_demo
from topoweb.fleet.models import Benchmark, Server, Snapshot
from topoweb.fleet.services import ingest_upload

pytestmark = pytest.mark.django_db


def load() -> str:
    out = io.StringIO()
    call_command("load_demo", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_load_demo_builds_a_fleet_once_and_prints_the_admin_credentials(
    django_user_model: Any, client: Any
) -> None:
    first = load()
    assert client.login(username="admin", password="topoweb-demo")
    ingest_upload(  # someone's own server, next to the demo fleet
        hostname="lab-01",
        text=(FIXTURES / "topo_41_rtx5090-2gpu-phb-blackwell-consumer.txt").read_text(),
        uploaded_by=None,
        create=True,
    )
    counts = (Server.objects.count(), Snapshot.objects.count(), Benchmark.objects.count())
    second = load()

    assert counts == (Server.objects.count(), Snapshot.objects.count(), Benchmark.objects.count())
    demo = Server.objects.filter(labels__has_key="fixture").count()
    assert f"Demo fleet: {demo} servers (0 new snapshots" in second
    assert "; 1 other servers left as they are." in second  # uploads are not demo servers
    assert first.splitlines()[-1] == "Demo admin: username 'admin', password 'topoweb-demo'"
    # Rerunning it keeps the admin's password hash: a browser signed in stays signed in.
    assert client.get("/upload/").status_code == 200  # not a redirect to sign in
    assert Server.objects.get(hostname="lab-01").latest_snapshot is not None
    # GPU models are GPUs, never the SKU or platform name of the demo server.
    models: dict[str, set[str]] = {}
    for server in Server.objects.filter(labels__has_key="fixture"):
        models.setdefault(server.sku_name, set()).add(server.latest_snapshot.gpu_model)
    assert models["GTX 1070/1080 7-GPU rig"] == {"GeForce GTX 1070"}  # the weaker of its GPUs
    # The rig's GPUs differ: its p2p run names them on a01; a02/a03 have only INDEX.tsv's word.
    rig = {
        s.hostname: s.latest_snapshot.gpu_models
        for s in Server.objects.filter(sku_name="GTX 1070/1080 7-GPU rig")
    }
    assert rig["gtx-rig-a01"]["models"] == [["GeForce GTX 1070", 6], ["GeForce GTX 1080", 1]]
    assert [rig[h]["source"] for h in sorted(rig)] == ["benchmark", "uploader", "uploader"]
    assert "DGX A100" not in models["DGX A100"]
    every = set().union(*models.values())
    assert not any(model.startswith(("DGX", "HGX")) or "x " in model for model in every)
    # Several servers per SKU, each with the real capture of its fixture.
    v100 = Server.objects.filter(labels__fixture__startswith="topo_12_").order_by("hostname")
    assert [s.hostname for s in v100] == [
        "dgx1v-a01",
        "dgx1v-a02",
        "dgx1v-a03",
        "dgx1v-a04",
    ]
    assert {s.sku_name for s in v100} == {"DGX-1V (V100 32GB)"}
    assert [s.differs_from_sku for s in v100] == [False, False, False, True]
    assert v100[0].latest_snapshot.gpu_count == 8
    # Benchmarks INDEX.tsv pairs with a capture hang off that capture's first server.
    p2p = Benchmark.objects.get(server__hostname="esc8000a-ada-a01")
    assert p2p.kind == "p2p-bandwidth-latency"
    assert p2p.snapshot == p2p.server.latest_snapshot


def test_without_a_broker_ingest_is_quiet(tmp_path: Any) -> None:
    """`make run` has no broker: tasks run inline, and neither a "Task ... succeeded" line per
    task nor kombu's "No hostname was supplied" about the unused memory:// broker is printed."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "topoweb.config.settings",
        "DEBUG": "1",  # as `make run` sets it
    }
    env.pop("REDIS_URL")
    topo = FIXTURES / "topo_41_rtx5090-2gpu-phb-blackwell-consumer.txt"
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True)
    done = subprocess.run(
        [*manage, "import_topo", str(topo), "--host", "ws-01"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )

    assert done.stdout.splitlines() == [f"{topo}: stored as new snapshot 1 of ws-01"]
    assert done.stderr == ""


def test_servers_the_demo_deletes_leave_the_kept_server_list_at_once(
    client: Any, django_user_model: Any
) -> None:
    """A rerun deletes demo servers of an older naming scheme, as every write does: a list
    read before (kept whole, config.answers.kept_read) does not show them after."""
    old = Server.objects.create(hostname="old-demo-01", labels={"fixture": "topo_00_gone"})
    servers_changed([old.pk])
    client.force_login(django_user_model.objects.create(username="reader", is_staff=True))
    listed = client.get("/api/v1/servers/", {"search": "old-demo"}).json()["results"]
    assert [row["hostname"] for row in listed] == ["old-demo-01"]
    load_demo._delete(Server.objects.filter(hostname="old-demo-01"))
    assert client.get("/api/v1/servers/", {"search": "old-demo"}).json()["results"] == []


def test_on_the_embedded_default_a_servers_fabrics_read_answers(tmp_path: Any) -> None:
    """SQLite has no JSON containment: the server page's fabrics panel answered 500 on the
    embedded default while PostgreSQL answered."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "topoweb.config.settings",
        "DEBUG": "1",
    }
    env.pop("REDIS_URL")
    topo = FIXTURES / "topo_41_rtx5090-2gpu-phb-blackwell-consumer.txt"
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True)
    subprocess.run(
        [*manage, "import_topo", str(topo), "--host", "ws-01"],
        env=env,
        check=True,
        capture_output=True,
    )
    read = (
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "client = Client(HTTP_HOST='127.0.0.1')\n"
        "client.force_login(User.objects.create_superuser('staff', password='x'))\n"
        "answer = client.get('/api/v1/servers/ws-01/fabrics/')\n"
        "print(answer.status_code, answer.content.decode())\n"
    )
    done = subprocess.run(
        [*manage, "shell", "-c", read], env=env, check=True, capture_output=True, text=True
    )

    status, _, body = done.stdout.strip().splitlines()[-1].partition(" ")
    assert status == "200", done.stdout + done.stderr
    assert json.loads(body) == []
