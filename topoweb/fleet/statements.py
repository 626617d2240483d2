"""The report path's reads and marks, written out as SQL.

A collector's report runs the same few statements every time. Building and compiling an ORM
query (joins, deferred columns, annotations) costs a report more than running it, and the ORM
does that on every call. So these statements are written out once, and their tables and
columns are taken from the models. Only public APIs are used: a cursor, the models' `_meta`,
`Model.from_db` and `connection.ops`. The SQL runs on PostgreSQL and SQLite alike; the
duplicate's single statement is PostgreSQL's only, as are a collector token's row (SQLite's
cursor gives values the ORM converts; there the package's own query reads it) and the two that
do in one statement what SQLite does in two or three (a new snapshot with its server's update,
a new server with its first snapshot: data-modifying WITHs and sequences).
tests/web/test_statements.py checks each against the ORM query it replaces, so a model change
that they miss fails there.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import orjson
from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import Field, Model

from topoweb.fleet.models import AuditEvent, CollectorToken, Server, Snapshot, TopologyClass

M = TypeVar("M", bound=Model)


def _json(text: Any) -> Any:
    """A JSON column as the cursor gives it (text on both databases, without the ORM's
    converters), decoded."""
    return orjson.loads(text) if isinstance(text, str | bytes) else text


def _loaded(model: type[M], values: dict[str, Any]) -> M:
    """An instance of `model` with these columns (by attname) loaded, the rest deferred, as
    the ORM loads a row (`from_db` takes them in the model's field order)."""
    names = [f.attname for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(DEFAULT_DB_ALIAS, names, [values[n] for n in names])


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field), name  # a column, not a relation's other side
    return field


def table_name(model: Any) -> str:
    """A model's table, quoted for the connection's SQL."""
    return str(connection.ops.quote_name(model._meta.db_table))


def column_name(model: Any, field: str) -> str:
    """A model field's column, quoted for the connection's SQL."""
    return str(connection.ops.quote_name(model._meta.get_field(field).column))


def execute_for_ids(sql: str, ids: Iterable[int], before: Sequence[Any] = ()) -> None:
    """Run `sql`, whose `{ids}` is a list of placeholders, for these ids in one order, in
    parts of a bounded number of parameters (a SKU's thousands of servers); `before`: the
    parameters that come ahead of the ids."""
    chosen = sorted(set(ids))
    with connection.cursor() as cursor:
        for start in range(0, len(chosen), 1000):
            part = chosen[start : start + 1000]
            cursor.execute(sql.format(ids=", ".join(["%s"] * len(part))), [*before, *part])


# --- a collector's token ----------------------------------------------------------------------


@functools.cache
def _usable_token_sql() -> str:
    columns = ", ".join(connection.ops.quote_name(f.column) for f in _TOKEN_FIELDS)
    prefix, revoked = (column_name(CollectorToken, f) for f in ("prefix", "revoked"))
    return (
        f"SELECT {columns} FROM {table_name(CollectorToken)} WHERE {prefix} = %s AND NOT {revoked}"
    )


_TOKEN_FIELDS = CollectorToken._meta.concrete_fields


def usable_collector_token(key: str) -> CollectorToken | None:
    """PostgreSQL: the collector token that `key` opens, as the package's manager finds it
    (`get_from_key`: not revoked, by the key's prefix, the key verified by the package's
    `is_valid`), without building its query (a new collector's first report reads it); its
    expiry is the caller's to check, as with the manager. None when `key` opens none. The
    cursor gives PostgreSQL's columns as the ORM would (aware datetimes, booleans)."""
    prefix = key.partition(".")[0]
    with connection.cursor() as cursor:
        cursor.execute(_usable_token_sql(), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    token = CollectorToken.from_db(DEFAULT_DB_ALIAS, [f.attname for f in _TOKEN_FIELDS], row)
    return token if token.is_valid(key) else None


# --- the server a new report is stored on ----------------------------------------------------


@functools.cache
def _server_to_store_sql(vendor: str) -> str:
    server, snapshot = table_name(Server), table_name(Snapshot)
    s = {
        f: column_name(Server, f)
        for f in ("id", "hostname", "labels", "sku_name", "latest_snapshot", "topology_class")
    }
    p = {
        f: column_name(Snapshot, f)
        for f in (
            "id",
            "gpu_count",
            "gpu_model",
            "gpu_models",
            "cpu_model",
            "wiring_sha256",
            "document",
        )
    }
    captured = column_name(Snapshot, "captured_at")
    warnings = (
        f"p.{p['document']} -> 'warnings'"
        if vendor == "postgresql"
        else (f"json_extract(p.{p['document']}, '$.warnings')")
    )
    return f"""
SELECT s.{s["id"]}, s.{s["labels"]}, s.{s["sku_name"]}, s.{s["topology_class"]}, p.{p["id"]},
  p.{p["gpu_count"]}, p.{p["gpu_model"]}, p.{p["gpu_models"]}, p.{p["cpu_model"]},
  p.{p["wiring_sha256"]}, {warnings}, p.{captured} <= %s
FROM {server} s LEFT JOIN {snapshot} p ON p.{p["id"]} = s.{s["latest_snapshot"]}
WHERE s.{s["hostname"]} = %s
"""


def server_to_store(hostname: str, captured_at: datetime) -> tuple[Server, bool] | None:
    """The server a report of `hostname` is stored on (with its class), with what the ingest
    reads of its current snapshot as `server.latest_snapshot` (id, GPU count and models, CPU,
    wiring digest; its reader warnings as `server.previous_warnings`), and whether a report
    captured at `captured_at` is the newest capture (it becomes the current snapshot); None
    without such a server. One statement of a few columns, not the snapshot's texts and
    documents."""
    at = connection.ops.adapt_datetimefield_value(captured_at)
    with connection.cursor() as cursor:
        cursor.execute(_server_to_store_sql(connection.vendor), [at, hostname])
        row = cursor.fetchone()
    if row is None:
        return None
    server_id, labels, sku_name, class_id, snapshot_id, gpu_count, model, models = row[:8]
    cpu_model, wiring, warnings, newest = row[8:]
    server = _loaded(
        Server,
        {
            "id": server_id,
            "hostname": hostname,
            "labels": _json(labels),
            "sku_name": sku_name,
            "topology_class_id": class_id,
            "latest_snapshot_id": snapshot_id,
        },
    )
    if snapshot_id is None:
        return server, True
    server.latest_snapshot = _loaded(
        Snapshot,
        {
            "id": snapshot_id,
            "server_id": server_id,
            "gpu_count": gpu_count,
            "gpu_model": model,
            "gpu_models": _json(models),
            "cpu_model": cpu_model,
            "wiring_sha256": wiring,
        },
    )
    server.previous_warnings = _json(warnings)  # type: ignore[attr-defined]
    return server, bool(newest)


# --- a class's names --------------------------------------------------------------------------


@functools.cache
def _class_names_sql() -> str:
    columns = ", ".join(column_name(TopologyClass, f) for f in _CLASS_NAMES)
    return (
        f"SELECT {columns} FROM {table_name(TopologyClass)} "
        f"WHERE {column_name(TopologyClass, 'fingerprint')} = %s"
    )


def topology_class_names(fingerprint: str) -> TopologyClass | None:
    """The class of this fingerprint as a report reads it when it exists (most reports): the
    names it may fill in, not its topology document."""
    with connection.cursor() as cursor:
        cursor.execute(_class_names_sql(), [fingerprint])
        row = cursor.fetchone()
    if row is None:
        return None
    return _loaded(TopologyClass, dict(zip(_CLASS_NAMES, row, strict=True)))


_CLASS_NAMES = ("id", "sku_name", "gpu_model", "cpu_model")


# --- rows written ---------------------------------------------------------------------------


@functools.cache
def _insert_sql(model: type[Model], vendor: str, given: tuple[tuple[str, str], ...]) -> str:
    columns, marks = _columns_and_marks(model, given)
    pk = connection.ops.quote_name(model._meta.pk.column)
    return f"INSERT INTO {table_name(model)} ({columns}) VALUES ({marks}) RETURNING {pk}"


def _columns_and_marks(model: type[Model], given: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The columns a row of `model` is inserted with (all but its primary key) and what each
    is given: a parameter, or the SQL expression `given` names for its field."""
    values = dict(given)
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    return columns, ", ".join(values.get(f.name, "%s") for f in fields)


def _insert_params(obj: Model, given: dict[str, tuple[str, list[Any]]]) -> list[Any]:
    params: list[Any] = []
    for field in type(obj)._meta.concrete_fields:
        if field.primary_key:
            continue
        if field.name in given:
            params += given[field.name][1]
        else:
            params.append(field.get_db_prep_save(field.pre_save(obj, True), connection))
    return params


def _shape(given: dict[str, tuple[str, list[Any]]]) -> tuple[tuple[str, str], ...]:
    """What a statement built from `given` looks like (its fields and their SQL, not their
    parameters): the key its text is kept by."""
    return tuple(sorted((name, sql) for name, (sql, _) in given.items()))


def _stored(obj: Model) -> None:
    """`obj` as the ORM leaves a row it saved."""
    obj._state.adding, obj._state.db = False, DEFAULT_DB_ALIAS


def _update_params(obj: Model, names: Iterable[str]) -> list[Any]:
    """The values `obj.save(update_fields=names)` sends for these fields."""
    return [
        (field := _field(type(obj), n)).get_db_prep_save(field.pre_save(obj, False), connection)
        for n in names
    ]


def insert_row(obj: Model, given: dict[str, tuple[str, list[Any]]] | None = None) -> None:
    """Insert `obj` as `obj.save()` would (each field's `pre_save` and `get_db_prep_save`, what
    Django's own insert sends) and set its primary key; `given`: fields written by an SQL
    expression of their own instead, (SQL, parameters). No model signals are sent (nothing
    listens on the models written this way) and nothing is validated."""
    given = given or {}
    params = _insert_params(obj, given)
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(type(obj), connection.vendor, _shape(given)), params)
        (obj.pk,) = cursor.fetchone()
    _stored(obj)


@functools.cache
def _update_sql(model: type[Model], names: tuple[str, ...]) -> str:
    sets = ", ".join(f"{connection.ops.quote_name(_field(model, n).column)} = %s" for n in names)
    pk = connection.ops.quote_name(model._meta.pk.column)
    return f"UPDATE {table_name(model)} SET {sets} WHERE {pk} = %s"


def update_row(obj: Model, names: list[str]) -> None:
    """`obj.save(update_fields=names)` of a row known to exist, as one statement."""
    params = _update_params(obj, names)
    with connection.cursor() as cursor:
        cursor.execute(_update_sql(type(obj), tuple(names)), [*params, obj.pk])


# --- a new snapshot and its server ----------------------------------------------------------


@functools.cache
def _new_server_sql(shape: tuple[tuple[str, str], ...]) -> str:
    # Both ids drawn first from their tables' sequences (identity columns): each row names
    # the other, and Django's foreign keys are deferrable, initially deferred, so they are
    # checked at commit. Data-modifying WITHs run once, to completion.
    def sequence(model: type[Model]) -> str:
        # The table quoted as an identifier (its case kept); the column is taken literally.
        return f"nextval(pg_get_serial_sequence('{table_name(model)}', '{model._meta.pk.column}'))"

    def insert(model: type[Model], given: tuple[tuple[str, str], ...], pk: str) -> str:
        columns, marks = _columns_and_marks(model, given)
        pk_column = connection.ops.quote_name(model._meta.pk.column)
        # VALUES, not SELECT: PostgreSQL takes each parameter's type from its column there.
        return f"INSERT INTO {table_name(model)} ({pk_column}, {columns}) VALUES ({pk}, {marks})"

    server_id, snapshot_id = "(SELECT server FROM ids)", "(SELECT snapshot FROM ids)"
    server = insert(Server, (("latest_snapshot", snapshot_id),), server_id)
    snapshot = insert(Snapshot, (*shape, ("server", server_id)), snapshot_id)
    return (
        f"WITH ids AS (SELECT {sequence(Server)} AS server, {sequence(Snapshot)} AS snapshot),\n"
        f"new_server AS ({server}),\nnew_snapshot AS ({snapshot})\n"
        "SELECT server, snapshot FROM ids"
    )


def insert_new_server(server: Server, snapshot: Snapshot, document: tuple[str, list[Any]]) -> None:
    """Insert a new `server` with `snapshot` (its document written by `document`) as its
    current one: on PostgreSQL in one statement (a new collector's first report), elsewhere
    the server, then the snapshot with the server's update. Both get their primary keys."""
    if connection.vendor != "postgresql":
        insert_row(server)
        snapshot.server = server
        insert_snapshot_for_server(snapshot, document, server, ["latest_snapshot"])
        return
    given = {"document": document}
    # The ids each row names the other by are the statement's own: no parameter for them.
    server_params = _insert_params(server, {"latest_snapshot": ("", [])})
    snapshot_params = _insert_params(snapshot, {**given, "server": ("", [])})
    with connection.cursor() as cursor:
        cursor.execute(_new_server_sql(_shape(given)), [*server_params, *snapshot_params])
        server.pk, snapshot.pk = cursor.fetchone()
    _stored(server)
    _stored(snapshot)
    snapshot.server = server
    server.latest_snapshot = snapshot


@functools.cache
def _snapshot_and_server_sql(shape: tuple[tuple[str, str], ...], names: tuple[str, ...]) -> str:
    # In PostgreSQL a data-modifying WITH runs once, to completion, whatever the query reads
    # of it; the server's foreign key to the snapshot is checked at commit (Django's are
    # deferrable, initially deferred).
    pk = column_name(Snapshot, "id")
    sets = ", ".join(
        f"{column_name(Server, n)} = "
        + (f"(SELECT {pk} FROM new_snapshot)" if n == "latest_snapshot" else "%s")
        for n in names
    )
    server_pk = column_name(Server, "id")
    return (
        f"WITH new_snapshot AS ({_insert_sql(Snapshot, 'postgresql', shape)}),\n"
        f"server AS (UPDATE {table_name(Server)} SET {sets} WHERE {server_pk} = %s)\n"
        f"SELECT {pk} FROM new_snapshot"
    )


def insert_snapshot_for_server(
    snapshot: Snapshot, document: tuple[str, list[Any]], server: Server, names: list[str]
) -> None:
    """Insert `snapshot` (insert_row, its document written by `document`) and save `names` of
    its `server` (update_row; "latest_snapshot" the snapshot inserted): on PostgreSQL in one
    statement, a round trip fewer for every new report."""
    if connection.vendor != "postgresql":
        insert_row(snapshot, {"document": document})
        if "latest_snapshot" in names:
            server.latest_snapshot = snapshot
        update_row(server, names)
        return
    given = {"document": document}
    params = _insert_params(snapshot, given)
    params += _update_params(server, (n for n in names if n != "latest_snapshot"))
    with connection.cursor() as cursor:
        sql = _snapshot_and_server_sql(_shape(given), tuple(names))
        cursor.execute(sql, [*params, server.pk])
        (snapshot.pk,) = cursor.fetchone()
    _stored(snapshot)
    if "latest_snapshot" in names:
        server.latest_snapshot = snapshot


# --- a new snapshot's document ---------------------------------------------------------------


def snapshot_document(
    document: dict[str, Any], wiring: str, previous: Snapshot | None, previous_warnings: Any
) -> tuple[str, list[Any]]:
    """How a new snapshot's `document` is written (for insert_row): a copy of `previous`'s,
    made in the database, when that holds the very same document (its wiring digest covers
    all but the reader's warnings, `previous_warnings`, compared here): most re-reports,
    whose facts changed but not their matrix, and up to 10 MB of JSON for a 576-GPU domain
    neither sent nor parsed again. Else orjson's text, much faster than json.dumps (the
    document holds strings, integers, null, lists and objects only, so the JSON value stored
    is the one json.dumps gives; SQLite, which keeps the text, keeps it spaced differently);
    one orjson refuses (a lone surrogate) goes to the field's own encoding, which fails as it
    always has. `previous`: the server's current snapshot, read with its wiring_sha256 (it is
    pinned by the server, so it stays while the ingest's lock is held)."""
    column = column_name(Snapshot, "document")
    if (
        previous is not None
        and wiring
        and previous.wiring_sha256 == wiring
        and previous_warnings == document.get("warnings")
    ):
        pk = column_name(Snapshot, "id")
        return f"(SELECT {column} FROM {table_name(Snapshot)} WHERE {pk} = %s)", [previous.pk]
    try:
        text = orjson.dumps(document).decode()
    except orjson.JSONEncodeError:
        field = Snapshot._meta.get_field("document")
        return "%s", [field.get_db_prep_save(document, connection)]
    return ("CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"), [text]


# --- a duplicate -----------------------------------------------------------------------------

# The statement, run on its own (autocommit: it is its whole transaction), commits without
# waiting for the disk: set_config(..., true) holds for this transaction only, set by whichever
# of its updates writes a row (RETURNING runs per row written, a data-modifying WITH's too).
# What it writes are marks, the server's last_seen_at and the token's last_used_at, with the
# token-used event of the audit trail that goes with a mark (one a minute per token, itself a
# sample of its uses): a crash of PostgreSQL (not of a client) can lose the last few hundred
# milliseconds of them (at most 3 x wal_writer_delay), never a report, never a corrupt row,
# and the next report marks them again. The wait it saves, a WAL flush, is most of what a
# duplicate costs. A new report's own transaction, which follows at once, and every later one
# on the connection, commits durably as before (and flushes these with it); inside a caller's
# transaction the statement leaves the setting alone: it would hold for everything the caller
# writes.
_LAZY_COMMIT = "set_config('synchronous_commit', 'off', true)"


@functools.cache
def _duplicate_sql(marks_token: bool, audits: bool, lazy: bool) -> str:
    server, snapshot = table_name(Server), table_name(Snapshot)
    s = {f: column_name(Server, f) for f in ("id", "hostname", "last_seen_at")}
    p = {f: column_name(Snapshot, f) for f in ("id", "server", "content_sha256", "document")}
    # `seen` is the server's row as the statement found it: its last_seen_at before this one.
    # A row of nulls says no server of the hostname is stored: the report is the host's first.
    found = f"""
found AS (UPDATE {server} AS server SET {s["last_seen_at"]} = %s
  FROM {snapshot} AS snapshot, {server} AS seen
  WHERE server.{s["hostname"]} = %s AND snapshot.{p["server"]} = server.{s["id"]}
    AND snapshot.{p["content_sha256"]} = %s AND seen.{s["id"]} = server.{s["id"]}
  RETURNING server.{s["id"]}, snapshot.{p["id"]}, snapshot.{p["document"]} -> 'warnings',
    seen.{s["last_seen_at"]}{", " + _LAZY_COMMIT if lazy else ""})
SELECT * FROM found
UNION ALL
SELECT NULL, NULL, NULL, NULL{", NULL" if lazy else ""}
WHERE NOT EXISTS (SELECT FROM {server} WHERE {s["hostname"]} = %s)
"""
    parts = []
    if marks_token:
        # The collector token marked used too (whatever the report turns out to be), and the
        # audit event of that use written: one statement, and one commit, instead of three.
        used, pk = column_name(CollectorToken, "last_used_at"), column_name(CollectorToken, "id")
        parts.append(
            f"token AS (UPDATE {table_name(CollectorToken)} SET {used} = %s WHERE {pk} = %s"
            f"{' RETURNING ' + _LAZY_COMMIT if lazy else ''})"
        )
    if audits:
        parts.append(f"audit AS ({_insert_sql(AuditEvent, 'postgresql', ())})")
    return "WITH " + ",\n".join([*parts, found.strip()])


def mark_duplicate(
    hostname: str, digest: str, now: datetime, token: CollectorToken | None
) -> tuple[tuple[int, int, Any, datetime | None] | None, bool]:
    """PostgreSQL: the stored snapshot with this content for this host, found by the
    (server, content) unique index and its server marked seen at `now` (and `token` marked
    used, with the audit event of its use when it carries one: `token.unrecorded_use`) in one
    statement: ((server id, snapshot id, its reader warnings, the server's last_seen_at
    before) or None when the report is new, whether no server of `hostname` is stored)."""
    event = token.unrecorded_use if token is not None else None
    sql = _duplicate_sql(token is not None, event is not None, connection.get_autocommit())
    params: list[Any] = []
    if token is not None:
        params += [now, token.pk]
    if event is not None:
        params += _insert_params(event, {})
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, now, hostname, digest, hostname])
        row = cursor.fetchone()
    if token is not None:
        token.unrecorded_use = None
    if row is None:
        return None, False
    server_id, snapshot_id, warnings, seen_before = row[:4]
    if server_id is None:
        return None, True
    return (server_id, snapshot_id, _json(warnings), seen_before), False
