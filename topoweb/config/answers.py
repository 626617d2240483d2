"""Answers kept in Django's cache framework, in each process's memory in front of the shared
cache (Redis in production, local memory in the embedded default): questions with parameters
(placement, selection, serving) and documents derived from stored rows, each under a digest of
everything it depends on, so an entry is never stale, only evicted by the caches' own bounds
and TOPOWEB_ANSWER_CACHE_S.

Reads a scheduler repeats (the server list, a selection or placement question) are kept whole,
as the bytes answered, under the fleet's version (`kept_read`): a value in the shared cache
that every write replaces (`fleet_changed`), so a repeated read costs one cache round trip
and no query, and the first read after any write computes its answer again."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any, TypeVar, cast

from django.conf import settings
from django.core.cache import cache, caches
from django.db import transaction

log = logging.getLogger(__name__)
T = TypeVar("T")


def _named(part: Any) -> Any:
    """A key part as text that is the same in every process (a function by its name, not its
    address)."""
    if callable(part) and hasattr(part, "__qualname__"):
        return f"{part.__module__}.{part.__qualname__}"
    if isinstance(part, tuple):
        return tuple(_named(p) for p in part)
    return part


def answer_key(key: Hashable) -> str:
    """The cache key of a question: a digest of the repr of its parts (dataclasses show every
    field they compare)."""
    return "answer:" + hashlib.sha256(repr(_named(key)).encode()).hexdigest()


def answer_once(key: Hashable, compute: Callable[[], T]) -> T:
    """The answer to a question that depends only on `key`, computed on the first ask and kept
    in this process (the `answers` cache, local memory) and in the shared cache. A computation
    that raises keeps nothing; a shared cache that is down costs the computation, never the
    answer."""
    name = answer_key(key)
    local = caches["answers"]
    found = local.get(name)
    if found is not None:
        return cast(T, found)
    try:
        found = cache.get(name)
    except Exception:  # noqa: BLE001 - a cache that is down: compute
        log.warning("answer cache unreachable", exc_info=True)
        found = None
    if found is not None:
        local.set(name, found, timeout=settings.TOPOWEB_ANSWER_CACHE_S)
        return cast(T, found)
    answer = compute()
    local.set(name, answer, timeout=settings.TOPOWEB_ANSWER_CACHE_S)
    try:
        cache.set(name, answer, timeout=settings.TOPOWEB_ANSWER_CACHE_S)
    except Exception:  # noqa: BLE001
        log.warning("answer not kept: the cache is unreachable", exc_info=True)
    return answer


# --- reads kept per version of the fleet -----------------------------------------------------

_VERSION_KEY = "fleet-version"
# A kept read is dropped after this many seconds even if no write replaced the version: it
# bounds how long one is served after a write whose new version the shared cache could not
# take (it was down), and what a process holds for reads nobody repeats.
KEPT_READ_S = 60
# A larger answer (a rack-scale server's detail) is served as computed, not kept: each process
# keeps a bounded number of reads, and a few such answers would hold a great deal of memory.
KEPT_READ_MAX_BYTES = 1024 * 1024


# This process's writes since it started: part of each kept read's key, so that the writer's
# own reads inside its transaction are computed again before the fleet's version changes.
_writes_here = 0


def fleet_changed() -> None:
    """Every kept read is stale: the fleet's version (shared by every process) is replaced when
    the caller's transaction commits, at once outside one, and this process's kept reads are
    set aside now, for the reads the writer makes before it commits. Other processes see the
    write only once it is committed, and the version changes then. Called by
    fleet.changes.servers_changed and the writes of what kept reads show beyond the servers'
    documents (a refitted calibration; a duplicate report's last_seen_at through
    `server_seen`)."""
    global _writes_here
    _writes_here += 1
    transaction.on_commit(_new_version)


def server_seen(before: datetime | None, now: datetime) -> None:
    """A duplicate report moved a server's last_seen_at from `before` to `now`. Kept reads
    are replaced only when the server had been silent for longer than KEPT_READ_S: a server
    seen again after a silence shows at once, and one that reports often does not replace
    every kept read of the fleet on each report (a fleet's reports are mostly duplicates).
    So a kept read's last_seen_at is never more than 2 x KEPT_READ_S behind: the first report
    after the read came within KEPT_READ_S of the one it shows, and the read is dropped
    KEPT_READ_S after it was kept."""
    if before is None or (now - before).total_seconds() > KEPT_READ_S:
        fleet_changed()


def _new_version() -> None:
    try:
        cache.set(_VERSION_KEY, uuid.uuid4().hex, timeout=None)
    except Exception:  # noqa: BLE001 - reads compute again while the cache is down
        log.warning("fleet version not replaced: the cache is unreachable", exc_info=True)


def _fleet_version() -> str | None:
    """The fleet's version; None when the shared cache cannot be reached (reads compute)."""
    try:
        version = cache.get(_VERSION_KEY)
        if version is None:  # never written, or evicted: a new one, agreed through `add`
            cache.add(_VERSION_KEY, uuid.uuid4().hex, timeout=None)
            version = cache.get(_VERSION_KEY)
    except Exception:  # noqa: BLE001
        log.warning("fleet version unreadable: the cache is unreachable", exc_info=True)
        return None
    return None if version is None else str(version)


def kept_read(key: Hashable, compute: Callable[[], bytes]) -> bytes:
    """The answer to a read that follows only from what the fleet's writes store, as the bytes
    served: kept in this process under the fleet's version and `key` (everything of the
    request the answer depends on), computed when the version changed since. A computation
    that raises (404, 400) keeps nothing."""
    version = _fleet_version()
    if version is None:
        return compute()
    name = answer_key(("kept read", version, _writes_here, key))
    local = caches["answers"]
    found = local.get(name)
    if found is None:
        found = compute()
        if len(found) <= KEPT_READ_MAX_BYTES:
            local.set(name, found, timeout=KEPT_READ_S)
    return cast(bytes, found)
