"""nvbandwidth output (text and -j JSON) read from real published runs, and the
p2pBandwidthLatencyTest view that health and calibration take from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from topoweb.core.costs import build_model, calibrate_from_p2p
from topoweb.core.formats import ParseError, detect_format, nvbandwidth, parse_text
from topoweb.core.model import NvbandwidthRun, Topology, from_document

from .topo_fixtures import fixture_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NVB_FILES = sorted(FIXTURES.glob("nvbandwidth_*"))


def text_of(prefix: str) -> str:
    (path,) = FIXTURES.glob(f"{prefix}_*")
    return path.read_text()


def run_of(prefix: str) -> NvbandwidthRun:
    return nvbandwidth.parse(text_of(prefix))


@pytest.mark.parametrize("path", NVB_FILES, ids=lambda p: p.name[:14])
def test_every_nvbandwidth_sample_is_detected_and_round_trips_as_a_document(path: Path) -> None:
    text = path.read_text()
    assert detect_format(text) == "nvbandwidth"
    run = parse_text(text)
    assert isinstance(run, NvbandwidthRun)
    assert from_document(run.to_document()) == run


def test_it_reads_a_six_gpu_read_matrix_whose_paste_elided_the_running_line() -> None:
    run = run_of("nvbandwidth_01")
    assert (run.version, run.driver_version, run.cuda_runtime_version) == (
        "v0.8",
        "580.95.05",
        "13000",
    )
    (case,) = run.testcases
    assert case.name == "device_to_device_memcpy_read_ce" and case.sum == 715.53
    assert case.matrix[0] == (None, 26.34, 26.35, 21.95, 22.64, 21.8)
    assert len(case.matrix) == 6
    assert any("no `Running" in w for w in run.warnings)


def test_it_reads_three_testcases_with_host_rows_and_variation_lines() -> None:
    run = run_of("nvbandwidth_02")
    assert [t.name for t in run.testcases] == [
        "host_to_device_memcpy_ce",
        "device_to_host_memcpy_ce",
        "device_to_device_memcpy_read_ce",
    ]
    assert run.testcases[0].matrix == ((26.03, 25.94),)
    assert run.testcases[2].matrix == ((None, 276.07), (276.19, None))
    assert run.errors == ()


def test_a_run_that_asserts_is_read_as_failed_with_its_devices() -> None:
    run = run_of("nvbandwidth_03")
    assert len(run.devices) == 8 and run.devices[0] == "NVIDIA A100-SXM4-80GB (00000000:34:00)"
    (case,) = run.testcases
    assert case.status == "Error" and case.matrix == ()
    assert any("ASSERT" in e for e in run.errors)


def test_it_reads_the_json_form_with_waived_testcases() -> None:
    run = run_of("nvbandwidth_04")
    assert run.version == "v0.5" and run.driver_version == "565.02"
    assert len(run.testcases) == 32
    waived = [t.name for t in run.testcases if t.status == "Waived"]
    assert "device_to_device_memcpy_read_ce" in waived
    h2d = run.testcase("host_to_device_memcpy_ce")
    assert h2d is not None and h2d.matrix == ((12.3964,),)


def test_json_among_log_lines_is_read_with_a_warning() -> None:
    noisy = "WARNING: Failed to acquire log file lock.\n" + text_of("nvbandwidth_04") + "WARN }}}\n"
    run = nvbandwidth.parse(noisy)
    assert len(run.testcases) == 32 and run.warnings


def test_broken_json_is_refused_with_its_line() -> None:
    text = text_of("nvbandwidth_04").replace('"status" : "Waived"', '"status" : Waived', 1)
    with pytest.raises(ParseError) as err:
        nvbandwidth.parse(text)
    assert err.value.line is not None and err.value.line > 40


def test_a_matrix_row_of_the_wrong_width_is_refused_with_its_line() -> None:
    text = text_of("nvbandwidth_02").replace("1    276.19       N/A", "1    276.19")
    with pytest.raises(ParseError) as err:
        nvbandwidth.parse(text)
    assert err.value.line == 23


def test_the_p2p_view_turns_row_from_column_into_source_to_destination() -> None:
    p2p = nvbandwidth.to_p2p(run_of("nvbandwidth_02"))  # GPU(row) <- GPU(column)
    uni = p2p.matrices["unidirectional_p2p_enabled_gbps"]
    assert uni[1][0] == 276.07 and uni[0][1] == 276.19
    assert p2p.p2p_access == ((True, True), (True, True))
    forward = nvbandwidth.to_p2p(run_of("nvbandwidth_01"))  # GPU(row) -> GPU(column)
    assert forward.matrices["unidirectional_p2p_enabled_gbps"][0][3] == 21.95
    assert len(forward.gpus) == 6


def test_one_gpu_json_has_no_pair_to_judge() -> None:
    p2p = nvbandwidth.to_p2p(run_of("nvbandwidth_04"))
    assert len(p2p.gpus) == 1 and p2p.matrices == {}


def test_calibration_takes_nvbandwidth_as_it_takes_p2p_results() -> None:
    topo = parse_text(fixture_text("topo_09"))  # 4 RTX 6000 Ada on PCIe; nvbandwidth_01 had 6
    assert isinstance(topo, Topology)
    six = nvbandwidth.to_p2p(run_of("nvbandwidth_01"))
    cal = calibrate_from_p2p(build_model(topo, "NVIDIA RTX 6000 Ada Generation"), six)
    assert cal.scale and all(0 < v < 2 for v in cal.scale.values())


def _d2d_block(title: str) -> list[str]:
    """nvbandwidth_02's device-to-device matrix (header and rows) under another title."""
    lines = text_of("nvbandwidth_02").splitlines()
    start = lines.index("memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)")
    return [title, *lines[start + 1 : start + 4]]


