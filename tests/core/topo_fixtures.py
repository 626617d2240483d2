"""Paths and text of the real `nvidia-smi topo -m` samples, shared by the topo test modules."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOPO_FILES = sorted(p.name for p in FIXTURES.glob("topo_*.txt"))


def fixture_text(prefix: str) -> str:
    """The text of the one sample whose name starts with `prefix` (e.g. "topo_07")."""
    (match,) = [name for name in TOPO_FILES if name.startswith(prefix + "_")]
    return (FIXTURES / match).read_text(encoding="utf-8")


def glued_h200(cpus0: str = "0-45,92-137", cpus1: str = "46-91,138-183") -> str:
    """topo_01's real text with its affinity columns glued as a pasting tool glued them in the
    capture the issue quotes (`0-45,92-1370`): that machine's CPU lists, no tab before NUMA."""
    text = fixture_text("topo_01")
    text = text.replace("\t0-55,112-167\t0\t", f"\t{cpus0}0\t")
    return text.replace("\t56-111,168-223\t1\t", f"\t{cpus1}1\t")
