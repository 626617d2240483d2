"""Every real topology sample's graph (and a few synthetic servers', among them NVLink meshes
with many bent edges) is the drawing it was before: each graph document's SHA-256 is pinned in
graph_digests.json, so a faster layout cannot move a node, a route, a bend or a label.

After a deliberate change of the drawing, rewrite the digests with:
    .venv/bin/python -m tests.core.test_graph_stable
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import orjson
import pytest

from tests import synthetic
from tests.core.topo_fixtures import FIXTURES
from topoweb.core.export import graph_document
from topoweb.core.formats import parse_text
from topoweb.core.model import Topology

DIGESTS = Path(__file__).parent / "graph_digests.json"
SAMPLES = sorted(p.name for p in FIXTURES.iterdir() if p.name.startswith(("topo_", "ncclxml_")))
SYNTHETIC = {
    "synthetic-nvswitch-72": lambda: synthetic.nvswitch_domain(72),
    "synthetic-8gpu-64nic": lambda: synthetic.many_nics(8, 64),
    "synthetic-ring-24": lambda: synthetic.gpu_ring(24),
    "synthetic-xml-mesh-48x18": lambda: synthetic.nccl_xml(48, nvlinks=18),
    "synthetic-xml-mesh-64x6": lambda: synthetic.nccl_xml(64, nvlinks=6),
    "synthetic-xml-mesh-96x18": lambda: synthetic.nccl_xml(96, nvlinks=18),
    "synthetic-xml-switched-32": lambda: synthetic.nccl_xml(32, switched=True),
}
CASES = [*SAMPLES, *SYNTHETIC]


def graph_digest(case: str) -> str:
    text = SYNTHETIC[case]() if case in SYNTHETIC else (FIXTURES / case).read_text()
    topology = parse_text(text)
    assert isinstance(topology, Topology)
    graph = graph_document(topology)
    return hashlib.sha256(orjson.dumps(graph, option=orjson.OPT_SORT_KEYS)).hexdigest()


EXPECTED: dict[str, str] = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def test_every_case_has_a_pinned_graph() -> None:
    assert sorted(EXPECTED) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_the_graph_is_the_drawing_pinned(case: str) -> None:
    assert graph_digest(case) == EXPECTED[case]


if __name__ == "__main__":
    DIGESTS.write_text(json.dumps({c: graph_digest(c) for c in CASES}, indent=1) + "\n")
