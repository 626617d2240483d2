"""Ingest of large reports without repeated work (issue 24: a 576-GPU or 600-NIC report answers
in under 2 s): a new class's document is the snapshot's, copied in the database rather than
sent twice; the NVLink summary is counted once; a wiring's fingerprint is kept by its digest."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.utils import timezone

from tests import synthetic
from tests.web.conftest import fixture_text
from topoweb.core.fingerprint import nvlink_summary, topology_fingerprint
from topoweb.core.formats import parse_text
from topoweb.core.model import Topology
from topoweb.fleet.models import Snapshot, Source, TopologyClass
from topoweb.fleet.services import ingest_report

pytestmark = pytest.mark.django_db

V100 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"


def ingest(hostname: str, text: str, **extra: Any) -> Any:
    return ingest_report(
        hostname=hostname,
        topo_text=text,
        captured_at=timezone.now(),
        source=Source.COLLECTOR,
        **extra,
    )


def test_a_new_class_holds_its_first_snapshots_document() -> None:
    done = ingest("v100-01", fixture_text(V100))
    ingest("v100-02", fixture_text(V100), host={"kernel": "6.8"})  # same class, not new

    snapshot = Snapshot.objects.get(pk=done.snapshot.pk)
    topology_class = TopologyClass.objects.get()

    assert topology_class.document == snapshot.document
    assert topology_class.document["links"]  # not the placeholder it was made with
    assert topology_class.to_domain() == snapshot.to_domain()
    assert (topology_class.nvlink_summary, snapshot.nvlink_summary) == ("NV1 x8, NV2 x8",) * 2
    assert snapshot.has_nvlink


def test_a_large_class_is_stored_whole() -> None:
    done = ingest("nvl-144", synthetic.nvswitch_domain(144))
    topology_class = TopologyClass.objects.get(pk=done.snapshot.topology_class_id)
    assert len(topology_class.document["links"]) == 144 * 143 // 2
    assert topology_class.document == Snapshot.objects.get(pk=done.snapshot.pk).document
    assert topology_class.nvlink_summary == f"NV18 x{144 * 143 // 2}"


@pytest.mark.parametrize(
    "name",
    [
        "topo_01_h200-8gpu-12nic-numaid.txt",
        V100,
        "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt",
    ],
)
def test_the_nvlink_summary_counts_what_it_did(name: str) -> None:
    topology = parse_text(fixture_text(name))
    assert isinstance(topology, Topology)
    counts = Counter(link.link_class for link in topology.gpu_links() if link.is_nvlink)
    before = ", ".join(
        f"{cls} x{n}" for cls, n in sorted(counts.items(), key=lambda kv: int(kv[0][2:]))
    )
    assert nvlink_summary(topology) == before


def test_a_fingerprint_kept_by_wiring_is_the_topologys() -> None:
    first = ingest("ring-24", synthetic.gpu_ring(24))
    again = ingest("ring-24b", synthetic.gpu_ring(24), host={"kernel": "x"})
    topology = Snapshot.objects.get(pk=first.snapshot.pk).to_domain()
    fingerprint = TopologyClass.objects.get(pk=first.snapshot.topology_class_id).fingerprint
    assert fingerprint == topology_fingerprint(topology)
    assert again.snapshot.topology_class_id == first.snapshot.topology_class_id


def test_the_documents_ingest_writes_are_compressed_with_lz4_where_the_server_has_it() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        (has_lz4,) = cursor.fetchone()
        cursor.execute(
            "SELECT attrelid::regclass::text || '.' || attname, attcompression "
            "FROM pg_attribute WHERE (attrelid, attname) IN "
            "(('fleet_snapshot'::regclass, 'document'), ('fleet_snapshot'::regclass, 'raw_text'),"
            " ('fleet_topologyclass'::regclass, 'document'))"
        )
        methods = dict(cursor.fetchall())
    assert len(methods) == 3
    assert set(methods.values()) == ({"l"} if has_lz4 else {""})
