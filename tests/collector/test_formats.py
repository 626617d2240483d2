"""The collector sends NCCL's topology XML and nvbandwidth output: fake binaries replay real
published outputs (an nccl-tests run that writes NCCL_TOPO_DUMP_FILE as NCCL does, nvbandwidth
printing a real run)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from collector import bench, cli, gather
from tests.collector.conftest import FIXTURES, fixture_text
from tests.collector.nvml_profiles import h100_nvswitch

H100_TOPO = "topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"
XML_DUMP = "ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml"
NCCL_SWEEP = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
NVB_RUN = "nvbandwidth_02_2gpu-v0.10-h2d-d2h-d2d-read-no-header.txt"


def fake_nccl_test(path: Path) -> Path:
    """An nccl-tests binary: records its flags, writes the topology dump where NCCL would
    (only when NCCL_TOPO_DUMP_FILE is set) and prints a real sweep."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{path}.args"\n'
        f'if [ -n "$NCCL_TOPO_DUMP_FILE" ]; then cp "{FIXTURES / XML_DUMP}" '
        '"$NCCL_TOPO_DUMP_FILE"; fi\n'
        f'cat "{FIXTURES / NCCL_SWEEP}"\n'
    )
    path.chmod(0o755)
    return path


def fake_nvbandwidth(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$@" > "{path}.args"\ncat "{FIXTURES / NVB_RUN}"\n')
    path.chmod(0o755)
    return path


def test_nvbandwidth_runs_with_its_default_testcases_and_keeps_raw_output(tmp_path: Path) -> None:
    binary = fake_nvbandwidth(tmp_path / "nvbandwidth")
    runs = bench.plan([f"nvbandwidth={binary}"], gpus=2)
    results = bench.run_all(runs, timeout_s=10, progress=io.StringIO())
    assert results == [{"kind": "nvbandwidth", "text": fixture_text(NVB_RUN)}]
    assert Path(f"{binary}.args").read_text().split() == bench.DEFAULT_NVBANDWIDTH_ARGS.split()


def test_the_first_nccl_tests_run_dumps_nccls_topology_on_the_way(tmp_path: Path) -> None:
    binary = fake_nccl_test(tmp_path / "build/all_reduce_perf")
    runs = bench.plan([f"nccl-tests={binary.parent}"], gpus=8)
    runs, xml = bench.nccl_topology_dump(runs, dump_with=None, gpus=8, timeout_s=10)
    assert xml is None  # not yet: it comes with the run
    results = bench.run_all(runs, timeout_s=10, progress=io.StringIO())
    path = bench.dump_path(runs[0])
    assert path is not None
    assert bench.read_topology_dump(path) == fixture_text(XML_DUMP)
    assert not Path(path).exists()  # read once, then removed
    assert results[0]["text"] == fixture_text(NCCL_SWEEP)


def test_without_benchmarks_a_tiny_nccl_run_dumps_the_topology(tmp_path: Path) -> None:
    binary = fake_nccl_test(tmp_path / "all_reduce_perf")
    runs, xml = bench.nccl_topology_dump([], dump_with=binary, gpus=8, timeout_s=10)
    assert runs == [] and xml == fixture_text(XML_DUMP)
    assert Path(f"{binary}.args").read_text() == "-b 8 -e 8 -n 1 -w 0 -g 8\n"


def test_a_binary_that_writes_no_dump_gives_none(tmp_path: Path) -> None:
    silent = fake_nvbandwidth(tmp_path / "not_nccl")  # prints, but writes no dump
    runs, xml = bench.nccl_topology_dump([], dump_with=silent, gpus=1, timeout_s=10)
    assert xml is None


@pytest.mark.parametrize("how", ["file", "dump"])
def test_the_report_carries_the_xml_beside_the_matrix(
    how: str,
    fake_nvidia_smi: Any,
    fake_nvml: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_nvidia_smi(fixture_text(H100_TOPO))
    fake_nvml(h100_nvswitch())
    if how == "file":
        option = ["--nccl-topo-xml", str(FIXTURES / XML_DUMP)]
    else:
        option = ["--nccl-topo-dump-with", str(fake_nccl_test(tmp_path / "all_reduce_perf"))]
    nvb = fake_nvbandwidth(tmp_path / "nvbandwidth")
    args = ["--dry-run", "--hostname", "h", "--host-root", str(tmp_path / "root"), *option]
    assert cli.main([*args, "--benchmarks", f"nvbandwidth={nvb}"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["nccl_xml"] == fixture_text(XML_DUMP)
    assert report["benchmarks"] == [{"kind": "nvbandwidth", "text": fixture_text(NVB_RUN)}]


def test_an_unreadable_xml_path_sends_the_report_without_it(
    fake_nvidia_smi: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_nvidia_smi(fixture_text(H100_TOPO))
    missing = tmp_path / "nope.xml"
    args = ["--dry-run", "--hostname", "h", "--host-root", str(tmp_path), "--nccl-topo-xml"]
    assert cli.main([*args, str(missing)]) == 0
    out = capsys.readouterr()
    assert "nccl_xml" not in json.loads(out.out)
    assert f"cannot read the NCCL topology XML {missing}" in out.err


def test_build_report_leaves_the_field_out_when_there_is_no_xml() -> None:
    body = gather.build_report(
        hostname="h", captured_at=gather.utc_now(), topo_text="x", nvml=None, host=None
    )
    assert "nccl_xml" not in body
