"""Paths and text of the real `nvidia-smi topo -m` samples, shared by the topo test modules."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOPO_FILES = sorted(p.name for p in FIXTURES.glob("topo_*.txt"))


def fixture_text(prefix: str) -> str:
    """The text of the one sample whose name starts with `prefix` (e.g. "topo_07")."""
    (match,) = [name for name in TOPO_FILES if name.startswith(prefix + "_")]
    return (FIXTURES / match).read_text(encoding="utf-8")
