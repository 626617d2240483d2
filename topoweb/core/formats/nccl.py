"""Reader for nccl output (to be written)."""

from __future__ import annotations

from topoweb.core.formats import ParseError


def parse(text: str):  # type: ignore[no-untyped-def]
    raise ParseError("the nccl reader is not written yet")
