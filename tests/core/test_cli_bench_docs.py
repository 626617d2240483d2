"""`python -m topoweb.core.cli parse` on benchmark outputs: the JSON contract others rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from topoweb.core.model import P2P_MATRIX_NAMES

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def fixture(prefix: str) -> Path:
    (path,) = FIXTURES.glob(f"{prefix}_*.txt")
    return path


def cli(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", "parse", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def parsed(path: Path) -> dict[str, Any]:
    proc = cli(path)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_an_nccl_tests_run_prints_the_contract_document() -> None:
    doc = parsed(fixture("nccl_11"))
    assert doc["kind"] == "nccl-tests"
    assert doc["collective"] == "all_reduce"
    assert doc["avg_busbw_gbps"] == 2.05774
    assert doc["errors"] == []
    assert len(doc["rows"]) == 28
    row = doc["rows"][17]
    assert row == {
        "bytes": 1048576,
        "count": 262144,
        "type": "float",
        "redop": "sum",
        "root": -1,
        "out_of_place": {"time_us": 279.5, "algbw_gbps": 3.75, "busbw_gbps": 3.75, "wrong": 0},
        "in_place": {"time_us": 280.2, "algbw_gbps": 3.74, "busbw_gbps": 3.74, "wrong": 0},
    }


def test_a_failed_nccl_run_prints_its_errors() -> None:
    doc = parsed(fixture("nccl_09"))
    assert doc["kind"] == "nccl-tests"
    assert doc["rows"] == []
    assert doc["errors"][0].startswith("node: Test CUDA failure common.cu:297")


def test_a_p2p_run_prints_the_contract_document() -> None:
    doc = parsed(fixture("p2p_05"))
    assert doc["kind"] == "p2p-bandwidth-latency"
    assert [set(g) >= {"index", "name", "pci_bus_id"} for g in doc["gpus"]] == [True] * 4
    assert doc["gpus"][2]["index"] == 2
    assert doc["gpus"][2]["name"] == "NVIDIA RTX 6000 Ada Generation"
    assert doc["gpus"][2]["pci_bus_id"] == "c1"
    assert doc["p2p_access"] == [[True] * 4] * 4
    assert list(doc["matrices"]) == list(P2P_MATRIX_NAMES)
    assert doc["matrices"]["bidirectional_p2p_enabled_gbps"][0][1] == 52.10
    assert doc["matrices"]["latency_cpu_p2p_enabled_us"][3] == [1.74, 1.71, 1.73, 2.05]


def test_an_elided_p2p_paste_leaves_its_missing_matrices_out() -> None:
    doc = parsed(fixture("p2p_09"))
    assert set(doc["matrices"]) == {
        "bidirectional_p2p_disabled_gbps",
        "bidirectional_p2p_enabled_gbps",
    }


def test_a_truncated_p2p_matrix_exits_2_with_one_line_naming_the_line(tmp_path: Path) -> None:
    lines = fixture("p2p_02").read_text().split("\n")
    broken = tmp_path / "p2p_cut.txt"
    broken.write_text("\n".join(lines[:16]))  # the first row of a 2x2 matrix only
    proc = cli(broken)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.strip() == (
        f"{broken}: line 16: the unidirectional_p2p_disabled_gbps matrix ends after 1 of its 2 rows"
    )
