"""Every export of every real topology sample (and of two synthetic large servers) is the file
it was before: each file's SHA-256, with its warnings, is pinned in export_digests.json, so a
faster export, a faster document reader or an export stored by the worker cannot drift from
what was served. Each is drawn from the topology as the web reads it back (its stored
document), once without host facts and once with the collector facts of a real report.

After a deliberate change of an export, rewrite the digests with:
    .venv/bin/python -m tests.core.test_export_stable
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests import synthetic
from tests.core.topo_fixtures import FIXTURES
from topoweb.core.ecosystem import EXPORT_FORMATS, render_export
from topoweb.core.fingerprint import topology_fingerprint
from topoweb.core.formats import parse_text
from topoweb.core.model import Topology

DIGESTS = Path(__file__).parent / "export_digests.json"
SAMPLES = sorted(p.name for p in FIXTURES.iterdir() if p.name.startswith(("topo_", "ncclxml_")))
SYNTHETIC = {
    "synthetic-nvswitch-72": lambda: synthetic.nvswitch_domain(72),
    "synthetic-8gpu-64nic": lambda: synthetic.many_nics(8, 64),
    "synthetic-ring-24": lambda: synthetic.gpu_ring(24),
}
# A real collector report's NVML and host facts (one H200): bus ids, PCIe and CPU model
# reach the NCCL XML and gres.conf; on other samples they name GPUs the matrix lacks.
REPORT = json.loads(
    (FIXTURES / "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json").read_text()
)
CASES = [*SAMPLES, *SYNTHETIC]


def _topology(case: str) -> Topology:
    text = SYNTHETIC[case]() if case in SYNTHETIC else (FIXTURES / case).read_text()
    parsed = parse_text(text)
    assert isinstance(parsed, Topology)
    # As the web reads it: the stored document, through JSON.
    return Topology.from_document(json.loads(json.dumps(parsed.to_document())))


def exports_of(case: str) -> dict[str, Any]:
    """fmt (and fmt+facts) -> [sha256 of the file, its filename, its warnings]."""
    topo = _topology(case)
    fingerprint = topology_fingerprint(topo)
    out: dict[str, Any] = {}
    for facts in (False, True):
        for fmt in EXPORT_FORMATS:
            export = render_export(
                topo,
                fmt,
                name="host-1",
                nvml=REPORT["nvml"] if facts else None,
                host=REPORT["host"] if facts else None,
                fingerprint=fingerprint,
                gpu_model="NVIDIA H200" if facts else None,
            )
            digest = hashlib.sha256(export.body.encode()).hexdigest()
            key = f"{fmt}+facts" if facts else fmt
            out[key] = [digest, export.filename, export.content_type, list(export.warnings)]
    return out


EXPECTED: dict[str, Any] = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def test_every_case_has_pinned_exports() -> None:
    assert sorted(EXPECTED) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_exports_are_the_files_pinned(case: str) -> None:
    assert exports_of(case) == EXPECTED[case]


if __name__ == "__main__":
    DIGESTS.write_text(json.dumps({c: exports_of(c) for c in CASES}, indent=1) + "\n")
