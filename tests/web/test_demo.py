"""`manage.py load_demo`: a demo fleet from the real fixtures, loaded idempotently."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command

from topoweb.fleet.models import Benchmark, Server, Snapshot

pytestmark = pytest.mark.django_db


def load() -> str:
    out = io.StringIO()
    call_command("load_demo", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_load_demo_builds_a_fleet_once_and_prints_the_admin_credentials(
    django_user_model: Any, client: Any
) -> None:
    first = load()
    counts = (Server.objects.count(), Snapshot.objects.count(), Benchmark.objects.count())
    second = load()

    assert counts == (Server.objects.count(), Snapshot.objects.count(), Benchmark.objects.count())
    assert "(0 new snapshots" in second
    assert first.splitlines()[-1] == "Demo admin: username 'admin', password 'topoweb-demo'"
    assert client.login(username="admin", password="topoweb-demo")
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
