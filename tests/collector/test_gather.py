"""nvidia-smi capture (a fake replaying real fixtures), host facts from a fake sysfs, benchmarks."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from collector import bench, gather
from tests.collector.conftest import FIXTURES, fixture_text

L40S_TOPO = "topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"


def test_it_keeps_the_topology_text_byte_for_byte(fake_nvidia_smi: Any) -> None:
    text = fixture_text("topo_38_h20-8gpu-36nic-MANGLED-tab-expansion-merged-cells.txt")
    fake_nvidia_smi(text)

    assert gather.topo_matrix("nvidia-smi", timeout_s=10) == text


def test_it_keeps_the_p2p_status_matrix_where_nvidia_smi_has_one(fake_nvidia_smi: Any) -> None:
    both = fixture_text("topo_32_rtx2080ti-2gpu-pix-plus-topo-p2p-status-matrix.txt")
    topo, _, p2p = both.partition("root@autodl-container-xxxxx:~# nvidia-smi topo -p2p p\n")
    fake_nvidia_smi(topo, p2p=p2p)

    assert gather.topo_p2p("nvidia-smi", timeout_s=10) == {"read": p2p}
    assert " GPU0   X       NS" in p2p


def test_it_records_p2p_as_unsupported_where_nvidia_smi_refuses_it(fake_nvidia_smi: Any) -> None:
    fake_nvidia_smi(fixture_text(L40S_TOPO))

    assert gather.topo_p2p("nvidia-smi", timeout_s=10) == {"read": "unsupported"}


def test_it_names_a_driver_failure_in_one_line(fake_nvidia_smi: Any) -> None:
    fake_nvidia_smi("", exit_code=9)

    with pytest.raises(gather.GatherError) as caught:
        gather.topo_matrix("nvidia-smi", timeout_s=10)

    assert str(caught.value) == (
        "`nvidia-smi topo -m` failed (exit 9): NVIDIA-SMI has failed because it couldn't "
        "communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is "
        "installed and running."
    )


def test_it_gives_up_on_a_hung_nvidia_smi_after_the_timeout(fake_nvidia_smi: Any) -> None:
    fake_nvidia_smi("never printed", sleep_s=5)

    with pytest.raises(gather.GatherError, match=r"did not finish within 0\.3 s"):
        gather.topo_matrix("nvidia-smi", timeout_s=0.3)


def test_it_says_when_there_is_no_nvidia_smi_at_all(tmp_path: Path) -> None:
    with pytest.raises(gather.GatherError, match="not found"):
        gather.topo_matrix(str(tmp_path / "nvidia-smi"), timeout_s=1)


def test_it_counts_gpu_rows_even_in_a_mangled_matrix() -> None:
    assert gather.gpu_count_from_topo(fixture_text(L40S_TOPO)) == 4
    assert (
        gather.gpu_count_from_topo(fixture_text("topo_07_dgx1-nv1-soc-4nic-mangled-header.txt"))
        == 8
    )


def fake_host(root: Path) -> None:
    """The L40S box of topo_36: two ConnectX NICs (mlx5_0/1) on NUMA node 1."""
    dmi = root / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_name").write_text("SYS-421GE-TNRT\n")
    (dmi / "sys_vendor").write_text("Supermicro\n")
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\n"
        "model name\t: INTEL(R) XEON(R) PLATINUM 8568Y+\nflags\t\t: fpu vme\n\n"
        "processor\t: 1\nmodel name\t: INTEL(R) XEON(R) PLATINUM 8568Y+\n"
    )
    for n, (bus, rate, state) in enumerate(
        [("0000:ca:00.0", "400 Gb/sec (4X NDR)", "4: ACTIVE"),
         ("0000:ca:00.1", "10 Gb/sec (4X SDR)", "1: DOWN")]
    ):  # fmt: skip
        pci = root / "sys/devices/pci0000:c9" / bus
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text("1\n")
        ib = root / f"sys/class/infiniband/mlx5_{n}"
        (ib / "ports/1").mkdir(parents=True)
        (ib / "ports/1/rate").write_text(rate + "\n")
        (ib / "ports/1/state").write_text(state + "\n")
        (ib / "ports/1/link_layer").write_text("InfiniBand\n")
        (ib / "node_guid").write_text(f"e09d:7303:007a:4bd{n}\n")
        os.symlink(pci, ib / "device")


def test_it_reads_sku_cpu_kernel_and_rdma_nics_from_the_host(tmp_path: Path) -> None:
    fake_host(tmp_path)

    facts = gather.host_facts(tmp_path)

    assert facts["product_name"] == "SYS-421GE-TNRT"
    assert facts["sys_vendor"] == "Supermicro"
    assert facts["cpu_model"] == "INTEL(R) XEON(R) PLATINUM 8568Y+"
    assert facts["kernel"] == os.uname().release
    assert facts["rdma_nics"] == [
        {"device": "mlx5_0", "port": 1, "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400.0,
         "state": "ACTIVE", "link_layer": "InfiniBand", "pci_bus_id": "0000:ca:00.0",
         "numa_node": 1, "node_guid": "e09d:7303:007a:4bd0"},
        {"device": "mlx5_1", "port": 1, "rate": "10 Gb/sec (4X SDR)", "rate_gbps": 10.0,
         "state": "DOWN", "link_layer": "InfiniBand", "pci_bus_id": "0000:ca:00.1",
         "numa_node": 1, "node_guid": "e09d:7303:007a:4bd1"},
    ]  # fmt: skip


def test_a_bare_container_gives_nulls_not_a_crash(tmp_path: Path) -> None:
    facts = gather.host_facts(tmp_path)

    assert (facts["product_name"], facts["cpu_model"], facts["rdma_nics"]) == (None, None, [])


# ---------------------------------------------------------------- benchmarks


def fake_benchmark(path: Path, fixture: str, exit_code: int = 0, sleep_s: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > "{path}.args"\n'
        f"sleep {sleep_s}\n"
        f'cat "{FIXTURES / fixture}"\n'
        f"exit {exit_code}\n"
    )
    path.chmod(0o755)
    return path


NCCL_SWEEP = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
P2P_RUN = "p2p_05_rtx6000ada-4gpu-p2pwrites-gpu-cpu-latency.txt"


def test_it_runs_nccl_tests_and_the_p2p_test_keeping_raw_output(tmp_path: Path) -> None:
    binary = fake_benchmark(tmp_path / "nccl-tests/build/all_reduce_perf", NCCL_SWEEP)
    p2p = fake_benchmark(tmp_path / "cuda-samples/p2pBandwidthLatencyTest", P2P_RUN)
    runs = bench.plan(
        [f"nccl-tests={binary.parent}", f"p2p-bandwidth-latency={p2p}"],
        gpus=8,
        p2p_args="--sm_copy",
    )
    progress = io.StringIO()

    results = bench.run_all(runs, timeout_s=10, progress=progress)

    assert results == [
        {"kind": "nccl-tests", "text": fixture_text(NCCL_SWEEP)},
        {"kind": "p2p-bandwidth-latency", "text": fixture_text(P2P_RUN)},
    ]
    assert Path(f"{binary}.args").read_text() == "-b 8 -e 1G -f 2 -g 8\n"
    assert Path(f"{p2p}.args").read_text() == "--sm_copy\n"
    shown = progress.getvalue().splitlines()
    assert shown[0].startswith("[all_reduce_perf] ")
    assert any(line.startswith("[p2pBandwidthLatencyTest] ") for line in shown)


def test_a_failed_or_hung_benchmark_is_left_out_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_benchmark(tmp_path / "build/all_reduce_perf", NCCL_SWEEP, exit_code=1)
    fake_benchmark(tmp_path / "build/all_gather_perf", NCCL_SWEEP, sleep_s=5)
    runs = bench.plan(
        [f"nccl-tests={tmp_path / 'build'}"],
        gpus=2,
        nccl_tests=["all_reduce_perf", "all_gather_perf"],
    )

    results = bench.run_all(runs, timeout_s=0.5, progress=io.StringIO())

    assert results == []
    assert "all_reduce_perf failed (exit 1)" in caplog.text
    assert "all_gather_perf did not finish within 0.5 s" in caplog.text


def test_it_refuses_a_benchmark_that_is_not_there(tmp_path: Path) -> None:
    with pytest.raises(bench.BenchmarkError, match="is not an executable file"):
        bench.plan([f"nccl-tests={tmp_path}"], gpus=8)
    with pytest.raises(bench.BenchmarkError, match="unknown benchmark kind 'gpu-burn'"):
        bench.plan(["gpu-burn=/usr/bin/gpu_burn"], gpus=8)
