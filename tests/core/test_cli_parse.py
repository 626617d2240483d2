"""`python -m topoweb.core.cli parse FILE`: the contract other checks depend on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.core.topo_fixtures import FIXTURES, fixture_text

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_it_prints_the_h200_topology_document_and_exits_0() -> None:
    result = run_cli("parse", str(FIXTURES / "topo_01_h200-8gpu-12nic-numaid.txt"))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "topology"
    assert [d["id"] for d in doc["devices"]][:9] == [f"GPU{i}" for i in range(8)] + ["NIC0"]
    gpu0 = doc["devices"][0]
    assert {k: gpu0[k] for k in ("id", "kind", "cpu_affinity", "numa_affinity", "nic_name")} == {
        "id": "GPU0",
        "kind": "gpu",
        "cpu_affinity": "0-55,112-167",
        "numa_affinity": "0",
        "nic_name": None,
    }
    nic0 = doc["devices"][8]
    assert (nic0["kind"], nic0["nic_name"], nic0["cpu_affinity"]) == ("nic", "mlx5_0", None)
    assert len(doc["links"]) == 20 * 19 // 2
    assert doc["links"][0] == {"a": "GPU0", "b": "GPU1", "class": "NV18", "nvlinks": 18}
    assert {"a": "GPU0", "b": "NIC0", "class": "PXB", "nvlinks": 0} in doc["links"]


def test_it_reports_old_soc_as_sys() -> None:
    result = run_cli("parse", str(FIXTURES / "topo_05_azure-m60-2gpu-soc-nolegend.txt"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["links"] == [
        {"a": "GPU0", "b": "GPU1", "class": "SYS", "nvlinks": 0}
    ]


def test_a_truncated_matrix_exits_2_with_one_stderr_line_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "truncated.txt"
    bad.write_text("\n".join(fixture_text("topo_01").splitlines()[:8]) + "\n")
    result = run_cli("parse", str(bad))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "line 9" in lines[0] and "truncated" in lines[0]