def test_a_bidirectional_testcase_keeps_each_direction_and_its_total() -> None:
    # nvbandwidth v0.10 prints a bidirectional device-to-device testcase as Read1, Read2 and
    # Total matrices, each with its own SUM line, the testcase's name suffixed.
    name = "device_to_device_bidirectional_memcpy_read_ce"
    text = [f"Running {name}."]
    for part, total in (("Read1", "552.26"), ("Read2", "552.26"), ("Total", "1104.52")):
        text += _d2d_block(f"memcpy CE GPU(row) <-> GPU(column) {part} bandwidth (GB/s)")
        text += ["", f"SUM {name}_{part.lower()} {total}", ""]
    run = nvbandwidth.parse("\n".join(text))
    assert [(t.name, t.status, t.sum) for t in run.testcases] == [
        (f"{name}_read1", "Passed", 552.26),
        (f"{name}_read2", "Passed", 552.26),
        (name, "Passed", 1104.52),
    ]
    assert run.testcase(name).description.endswith("Total bandwidth (GB/s)")  # type: ignore[union-attr]
    assert run.testcases[0].matrix == ((None, 276.07), (276.19, None))
    assert run.errors == () and run.warnings == ()


def test_the_v0_10_latency_matrix_is_read_but_not_priced_as_a_copys_latency() -> None:
    name = "device_to_device_latency_sm"
    text = [f"Running {name}."]
    text += _d2d_block("Device to Device Latency SM GPU(row) <-> GPU(column) (ns)")
    text += ["", f"SUM {name} 552.26"]
    run = nvbandwidth.parse("\n".join(text))
    (latency,) = run.testcases
    assert (latency.name, latency.status, latency.sum) == (name, "Passed", 552.26)
    assert latency.matrix == ((None, 276.07), (276.19, None))
    assert run.errors == ()
    # A pointer chase's load latency, not a copy's fixed time: no latency matrix for calibration.
    assert "latency_gpu_p2p_enabled_us" not in nvbandwidth.to_p2p(run).matrices


