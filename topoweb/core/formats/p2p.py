"""Reader for p2p output (to be written)."""

from __future__ import annotations

from topoweb.core.formats import ParseError


def parse(text: str):  # type: ignore[no-untyped-def]
    raise ParseError("the p2p reader is not written yet")
