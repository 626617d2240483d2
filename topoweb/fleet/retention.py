"""Snapshot retention: keep every snapshot that changed a server's wiring and its newest
TOPOWEB_KEEP_SNAPSHOTS (core.retention decides), plus whatever still points at one (the
current snapshot, a benchmark's); prune the rest, by the periodic
`fleet.prune_snapshots` task. The admin's snapshot list shows the counts (retention_counts)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from itertools import groupby
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from topoweb.core.retention import snapshots_to_keep
from topoweb.fleet import changes
from topoweb.fleet.models import Benchmark, Server, Snapshot

LAST_PRUNE_KEY = "topoweb:fleet:last-prune"


@dataclass(frozen=True)
class RetentionCounts:
    snapshots: int
    wiring_changes: int  # kept: each changed its server's wiring
    newest: int  # kept as one of its server's newest (and not a wiring change)
    referenced: int  # kept only because something points at it
    prunable: int


def _plan() -> Iterator[tuple[set[int], set[int], set[int], set[int]]]:
    """Per server: (wiring changes, newest, referenced-only, prunable) snapshot ids."""
    newest = settings.TOPOWEB_KEEP_SNAPSHOTS
    pinned = set(
        Server.objects.exclude(latest_snapshot=None).values_list("latest_snapshot_id", flat=True)
    )
    pinned |= set(Benchmark.objects.exclude(snapshot=None).values_list("snapshot_id", flat=True))
    rows = (
        Snapshot.objects.order_by("server_id", "captured_at", "id")
        .values_list("server_id", "id", "wiring_sha256")
        .iterator(chunk_size=5000)
    )
    for _, group in groupby(rows, key=lambda row: row[0]):
        ordered = [(snapshot_id, wiring) for _, snapshot_id, wiring in group]
        kept = snapshots_to_keep(ordered, newest)
        every = {snapshot_id for snapshot_id, _ in ordered}
        changes = set(kept.wiring_changes)
        recent = set(kept.newest) - changes
        referenced = (every & pinned) - kept.ids
        yield changes, recent, referenced, every - kept.ids - pinned


def retention_counts() -> RetentionCounts:
    changes = recent = referenced = prunable = 0
    for c, r, ref, p in _plan():
        changes, recent, referenced, prunable = (
            changes + len(c), recent + len(r), referenced + len(ref), prunable + len(p),
        )  # fmt: skip
    total = changes + recent + referenced + prunable
    return RetentionCounts(total, changes, recent, referenced, prunable)


def prune_snapshots() -> int:
    """Delete what the policy no longer keeps; the number deleted (also kept in the cache with
    the time, for the admin page)."""
    doomed = [pk for *_, prunable in _plan() for pk in prunable]
    deleted = 0
    for start in range(0, len(doomed), 1000):
        with transaction.atomic():
            chunk = Snapshot.objects.filter(pk__in=doomed[start : start + 1000])
            servers = set(chunk.values_list("server_id", flat=True))
            _, by_model = chunk.delete()
            deleted += by_model.get("fleet.Snapshot", 0)
            changes.servers_changed(servers)  # their snapshot and benchmark counts
    cache.set(LAST_PRUNE_KEY, {"at": time.time(), "deleted": deleted}, timeout=None)
    return deleted


def last_prune() -> dict[str, Any] | None:
    found: dict[str, Any] | None = cache.get(LAST_PRUNE_KEY)
    return found


def counts_document() -> dict[str, Any]:
    return asdict(retention_counts())
