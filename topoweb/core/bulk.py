"""Building a large topology's objects without the cyclic garbage collector walking them as they
are made: a 600-device matrix makes 184,528 links (and as many dicts for its document), and
each allocation threshold crossed on the way starts a collection that walks everything built so
far, which cost more than building them. What is built here holds no reference cycles, so a
collection paused meanwhile misses no garbage; the collector runs as before once the
outermost pause ends, in any thread."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (nested and concurrent pauses count:
    the collector is enabled again, if it was, when the last one ends)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
