"""The report path's statements written out (fleet.statements) read what the ORM queries they
replace read, on PostgreSQL here and on SQLite (the embedded default) in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from tests.web.conftest import H200, RTX6000, add
from topoweb.fleet import statements
from topoweb.fleet.access import create_collector_token, revoke_collector_token
from topoweb.fleet.models import CollectorToken, Server, Snapshot, TopologyClass

pytestmark = pytest.mark.django_db


def test_the_server_to_store_is_the_orms_server_with_its_current_snapshots_columns() -> None:
    add("gpu-01", H200, "HGX H200", "NVIDIA H200")
    Server.objects.filter(hostname="gpu-01").update(labels={"rack": "r7", "sku": "lab"})
    stored = Server.objects.select_related("latest_snapshot").get(hostname="gpu-01")
    current = stored.latest_snapshot
    assert current is not None

    found = statements.server_to_store("gpu-01", current.captured_at + timedelta(seconds=1))
    assert found is not None
    server, newest = found
    previous = server.latest_snapshot
    assert previous is not None
    assert (
        server.pk,
        server.hostname,
        server.labels,
        server.sku_name,
        server.topology_class_id,
    ) == (
        stored.pk,
        "gpu-01",
        {"rack": "r7", "sku": "lab"},
        stored.sku_name,
        current.topology_class_id,
    )
    read = ("pk", "server_id", "gpu_count", "gpu_model", "gpu_models", "cpu_model")
    assert [getattr(previous, f) for f in (*read, "wiring_sha256")] == [
        getattr(current, f) for f in (*read, "wiring_sha256")
    ]
    assert server.previous_warnings == current.document["warnings"]  # type: ignore[attr-defined]
    assert newest
    # A capture as old as the current one is still the newest; an earlier one is not.
    assert statements.server_to_store("gpu-01", current.captured_at) == (server, True)
    earlier = statements.server_to_store("gpu-01", current.captured_at - timedelta(seconds=1))
    assert earlier is not None and not earlier[1]


def test_a_server_without_a_snapshot_or_none_at_all() -> None:
    Server.objects.create(hostname="empty-01")
    found = statements.server_to_store("empty-01", timezone.now())
    assert found is not None
    server, newest = found
    assert (server.latest_snapshot, newest, server.labels, server.topology_class_id) == (
        None,
        True,
        {},
        None,
    )
    assert statements.server_to_store("nobody", timezone.now()) is None


def test_a_class_is_read_with_the_names_the_orm_reads() -> None:
    add("rtx-01", RTX6000, "ESC8000A")
    TopologyClass.objects.update(cpu_model="AMD EPYC 9454 48-Core Processor")
    stored = TopologyClass.objects.get()
    found = statements.topology_class_names(stored.fingerprint)
    assert found is not None
    assert (found.pk, found.sku_name, found.gpu_model, found.cpu_model) == (
        stored.pk,
        stored.sku_name,
        stored.gpu_model,
        "AMD EPYC 9454 48-Core Processor",
    )
    assert statements.topology_class_names("no such fingerprint") is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="written out for PostgreSQL")
def test_a_collector_token_is_found_as_the_packages_manager_finds_it() -> None:
    key = create_collector_token("gpu-01")
    other = create_collector_token("gpu-02")
    CollectorToken.objects.filter(hostname="gpu-02").update(
        expiry_date=timezone.now() - timedelta(days=1), last_used_at=timezone.now()
    )
    prefix, _, secret = key.partition(".")
    for presented in (key, other, f"{prefix}.{secret[::-1]}", f"nobody.{secret}"):
        try:
            expected = CollectorToken.objects.get_from_key(presented)
        except CollectorToken.DoesNotExist:
            expected = None
        found = statements.usable_collector_token(presented)
        assert (found and _fields(found)) == (expected and _fields(expected)), presented
    assert statements.usable_collector_token(key) is not None  # a token that opens
    revoke_collector_token(CollectorToken.objects.get(hostname="gpu-01"))
    assert statements.usable_collector_token(key) is None
    assert CollectorToken.objects.filter(revoked=True).count() == 1


def _fields(token: CollectorToken) -> dict[str, Any]:
    return {f.attname: getattr(token, f.attname) for f in CollectorToken._meta.concrete_fields}


def _row(model: Any, pk: int) -> dict[str, Any]:
    return dict(model.objects.filter(pk=pk).values().get())


def test_a_row_inserted_and_updated_is_the_row_save_writes() -> None:
    """Every column the statement writes is the one `save()` writes (defaults, auto_now_add,
    foreign keys, JSON): a field added to the model that the statements missed fails here."""
    add("gpu-01", H200, "HGX H200")
    server = Server.objects.select_related("latest_snapshot").get()
    template = server.latest_snapshot
    assert template is not None

    def copy() -> Snapshot:
        fields = {
            f.attname: getattr(template, f.attname)
            for f in Snapshot._meta.concrete_fields
            if not f.primary_key and f.name not in ("received_at", "content_sha256")
        }
        return Snapshot(**fields | {"nvml": {"gpus": [{"name": "x"}]}, "gpu_models": {"a": 2}})

    saved, written, with_server = copy(), copy(), copy()
    saved.content_sha256, written.content_sha256 = "a" * 64, "b" * 64
    with_server.content_sha256 = "c" * 64
    saved.save()
    document = statements.snapshot_document(template.document, "", None, None)
    statements.insert_row(written, {"document": document})
    assert written.pk is not None and not written._state.adding
    # The same insert with its server's update in one statement (PostgreSQL) writes the same.
    server.sku_name = "HGX H200 (rev 1)"
    statements.insert_snapshot_for_server(
        with_server, document, server, ["sku_name", "latest_snapshot"]
    )
    assert with_server.pk is not None and not with_server._state.adding
    stored = _row(Server, server.pk)
    assert (stored["sku_name"], stored["latest_snapshot_id"]) == (
        "HGX H200 (rev 1)",
        with_server.pk,
    )
    rows = [_row(Snapshot, s.pk) for s in (saved, written, with_server)]
    for row in rows:
        del row["id"], row["content_sha256"], row["received_at"]
    assert rows[1] == rows[0] and rows[2] == rows[0]

    server.last_seen_at = timezone.now()
    server.sku_name = "HGX H200 (rev 2)"
    server.latest_snapshot = written
    statements.update_row(server, ["last_seen_at", "sku_name", "latest_snapshot"])
    stored = _row(Server, server.pk)
    assert (stored["last_seen_at"], stored["sku_name"], stored["latest_snapshot_id"]) == (
        server.last_seen_at,
        "HGX H200 (rev 2)",
        written.pk,
    )


def test_a_new_server_with_its_first_snapshot_is_the_rows_save_writes() -> None:
    """PostgreSQL's one statement for both (ids drawn from the sequences, each row naming the
    other) writes what saving them writes; later rows still get ids of their own."""
    add("gpu-01", H200, "HGX H200")
    template = Snapshot.objects.get()
    seen = timezone.now()

    def server(hostname: str) -> Server:
        return Server(hostname=hostname, sku_name="HGX H200", labels={"rack": "r1"},
                      topology_class_id=template.topology_class_id, last_seen_at=seen)  # fmt: skip

    def snapshot(of: Server) -> Snapshot:
        fields = {
            f.attname: getattr(template, f.attname)
            for f in Snapshot._meta.concrete_fields
            if not f.primary_key and f.name not in ("server", "received_at")
        }
        return Snapshot(server=of, **fields)

    saved_server = server("gpu-02")
    saved_server.save()
    saved = snapshot(saved_server)
    saved.save()
    saved_server.latest_snapshot = saved
    saved_server.save()
    new_server = server("gpu-03")
    written = snapshot(new_server)
    document = statements.snapshot_document(template.document, "", None, None)
    statements.insert_new_server(new_server, written, document)

    assert (written.server_id, new_server.latest_snapshot_id) == (new_server.pk, written.pk)
    servers = [_row(Server, s.pk) for s in (saved_server, new_server)]
    snapshots = [_row(Snapshot, s.pk) for s in (saved, written)]
    linked = (servers[1]["latest_snapshot_id"], snapshots[1]["server_id"])
    assert linked == (written.pk, new_server.pk)
    for row in servers:
        del row["id"], row["hostname"], row["created_at"], row["latest_snapshot_id"]
    for row in snapshots:
        del row["id"], row["server_id"], row["received_at"]
    assert servers[1] == servers[0] and snapshots[1] == snapshots[0]
    assert Server.objects.create(hostname="gpu-04").pk > new_server.pk


def test_a_re_reports_document_is_copied_from_the_current_snapshot_in_the_database() -> None:
    add("gpu-01", H200)
    current = Snapshot.objects.get()
    sql, params = statements.snapshot_document(
        current.document, current.wiring_sha256, current, current.document["warnings"]
    )
    assert params == [current.pk] and sql.startswith("(SELECT")
    # Other warnings, or another wiring, send the document itself.
    assert statements.snapshot_document(current.document, "other", current, None)[1] != [current.pk]


def test_on_sqlite_a_late_capture_is_stored_without_becoming_current(tmp_path: Path) -> None:
    """The embedded default runs the same statements: a report, a newer one, then one captured
    before both, on a SQLite database of its own."""
    env: dict[str, Any] = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "topoweb.config.settings",
        "DEBUG": "1",
    }
    env.pop("REDIS_URL", None)
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True)
    script = textwrap.dedent(
        f"""
        from datetime import datetime, timezone
        from topoweb.fleet.models import Server
        from topoweb.fleet.services import ingest_report
        from topoweb.fleet.statements import server_to_store
        text = open({str(Path(settings.BASE_DIR) / "tests/fixtures" / H200)!r}).read()
        def at(hour):
            return datetime(2026, 11, 29, hour, tzinfo=timezone.utc)
        ids = [
            ingest_report(hostname="gpu-01", topo_text=text, captured_at=at(hour),
                          source="collector", host={{"kernel": str(hour)}}).snapshot.pk
            for hour in (10, 12, 11)
        ]
        server, newest = server_to_store("gpu-01", at(9))
        print(ids, Server.objects.get().latest_snapshot_id, server.latest_snapshot.pk, newest)
        """
    )
    done = subprocess.run(
        [*manage, "shell", "-c", script], env=env, check=True, capture_output=True, text=True
    )
    # Three snapshots; the second stays current, and a capture older than it is not newest.
    assert done.stdout.splitlines()[-1] == "[1, 2, 3] 2 2 False"


def test_a_statement_for_thousands_of_ids_runs_in_parts() -> None:
    """More ids than one statement may take (PostgreSQL's 65,535 parameters): every part runs."""
    first = Server.objects.create(hostname="a-01")
    last = Server.objects.create(pk=10**6 + 80_000, hostname="z-01")  # in the last part
    table, sku = statements.table_name(Server), statements.column_name(Server, "sku_name")
    pk = statements.column_name(Server, "id")
    others = range(10**6, 10**6 + 70_000)  # no such servers
    statements.execute_for_ids(
        f"UPDATE {table} SET {sku} = %s WHERE {pk} IN ({{ids}})",
        [first.pk, *others, last.pk],
        ["HGX"],
    )
    assert list(Server.objects.values_list("sku_name", flat=True)) == ["HGX", "HGX"]
