"""Reader for topo output (to be written)."""

from __future__ import annotations

from topoweb.core.formats import ParseError


def parse(text: str):  # type: ignore[no-untyped-def]
    raise ParseError("the topo reader is not written yet")
