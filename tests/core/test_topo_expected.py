"""Every real `nvidia-smi topo -m` sample reads to exactly the document stored for it.

The stored documents pin the whole result (devices in order with their affinity values and NIC
names, every link in order, warnings), so a faster reader cannot drift from the one they were
taken from. After a deliberate change of the reader, or a new sample, rewrite them with:
    python -c "import json; from tests.core.topo_fixtures import FIXTURES, TOPO_FILES; \
from topoweb.core.formats import parse_text; json.dump({n: parse_text((FIXTURES / n)\
.read_text(encoding='utf-8')).to_document() for n in TOPO_FILES}, \
open('tests/core/topo_expected.json', 'w'), indent=1)"
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.core.topo_fixtures import FIXTURES, TOPO_FILES
from topoweb.core.formats import parse_text

EXPECTED = json.loads((Path(__file__).parent / "topo_expected.json").read_text(encoding="utf-8"))


def test_every_sample_has_a_stored_document() -> None:
    assert sorted(EXPECTED) == TOPO_FILES


@pytest.mark.parametrize("name", TOPO_FILES)
def test_sample_reads_to_its_stored_document(name: str) -> None:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert parse_text(text).to_document() == EXPECTED[name]
