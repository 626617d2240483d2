"""Ingest of large reports without repeated work (issue 24: a 576-GPU or 600-NIC report answers
in under 2 s): a new class's document is the snapshot's, copied in the database rather than
sent twice; the NVLink summary is counted once; a wiring's fingerprint is kept by its digest."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests import synthetic
from tests.core.topo_fixtures import glued_h200
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


def _insert_of_snapshot(queries: CaptureQueriesContext) -> str:
    (sql,) = [
        q["sql"] for q in queries.captured_queries if 'INSERT INTO "fleet_snapshot"' in q["sql"]
    ]
    return sql


def test_a_re_report_of_the_same_wiring_copies_its_document_in_the_database() -> None:
    text = synthetic.nvswitch_domain(72)
    first = ingest("nvl72-a", text, host={"kernel": "6.8.0-1"})
    with CaptureQueriesContext(connection) as queries:
        again = ingest("nvl72-a", text, host={"kernel": "6.8.0-2"})

    assert again.snapshot.pk != first.snapshot.pk
    stored = Snapshot.objects.get(pk=again.snapshot.pk).document
    topology = parse_text(text)
    assert isinstance(topology, Topology)
    assert stored == topology.to_document() == Snapshot.objects.get(pk=first.snapshot.pk).document
    insert = _insert_of_snapshot(queries)
    assert '"links"' not in insert and '(SELECT "document" FROM' in insert  # not sent again


def test_a_re_report_whose_reader_warned_otherwise_stores_its_own_document() -> None:
    plain = fixture_text("topo_01_h200-8gpu-12nic-numaid.txt")
    glued = glued_h200("0-55,112-167", "56-111,168-223")  # the same wiring, 8 reader warnings
    ingest("h200-w", plain)
    with CaptureQueriesContext(connection) as queries:
        again = ingest("h200-w", glued, host={"kernel": "x"})

    stored = Snapshot.objects.get(pk=again.snapshot.pk).document
    assert len(stored["warnings"]) == 8
    topology = parse_text(glued)
    assert isinstance(topology, Topology)
    assert stored == topology.to_document()
    assert '"warnings"' in _insert_of_snapshot(queries)  # sent, not copied
