"""The `cost` and `place` commands: the exact JSON contract and one-line errors (exit 2).

They read a small tab-separated topo -m text (the layout of topo_22) and so need the real
topo reader, which lands from its own branch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# An HGX H100 8-GPU board without NICs, as nvidia-smi prints it (see topo_22).
_HEADER = "\t" + "\t".join(f"GPU{i}" for i in range(8)) + "\tCPU Affinity\tNUMA Affinity\n"
H100_TOPO = _HEADER + "".join(
    f"GPU{i}\t"
    + "\t".join(" X " if i == j else "NV18" for j in range(8))
    + f"\t{'0-95' if i < 4 else '96-191'}\t{0 if i < 4 else 1}\n"
    for i in range(8)
)
# Four L40S-style PCIe cards, two per socket (see topo_36).
PCIE_TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNODE\tSYS\tSYS\t0-95\t0\n"
    "GPU1\tNODE\t X \tSYS\tSYS\t0-95\t0\n"
    "GPU2\tSYS\tSYS\t X \tNODE\t96-191\t1\n"
    "GPU3\tSYS\tSYS\tNODE\t X \t96-191\t1\n"
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def h100(tmp_path: Path) -> str:
    path = tmp_path / "h100.txt"
    path.write_text(H100_TOPO)
    return str(path)


def test_cost_prints_the_contract_for_an_nvswitch_all_reduce(h100: str) -> None:
    out = _run(
        "cost",
        h100,
        "--collective",
        "all_reduce",
        "--gpus",
        "0,1,2,3",
        "--bytes",
        "268435456",
        "--gpu-model",
        "NVIDIA H100 80GB HBM3",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc)[:7] == [
        "collective",
        "gpus",
        "bytes",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "bottleneck",
    ]
    assert (doc["algorithm"], doc["protocol"], doc["nodes"]) == ("nvls", "Simple", 1)
    assert doc["transports"][0] == "GPU0->GPU1 NVLink NV18"
    assert doc["assumed"]
    assert (doc["collective"], doc["gpus"], doc["bytes"]) == ("all_reduce", [0, 1, 2, 3], 268435456)
    # NVLS: 25 us + 268435456 B / (510 GB/s busbw x 4/6 ranks per step)
    assert doc["time_us"] == pytest.approx(25 + 268435456 / (510 * 4 / 6 * 1e3), rel=1e-3)
    assert doc["busbw_gbps"] == pytest.approx(doc["algbw_gbps"] * 1.5, rel=1e-3)
    assert doc["bottleneck"].startswith("NVSwitch port of GPU")


def test_place_prints_groups_and_both_step_times(tmp_path: Path) -> None:
    path = tmp_path / "pcie.txt"
    path.write_text(PCIE_TOPO)
    out = _run("place", str(path), "--tp", "2", "--pp", "1", "--dp", "2")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["groups"]["tp"] == [[0, 1], [2, 3]]
    assert doc["predicted_step_time_us"] <= doc["naive_step_time_us"]
    assert set(doc["breakdown"]["exposed_comm_us"]) == {"tp", "dp"}
    assert doc["groups"]["dp"] == [[0, 2], [1, 3]]
    assert doc["predicted_step_comm_us"] <= doc["naive_step_comm_us"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["place", "{f}", "--tp", "4", "--pp", "2", "--dp", "2"], "needs more than the 8 free"),
        (
            ["place", "{f}", "--tp", "2", "--pp", "1", "--dp", "1", "--free", "0,9"],
            "unknown GPU index 9",
        ),
        (["cost", "{f}", "--collective", "all_reduce", "--gpus", "0,x", "--bytes", "8"], "--gpus"),
        (
            ["cost", "{f}", "--collective", "all_reduce", "--gpus", "3", "--bytes", "8"],
            "at least two GPUs",
        ),
        (
            ["cost", "{f}", "--collective", "allreduce", "--gpus", "0,1", "--bytes", "8"],
            "invalid choice",
        ),
        (
            [
                "cost",
                "/nonexistent/topo.txt",
                "--collective",
                "all_reduce",
                "--gpus",
                "0,1",
                "--bytes",
                "8",
            ],
            "cannot read",
        ),
    ],
)
def test_bad_requests_exit_2_with_one_line(h100: str, args: list[str], message: str) -> None:
    out = _run(*[a.replace("{f}", h100) for a in args])
    assert out.returncode == 2
    assert out.stdout == ""
    assert message in out.stderr
    assert out.stderr.count("\n") == 1


def test_a_file_that_is_not_topo_output_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "nccl.txt"
    path.write_text("# nThread 1 nGpus 8 minBytes 64\n")
    out = _run("cost", str(path), "--collective", "all_reduce", "--gpus", "0,1", "--bytes", "8")
    assert out.returncode == 2
    assert "expected topology output" in out.stderr


def test_cost_prices_a_peer_copy_both_ways_without_nccls_efficiency(h100: str) -> None:
    out = _run(
        "cost",
        h100,
        "--collective",
        "copy",
        "--gpus",
        "0,1",
        "--bytes",
        str(1 << 30),
        "--bidirectional",
        "--gpu-model",
        "NVIDIA H100 80GB HBM3",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    # NV18 ports: 18 x 25 GB/s x 0.83 (Hopper's copy share) each way, both directions summed.
    assert doc["algbw_gbps"] == pytest.approx(2 * 18 * 25 * 0.83, rel=0.01)
    assert (doc["algorithm"], doc["transports"]) == ("copy", ["GPU0->GPU1 NVLink NV18"])


def test_cost_says_when_p2p_is_off_and_prices_host_memory(tmp_path: Path) -> None:
    path = tmp_path / "pcie.txt"
    path.write_text(PCIE_TOPO)
    args = ["cost", str(path), "--collective", "all_reduce", "--gpus", "0,1", "--bytes", "1048576"]
    auto = json.loads(_run(*args, "--gpu-model", "NVIDIA L40S").stdout)
    on = json.loads(_run(*args, "--gpu-model", "NVIDIA L40S", "--p2p", "on").stdout)
    # A NODE pair: beyond NCCL's default P2P level (PXB), so through host memory unless forced.
    assert auto["transports"] == ["GPU0->GPU1 host shared memory (NODE, no P2P)"]
    assert on["transports"] == ["GPU0->GPU1 PCIe P2P (NODE)"]
    assert on["time_us"] < auto["time_us"]


def test_cost_over_two_nodes_is_set_by_the_given_nic_rate(h100: str) -> None:
    args = ["cost", h100, "--collective", "all_reduce", "--gpus", ",".join(map(str, range(16)))]
    slow = _run(*args, "--bytes", str(1 << 30), "--nodes", "2", "--nic-gbps", "100")
    fast = _run(*args, "--bytes", str(1 << 30), "--nodes", "2", "--nic-gbps", "400")
    assert slow.returncode == fast.returncode == 0, slow.stderr
    slow_doc, fast_doc = json.loads(slow.stdout), json.loads(fast.stdout)
    assert slow_doc["nodes"] == 2
    assert "network" in slow_doc["bottleneck"]
    assert slow_doc["time_us"] > 2 * fast_doc["time_us"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nodes", "0"], "--nodes: must be at least 1"),
        (["--nic-gbps", "-5"], "--nic-gbps: must be positive"),
        (["--p2p", "maybe"], "invalid choice"),
    ],
)
def test_bad_job_options_exit_2_naming_the_option(
    h100: str, extra: list[str], message: str
) -> None:
    out = _run("cost", h100, "--collective", "all_reduce", "--gpus", "0,1", "--bytes", "8", *extra)
    assert out.returncode == 2
    assert message in out.stderr


def test_place_with_more_free_gpus_than_the_job_picks_the_nvlink_pair(tmp_path: Path) -> None:
    # Three RTX A6000s, GPU0 and GPU2 bridged by NVLink (rows as nvidia-smi prints them).
    path = tmp_path / "three.txt"
    path.write_text(
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tSYS\tNV4\t0-15\t0\n"
        "GPU1\tSYS\t X \tSYS\t16-31\t1\n"
        "GPU2\tNV4\tSYS\t X \t0-15\t0\n"
    )
    out = _run(
        "place", str(path), "--tp", "2", "--pp", "1", "--dp", "1", "--free", "0,1,2",
        "--gpu-model", "NVIDIA RTX A6000",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["gpus"] == [0, 2]
    assert doc["leftover"] == [1]
    assert doc["groups"]["tp"] == [[0, 2]]


def test_place_ep_needs_an_moe_model_and_gives_ep_groups_with_one(tmp_path: Path) -> None:
    path = tmp_path / "pcie.txt"
    path.write_text(PCIE_TOPO)
    out = _run("place", str(path), "--tp", "1", "--pp", "1", "--dp", "4", "--ep", "2")
    assert out.returncode == 2
    assert "has no MoE layers" in out.stderr and "mixtral-8x7b" in out.stderr
    out = _run(
        "place", str(path), "--tp", "1", "--pp", "1", "--dp", "4", "--ep", "2",
        "--model", "mixtral-8x7b",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["groups"]["ep"]) == 2 and all(len(g) == 2 for g in doc["groups"]["ep"])
    assert doc["breakdown"]["exposed_comm_us"]["ep"] > 0


def test_the_hosts_cpu_decides_a_cross_socket_copy_and_is_said(tmp_path: Path) -> None:
    """Ada's usual platform is AMD (xGMI carries P2P across sockets); the same cards on a
    Sapphire Rapids host, as `--cpu-model` says, copy across UPI through host memory."""
    path = tmp_path / "l40s.txt"
    path.write_text(PCIE_TOPO)
    copy = ["cost", str(path), "--collective", "copy", "--gpus", "0,2", "--bytes", "1073741824"]
    copy += ["--gpu-model", "NVIDIA L40S"]
    by_cpu = {}
    for cpu in ("AMD EPYC 9454 48-Core Processor", "Intel(R) Xeon(R) Platinum 8480+"):
        out = _run(*copy, "--cpu-model", cpu)
        assert out.returncode == 0, out.stderr
        by_cpu[cpu.split()[0]] = json.loads(out.stdout)["transports"]
    assert by_cpu == {
        "AMD": ["GPU0->GPU2 PCIe P2P (SYS)"],
        "Intel(R)": ["GPU0->GPU2 staged through host memory (SYS, no P2P)"],
    }
    analysed = _run("analyse", str(path), "--gpu-model", "NVIDIA L40S", "--cpu-model",
                    "Intel(R) Xeon(R) Platinum 8480+")  # fmt: skip
    assert analysed.returncode == 0, analysed.stderr
    hardware = json.loads(analysed.stdout)["hardware"]
    assert hardware["socket_link"] == "Intel UPI (Sapphire Rapids)"
    assert hardware["socket_link_source"] == "the host's CPU (Intel(R) Xeon(R) Platinum 8480+)"
