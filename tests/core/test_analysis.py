"""The analysis of a topology class, computed in the core without Django: what the worker
stores and what `python -m topoweb.core.cli analyse` prints."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from topoweb.core.analysis import analyse, factorisations, group_sizes
from topoweb.core.formats import parse_text
from topoweb.core.model import NcclRun, Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
A100_4NIC = "topo_28_a100-8gpu-nv12-4nic-pxb-pix-numaid.txt"
A100_ALLREDUCE = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"


def parsed(name: str) -> Topology:
    topology = parse_text((FIXTURES / name).read_text(encoding="utf-8"))
    assert isinstance(topology, Topology)
    return topology


@pytest.mark.parametrize(
    ("fixture", "largest_domain", "pair_classes"),
    [
        (
            "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt",
            8,
            {"NV1": 8, "NV2": 8, "NODE": 12},
        ),
        ("topo_17_rtx3090-2gpu-nv4-bridge-numaid-trailing-prompt.txt", 2, {"NV4": 1}),
        ("topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt", 1, {"NODE": 2, "SYS": 4}),
    ],
)
def test_the_summary_counts_pair_classes_and_the_largest_nvlink_domain(
    fixture: str, largest_domain: int, pair_classes: dict[str, int]
) -> None:
    summary = analyse(parsed(fixture)).summary

    assert summary["largest_nvlink_domain"] == largest_domain
    assert summary["gpu_pair_classes"] == pair_classes


def test_the_topology_class_analysis_carries_the_wiring_findings() -> None:
    result = analyse(parsed(A100_4NIC), "NVIDIA A100")

    assert [(f.kind, f.devices) for f in result.findings] == [
        ("nic_far_from_gpu", ("GPU4", "GPU5", "GPU6", "GPU7")),
        ("inconsistent_matrix", ("GPU0", "GPU2", "GPU3")),
    ]


def test_an_analysis_is_frozen_and_its_document_is_plain_json() -> None:
    result = analyse(parsed(A100_4NIC), "NVIDIA A100")

    with pytest.raises(dataclasses.FrozenInstanceError):
        result.costs = {}  # type: ignore[misc]
    doc = result.to_document()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["findings"][0]["kind"] == "nic_far_from_gpu"
    assert "calibrated_costs" not in doc  # nothing measured, nothing calibrated
    assert doc["calibration"] == {
        "applied": False,
        "scale": {},
        "alpha_us": {},
        "sources": [],
        "skipped": [],
        "benchmarks": [],
    }


def test_a_measured_run_on_the_class_calibrates_its_cost_tables() -> None:
    topology = parsed(A100_4NIC)
    run = parse_text((FIXTURES / A100_ALLREDUCE).read_text(encoding="utf-8"))
    assert isinstance(run, NcclRun)

    result = analyse(topology, "NVIDIA A100-SXM4-40GB", [(topology, "", run)])

    assert result.calibration["applied"] is True
    assert result.calibrated_costs is not None and result.calibrated_costs["calibrated"] is True
    assert result.costs["calibrated"] is False
    assert set(result.to_document()) >= {"calibrated_costs", "calibrated_p2p_prediction"}


def test_every_layout_of_eight_gpus_is_advised() -> None:
    result = analyse(parsed(A100_4NIC))

    advised = {(x["layout"]["tp"], x["layout"]["pp"], x["layout"]["dp"]) for x in result.layouts}
    assert advised == {(lay.tp, lay.pp, lay.dp) for lay in factorisations(8)}
    assert len(advised) == 10
    assert list(result.costs["groups"]) == ["2", "4", "8"]


def test_group_sizes_double_up_to_the_gpu_count() -> None:
    assert group_sizes(1) == []
    assert group_sizes(6) == [2, 4, 6]
    assert group_sizes(8) == [2, 4, 8]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_cli_prints_the_same_document_the_worker_stores() -> None:
    done = _cli("analyse", str(FIXTURES / A100_4NIC), "--gpu-model", "NVIDIA A100")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == analyse(parsed(A100_4NIC), "NVIDIA A100").to_document()


def test_the_cli_refuses_a_topology_given_as_a_benchmark_in_one_line() -> None:
    done = _cli("analyse", str(FIXTURES / A100_4NIC), "--benchmark", str(FIXTURES / A100_4NIC))

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "expected nccl-tests or p2pBandwidthLatencyTest output" in done.stderr