def test_runs_of_one_testcase_each_printed_one_after_another_read_as_one_run() -> None:
    # As a script running `nvbandwidth -t N` per testcase logs them: each run with its own
    # header, between separator lines.
    lines = text_of("nvbandwidth_02").split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("Running ")]
    chunks = ["\n".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    log = "".join(
        f"##### nvbandwidth -t {n} #####\nnvbandwidth Version: v0.10\n\n{chunk}\n"
        for n, chunk in enumerate(chunks)
    )
    plain, joined = run_of("nvbandwidth_02"), nvbandwidth.parse(log)
    assert len(chunks) == 3
    assert joined.testcases == plain.testcases
    assert (joined.warnings, joined.errors) == (plain.warnings, plain.errors)
    assert joined.version == "v0.10"


def test_the_same_run_twice_keeps_one_device_list_and_each_testcases_first_result() -> None:
    text = text_of("nvbandwidth_03")
    plain, twice = run_of("nvbandwidth_03"), nvbandwidth.parse(text + "\n#####\n" + text)
    assert twice.devices == plain.devices and len(plain.devices) == 8
    assert twice.testcases == plain.testcases
    second = text.count("\n") + 2  # the separator's line; the second run's lines follow it
    (again,) = twice.warnings
    assert again.endswith("device_to_device_memcpy_read_ce ran again; its first result was kept")
    assert int(again.split()[1].rstrip(":")) > second


def test_a_run_on_other_gpus_ends_the_reading_with_a_warning() -> None:
    text = text_of("nvbandwidth_03")
    other = text.replace("A100-SXM4-80GB", "H100 80GB HBM3")
    assert other != text
    plain, both = run_of("nvbandwidth_03"), nvbandwidth.parse(text + "\n#####\n" + other)
    assert both.devices == plain.devices
    assert both.testcases == plain.testcases and both.errors == plain.errors
    second = text.count("\n") + 3  # the other run's version line
    assert both.warnings == (
        f"line {second} starts a run on other GPUs (8 x NVIDIA H100 80GB HBM3, where the first "
        "run had 8 x NVIDIA A100-SXM4-80GB); only the runs before it were read",
    )
    # The same models at other bus ids: another server of the same kind.
    moved = text.replace("(00000000:34:00)", "(00000000:44:00)")
    assert nvbandwidth.parse(text + "\n" + moved).warnings == (
        f"line {second - 1} starts a run on other GPUs (other bus ids); only the runs before it "
        "were read",
    )


def test_a_multinode_run_indented_as_a_code_block_lists_one_gpu_per_process() -> None:
    text = text_of("nvbandwidth_05")  # every line indented 6 spaces, as an rst page shows it
    assert detect_format(text) == "nvbandwidth"
    run = nvbandwidth.parse(text)
    assert (run.version, run.cuda_runtime_version, run.driver_version) == (
        "v0.7",
        "12080",
        "570.124.06",
    )
    assert len(run.devices) == 8
    assert run.devices[0] == "HGX GB200 (00000008:01:00): (nvbandwidth-test-worker-0)"
    assert run.devices[7] == "HGX GB200 (00000019:01:00): (nvbandwidth-test-worker-1)"
    (case,) = run.testcases
    assert (case.name, case.status, case.sum) == (
        "multinode_device_to_device_memcpy_read_ce",
        "Passed",
        44685.29,
    )
    assert case.matrix[0][:3] == (None, 798.02, 798.25) and case.matrix[7][7] is None
    assert run.errors == () and run.warnings == ()
    gpus = nvbandwidth.to_p2p(run).gpus
    assert [(g.index, g.name, g.pci_bus_id) for g in gpus[3:5]] == [
        (3, "HGX GB200", "00000019:01:00"),
        (4, "HGX GB200", "00000008:01:00"),
    ]


def test_an_indented_run_reads_as_the_plain_one() -> None:
    text = text_of("nvbandwidth_03")
    indented = "\n".join("    " + line if line else line for line in text.split("\n"))
    assert detect_format(indented) == "nvbandwidth"
    assert nvbandwidth.parse(indented) == run_of("nvbandwidth_03")


def test_a_multinode_run_on_other_hosts_ends_the_reading_naming_its_gpus() -> None:
    text = text_of("nvbandwidth_05")
    other = text.replace("worker-1", "worker-2")
    both = nvbandwidth.parse(text + "\n" + other)
    assert both.testcases == run_of("nvbandwidth_05").testcases
    # The other run's version line: past the first run's lines and the joining newline.
    second = text.count("\n") + 2 + text.split("\n").index("      nvbandwidth Version: v0.7")
    assert both.warnings == (
        f"line {second} starts a run on other GPUs (other bus "
        "ids or hosts); only the runs before it were read",
    )


def test_the_oldest_style_zero_diagonal_of_a_gpu_to_gpu_matrix_reads_as_unmeasured() -> None:
    # nvbandwidth before v0.2 printed 0.00 where it measured nothing (a GPU to itself).
    run = run_of("nvbandwidth_06")
    (case,) = run.testcases
    assert case.name == "device_to_device_memcpy_write_ce" and case.sum is None
    assert case.matrix[0] == (None, 276.07, 276.36, 276.14, 276.29, 276.48, 276.55, 276.33)
    assert all(case.matrix[i][i] is None for i in range(8))
    assert case.matrix[6][0] == 274.89
    last = len(text_of("nvbandwidth_06").rstrip().split("\n"))
    assert run.warnings == (
        f"line {last}: device_to_device_memcpy_write_ce: the output ends with no SUM line (cut?)",
    )
    p2p = nvbandwidth.to_p2p(run)  # GPU(row) <- GPU(column): source first is the column
    assert p2p.matrices["unidirectional_p2p_enabled_gbps"][0][6] == 274.89
    assert p2p.p2p_access == ((True,) * 8,) * 8


def test_a_zero_in_a_host_matrix_is_kept_as_printed() -> None:
    # A CPU-to-GPU row's first cell is GPU 0's measurement, not a diagonal.
    text = text_of("nvbandwidth_02").replace("26.03", "0.00", 1)
    assert nvbandwidth.parse(text).testcases[0].matrix == ((0.0, 25.94),)


def _as_text(run: NvbandwidthRun) -> str:
    """A JSON run printed as nvbandwidth's text prints it: from v0.5 a testcase that cannot
    run on these GPUs is a bare `Waived: ` line where its `Running` line would be."""
    lines = [f"nvbandwidth Version: {run.version}", ""]
    for case in run.testcases:
        if case.status == "Waived":
            lines.append("Waived: ")
            continue
        lines += [f"Running {case.name}.", case.description]
        lines.append(" " + "".join(f"{j:>10}" for j in range(len(case.matrix[0]))))
        for i, row in enumerate(case.matrix):
            lines.append(f"{i}" + "".join(f"{c:>10.2f}" for c in row if c is not None))
        lines += ["", f"SUM {case.name} {case.sum:.2f}", ""]
    return "\n".join(lines)


def test_a_testcase_waived_by_name_as_up_to_v0_4_is_recorded_as_waived() -> None:
    text = text_of("nvbandwidth_02").replace(
        "Running device_to_device",
        "Waiving device_to_device_memcpy_write_ce.\n\nRunning device_to_device",
    )
    run = nvbandwidth.parse(text)
    assert [(t.name, t.status) for t in run.testcases] == [
        ("host_to_device_memcpy_ce", "Passed"),
        ("device_to_host_memcpy_ce", "Passed"),
        ("device_to_device_memcpy_write_ce", "Waived"),
        ("device_to_device_memcpy_read_ce", "Passed"),
    ]
    assert run.warnings == () and run.errors == ()


def test_the_v0_10_header_keeps_the_cuda_runtime_as_printed() -> None:
    # v0.10 prints the runtime as "13.2 (13020)" and adds a "CUDA Driver Version (API)" line.
    header = (
        "nvbandwidth Version: v0.10.0\nBuilt from Git version: v0.10.0\n\n"
        "CUDA Runtime Version: 13.2 (13020)\nCUDA Driver Version (API): 13.2 (13020)\n"
        "Driver Version: 595.71.05\n\n"
    )
    run = nvbandwidth.parse(header + text_of("nvbandwidth_02"))
    assert (run.version, run.cuda_runtime_version, run.driver_version) == (
        "v0.10.0",
        "13.2 (13020)",
        "595.71.05",
    )
    assert run.testcases == run_of("nvbandwidth_02").testcases
    assert run_of("nvbandwidth_01").cuda_runtime_version == "13000"  # v0.8: the number alone


def test_bare_waived_lines_are_counted_in_a_warning_naming_the_first() -> None:
    # nvbandwidth_04 is v0.5's JSON on one GPU; its text prints each waived testcase as a bare
    # `Waived: ` line where the testcase would have run.
    as_json = run_of("nvbandwidth_04")
    waived = [t for t in as_json.testcases if t.status == "Waived"]
    text = _as_text(as_json)
    run = nvbandwidth.parse(text)
    first = text.split("\n").index("Waived: ") + 1
    assert len(waived) == 17
    assert [t.name for t in run.testcases] == [
        t.name for t in as_json.testcases if t.status != "Waived"
    ]
    assert run.warnings == (
        f"line {first}: 17 testcases waived (cannot run on these GPUs); the text does not name "
        "them (nvbandwidth -j does)",
    )


def test_a_fork_that_labels_other_accelerators_is_read_with_a_warning() -> None:
    # T-Head's sailbandwidth prints nvbandwidth's output with `PPU(row) <- PPU(column)`.
    text = text_of("nvbandwidth_06")
    forked = text.replace("GPU(row) <- GPU(column)", "PPU(row) <- PPU(column)")
    assert forked != text
    run = nvbandwidth.parse(forked)
    assert [(t.name, t.matrix) for t in run.testcases] == [
        (t.name, t.matrix) for t in run_of("nvbandwidth_06").testcases
    ]
    line = 1 + text.split("\n").index(next(ln for ln in text.split("\n") if "GPU(row)" in ln))
    assert (
        f"line {line}: the matrix is labelled PPU, not GPU and CPU: another accelerator's fork "
        "of nvbandwidth, read as GPUs" in run.warnings
    )
    assert not any("labelled" in w for w in run_of("nvbandwidth_06").warnings)


def test_output_filtered_to_its_sum_lines_reads_each_total_with_a_warning() -> None:
    # `./nvbandwidth | grep SUM`, as a cloud's docs show a run.
    text = text_of("nvbandwidth_02")
    sums = [line for line in text.split("\n") if line.startswith("SUM ")]
    assert len(sums) > 1
    run = nvbandwidth.parse("\n".join(sums))
    full = run_of("nvbandwidth_02")
    assert [(t.name, t.sum, t.matrix) for t in run.testcases] == [
        (t.name, t.sum, ()) for t in full.testcases if t.sum is not None
    ]
    assert run.errors == ()
    assert run.warnings == (
        f"lines 1-{len(sums)}: {len(sums)} SUM line(s) without their testcase's output "
        "(filtered, as by `| grep SUM`): totals only, no matrices",
    )
    assert not any("SUM line(s)" in w for w in full.warnings)


def test_a_matrix_wider_than_the_device_list_is_named() -> None:
    # nvbandwidth prints one row or column per listed GPU; more is an edited file (a test
    # suite's data had a 2 x 3 host-to-device matrix under one GH200).
    text = text_of("nvbandwidth_06")

    def listed(n: int) -> str:
        return "".join(
            f"Device {i}: NVIDIA H100 80GB HBM3 (00000000:{i + 1:02x}:00)\n" for i in range(n)
        )

    assert not any("GPUs along" in w for w in nvbandwidth.parse(listed(8) + "\n" + text).warnings)
    run = nvbandwidth.parse(listed(2) + "\n" + text)
    (warning,) = [w for w in run.warnings if "GPUs along" in w]
    assert warning.endswith(
        "device_to_device_memcpy_write_ce's matrix has 8 GPUs along one side but the device "
        "list names 2: not as nvbandwidth prints it (edited?)"
    )


# As a v0.8 run on one laptop GPU printed it (a public capture): device_local_copy's title
# names no CE or SM, and its one row holds each GPU's copy within its own memory.
LOCAL_COPY = """\
Running device_local_copy.
memcpy local GPU(column) bandwidth (GB/s)
           0         1
 0     84.33     85.10

SUM device_local_copy 169.43
"""


def test_device_local_copy_is_read_as_its_one_row_of_gpus() -> None:
    assert detect_format(LOCAL_COPY) == "nvbandwidth"
    run = nvbandwidth.parse(LOCAL_COPY)
    (case,) = run.testcases
    assert (case.name, case.status, case.matrix, case.sum) == (
        "device_local_copy",
        "Passed",
        ((84.33, 85.10),),
        169.43,
    )
    assert run.errors == ()


def test_a_matrix_pasted_without_its_testcase_is_refused_naming_its_title() -> None:
    text = "$ ./nvbandwidth -t device_local_copy\n" + LOCAL_COPY.split("\n", 1)[1].split("\nSUM")[0]
    with pytest.raises(ParseError) as raised:
        parse_text(text)
    assert raised.value.line == 2
    assert "'memcpy local GPU(column) bandwidth (GB/s)' has no testcase name" in str(raised.value)


def test_a_run_quoted_in_a_reply_reads_as_the_run_itself() -> None:
    # Only some lines quoted, as an issue quoted each `Running` line (NVIDIA/nvbandwidth#24)
    lines = text_of("nvbandwidth_02").splitlines()
    quoted = "\n".join("> " + ln if ln.startswith("Running") else ln for ln in lines)
    assert detect_format(quoted) == "nvbandwidth"
    assert parse_text(quoted) == parse_text(text_of("nvbandwidth_02"))
    everywhere = "\n".join("> " + ln for ln in lines)
    assert parse_text(everywhere) == parse_text(text_of("nvbandwidth_02"))


def test_a_run_read_from_a_container_s_log_reads_as_the_run_itself() -> None:
    # `kubectl logs --prefix --timestamps`: the pod, its container and the time before each line
    lines = text_of("nvbandwidth_01").splitlines()
    logged = "\n".join(f"[pod/nvbw-0/main] 2026-02-16T10:00:00Z {ln}" for ln in lines)
    assert detect_format(logged) == "nvbandwidth"
    assert parse_text(logged) == parse_text(text_of("nvbandwidth_01"))


@pytest.mark.parametrize("tag", ["[1,0]<stdout>:", " 0: "], ids=["mpirun --tag-output", "srun -l"])
@pytest.mark.parametrize("prefix", ["nvbandwidth_01", "nvbandwidth_05"])
def test_a_run_tagged_by_its_launcher_reads_as_the_run_itself(prefix: str, tag: str) -> None:
    tagged = "\n".join(tag + ln for ln in text_of(prefix).splitlines())
    assert detect_format(tagged) == "nvbandwidth"
    assert parse_text(tagged) == parse_text(text_of(prefix))
