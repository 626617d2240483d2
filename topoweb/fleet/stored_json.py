"""How ingest writes a report's topology document to its JSON column: as orjson's text, or,
when the server's current snapshot already holds the very same document (the same wiring and
the same reader warnings: most re-reports, whose facts changed but not their matrix), as a
copy of that row's value made in the database, neither sent nor parsed again (10 MB of JSON
for a 576-GPU domain)."""

from __future__ import annotations

from typing import Any

import orjson
from django.db.models import JSONField, Subquery, Value
from django.db.models.functions import Cast

from topoweb.fleet.models import Snapshot


def document_json(document: dict[str, Any]) -> Any:
    """A topology document for its JSON column, encoded by orjson, much faster than
    json.dumps. The document holds strings, integers, null, lists and
    objects only, so the JSON value stored is the one json.dumps gives (SQLite, which keeps the
    text, keeps it spaced differently); one that orjson refuses (a lone surrogate) goes to the
    field's own encoding, which fails as it always has."""
    try:
        text = orjson.dumps(document).decode()
    except orjson.JSONEncodeError:
        return document
    return Cast(Value(text), JSONField())


def snapshot_document(
    document: dict[str, Any], wiring: str, previous: Snapshot | None, previous_warnings: Any
) -> Any:
    """The value to write for a new snapshot's `document`: a copy of `previous`'s when that
    holds the same document (its wiring digest covers all but the reader's warnings,
    `previous_warnings`, compared here), else document_json. `previous`: the server's current
    snapshot, read with its wiring_sha256 (it is pinned by the server, so it stays while the
    ingest's lock is held)."""
    if previous is None or not wiring or previous.wiring_sha256 != wiring:
        return document_json(document)
    if previous_warnings != document.get("warnings"):
        return document_json(document)
    return Subquery(Snapshot.objects.filter(pk=previous.pk).values("document"))
