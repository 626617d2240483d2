"""Answers kept in Django's cache framework, in each process's memory in front of the shared
cache (Redis in production, local memory in the embedded default): questions with parameters
(placement, selection, serving) and documents derived from stored rows, each under a digest of
everything it depends on, so an entry is never stale, only evicted by the caches' own bounds
and TOPOWEB_ANSWER_CACHE_S."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Hashable
from typing import Any, TypeVar, cast

from django.conf import settings
from django.core.cache import cache, caches

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
