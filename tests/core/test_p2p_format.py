"""p2pBandwidthLatencyTest output read from the real captured fixtures, and variants of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from topoweb.core.formats import ParseError, detect_format, p2p, parse_text
from topoweb.core.model import P2P_MATRIX_NAMES, P2PGpu, P2PResult

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
P2P_FIXTURES = sorted(FIXTURES.glob("p2p_*.txt"))
NO_DEVICE_LIST = (
    "no device list comes before the matrices (cut from the paste, or not printed by the tool "
    "that ran the test): GPU names are unknown"
)
OLD_STYLE = tuple(k for k in P2P_MATRIX_NAMES if "latency_cpu" not in k)


def text_of(prefix: str) -> str:
    (path,) = FIXTURES.glob(f"{prefix}_*.txt")
    return path.read_text()


def result_of(prefix: str) -> P2PResult:
    return p2p.parse(text_of(prefix))


def parse_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as err:
        p2p.parse(text)
    return err.value


@pytest.mark.parametrize("path", P2P_FIXTURES, ids=lambda p: p.name[:6])
def test_every_p2p_fixture_is_detected_as_p2p_bandwidth_latency(path: Path) -> None:
    assert detect_format(path.read_text()) == "p2p-bandwidth-latency"


def test_it_reads_seven_mixed_gpus_in_the_old_wording() -> None:
    result = result_of("p2p_01")
    assert [g.name for g in result.gpus] == ["GeForce GTX 1070"] * 6 + ["GeForce GTX 1080"]
    assert [g.pci_bus_id for g in result.gpus] == ["5", "6", "7", "a", "b", "c", "d"]
    assert result.gpus[3] == P2PGpu(3, "GeForce GTX 1070", "a", "0", "0")
    assert result.p2p_access == ((True,) * 7,) * 7
    assert tuple(result.matrices) == OLD_STYLE
    assert result.matrices["unidirectional_p2p_disabled_gbps"][1][1] == 194.83
    assert result.matrices["bidirectional_p2p_enabled_gbps"][3][4] == 1.59
    assert result.matrices["latency_gpu_p2p_disabled_us"][6] == (
        13.89, 12.63, 13.72, 12.82, 12.59, 12.64, 4.55
    )  # fmt: skip
    assert result.matrices["latency_gpu_p2p_enabled_us"][0][1] == 6.81
    assert result.warnings == ()


def test_it_keeps_hex_domain_ids_and_reads_no_peer_access() -> None:
    result = result_of("p2p_02")
    assert [(g.pci_bus_id, g.pci_domain_id) for g in result.gpus] == [("0", "d463"), ("0", "f7bf")]
    assert result.p2p_access == ((True, False), (False, True))
    assert result.matrices["latency_gpu_p2p_enabled_us"] == ((4.44, 23.37), (19.97, 4.16))
    assert result.matrices["bidirectional_p2p_disabled_gbps"][1][1] == 135.57


def test_it_reads_four_m60s_without_any_peer_access() -> None:
    result = result_of("p2p_03")
    assert [g.pci_domain_id for g in result.gpus] == ["3403", "4c42", "64d0", "83e7"]
    assert result.p2p_access == tuple(tuple(i == j for j in range(4)) for i in range(4))
    assert result.matrices["bidirectional_p2p_disabled_gbps"][0][1] == 10.40
    assert result.matrices["unidirectional_p2p_enabled_gbps"][3][3] == 130.35


def test_it_reads_p2p_writes_wording_and_gpu_and_cpu_latency_blocks() -> None:
    result = result_of("p2p_05")
    assert [g.pci_bus_id for g in result.gpus] == ["1", "41", "c1", "e1"]
    assert result.gpus[0].name == "NVIDIA RTX 6000 Ada Generation"
    assert tuple(result.matrices) == P2P_MATRIX_NAMES
    assert result.matrices["bidirectional_p2p_enabled_gbps"][0][1] == 52.10
    assert result.matrices["unidirectional_p2p_enabled_gbps"][1][1] == 833.33
    assert result.matrices["latency_gpu_p2p_disabled_us"][0][2] == 13.76
    assert result.matrices["latency_cpu_p2p_disabled_us"][2] == (5.67, 5.67, 2.03, 6.53)
    assert result.matrices["latency_gpu_p2p_enabled_us"][3][0] == 1.44
    assert result.matrices["latency_cpu_p2p_enabled_us"][3][3] == 2.05
    assert result.p2p_access == ((True,) * 4,) * 4


def test_it_reads_every_matrix_when_the_closing_note_is_missing() -> None:
    result = result_of("p2p_06")
    assert tuple(result.matrices) == P2P_MATRIX_NAMES
    assert result.matrices["latency_cpu_p2p_enabled_us"] == ((1.64, 1.32), (1.32, 1.58))
    assert [g.pci_bus_id for g in result.gpus] == ["c1", "c2"]


def test_it_reads_the_dgx1_hybrid_cube_mesh_from_an_elided_paste() -> None:
    result = result_of("p2p_08")
    rows = ("11110010", "11110001", "11111000", "11110100",
            "00101111", "00011111", "10001111", "01001111")  # fmt: skip
    assert result.p2p_access == tuple(tuple(c == "1" for c in r) for r in rows)
    assert tuple(result.matrices) == (
        "bidirectional_p2p_disabled_gbps",
        "bidirectional_p2p_enabled_gbps",
    )
    enabled = result.matrices["bidirectional_p2p_enabled_gbps"]
    assert (enabled[0][3], enabled[0][1], enabled[0][4]) == (96.91, 48.50, 11.59)
    assert result.matrices["bidirectional_p2p_disabled_gbps"][7][6] == 8.16
    assert result.gpus == ()
    assert result.warnings == (NO_DEVICE_LIST,)


def test_it_reads_the_dgx_station_elided_paste() -> None:
    result = result_of("p2p_09")
    assert result.p2p_access == ((True,) * 4,) * 4
    assert result.matrices["bidirectional_p2p_enabled_gbps"][1][2] == 96.92
    assert result.matrices["bidirectional_p2p_disabled_gbps"][0][0] == 755.01
    assert set(result.matrices) == {
        "bidirectional_p2p_disabled_gbps",
        "bidirectional_p2p_enabled_gbps",
    }


def test_it_reads_a_container_without_peer_access_in_the_new_wording() -> None:
    result = result_of("p2p_11")
    assert [g.pci_bus_id for g in result.gpus] == ["b4", "b5"]
    assert result.p2p_access == ((True, False), (False, True))
    assert result.matrices["latency_cpu_p2p_disabled_us"][1][0] == 10.48
    assert result.matrices["unidirectional_p2p_enabled_gbps"] == ((538.62, 5.72), (5.72, 532.54))


def test_a_p2p_read_run_keeps_its_writes_matrices_and_names_the_reads_ones_not_kept() -> None:
    # --p2p_read prints a (P2P Reads) bandwidth and latency title after each (P2P Writes) one.
    result = result_of("p2p_12")
    assert len(result.gpus) == 12
    assert result.gpus[11] == P2PGpu(11, "Tesla V100-SXM3-32GB", "e7", "0", "0")
    assert result.p2p_access == ((True,) * 12,) * 12
    assert tuple(result.matrices) == P2P_MATRIX_NAMES
    writes = result.matrices["unidirectional_p2p_enabled_gbps"]
    assert writes[0][:3] == (848.29, 145.57, 145.57) and writes[11][11] == 850.57
    assert result.matrices["latency_gpu_p2p_enabled_us"][0][:2] == (4.00, 2.90)
    assert result.matrices["latency_cpu_p2p_enabled_us"][11][10:] == (3.18, 3.74)
    assert result.matrices["bidirectional_p2p_enabled_gbps"][3][11] == 273.56
    assert result.warnings == tuple(
        f"line {n}: the P2P Reads figures under this title were not kept: the P2P Writes ones "
        "printed before them were (a --p2p_read run prints both)"
        for n in (194, 292)
    )


# --- variants made from the real text ------------------------------------------------------


def lines_of(prefix: str) -> list[str]:
    return text_of(prefix).splitlines()


def test_a_four_digit_diagonal_that_breaks_the_alignment_is_read() -> None:
    lines = lines_of("p2p_05")
    assert lines[31] == "     1  22.32 813.80  22.14  22.38"
    lines[31] = "     1  22.32 1813.80  22.14  22.38"
    lines[33] = "     3  22.23  22.24  22.251813.80"  # a wide value run into its neighbour
    result = p2p.parse("\n".join(lines))
    matrix = result.matrices["unidirectional_p2p_disabled_gbps"]
    assert matrix[1] == (22.32, 1813.80, 22.14, 22.38)
    assert matrix[3] == (22.23, 22.24, 22.25, 1813.80)


def test_the_peer_access_lines_serve_when_the_connectivity_matrix_is_absent() -> None:
    lines = lines_of("p2p_02")
    without_matrix = lines[:9] + lines[13:]
    assert without_matrix[9] == "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"
    result = p2p.parse("\n".join(without_matrix))
    assert result.p2p_access == ((True, False), (False, True))


def test_it_rejects_a_truncated_matrix_naming_the_line() -> None:
    lines = lines_of("p2p_05")
    err = parse_error("\n".join(lines[:50]))  # two of the four bidirectional enabled rows
    assert err.line == 50
    assert "bidirectional_p2p_enabled_gbps matrix ends after 2 of its 4 rows" in err.message


def test_it_rejects_a_row_missing_a_value_naming_the_line() -> None:
    lines = lines_of("p2p_01")
    lines[67] = lines[67].rsplit(maxsplit=1)[0]
    err = parse_error("\n".join(lines))
    assert err.line == 68
    assert "row 2 of the unidirectional_p2p_disabled_gbps matrix has 6 values for 7 devices" in (
        err.message
    )


def test_it_rejects_a_matrix_narrower_than_the_device_list() -> None:
    lines = lines_of("p2p_02")
    lines.insert(3, "Device: 2, Tesla M60, pciBusID: 0, pciDeviceID: 0, pciDomainID:aaaa")
    err = parse_error("\n".join(lines))
    assert err.line == 12
    assert "expected 0..2 for 3 devices" in err.message


def test_it_rejects_a_garbled_value_naming_the_line() -> None:
    lines = lines_of("p2p_03")
    lines[41] = lines[41].replace("10.40", "10.4O")
    err = parse_error("\n".join(lines))
    assert err.line == 42
    assert "row 0 of the bidirectional_p2p_disabled_gbps matrix is not all numbers" in err.message


def test_it_rejects_an_extra_row_beyond_the_device_count() -> None:
    lines = lines_of("p2p_02")
    lines.insert(21, "     2   5.26 120.02 ")
    err = parse_error("\n".join(lines))
    assert err.line == 22
    assert "unidirectional_p2p_enabled_gbps matrix has more rows than the 2 devices" in err.message


def test_it_rejects_output_that_ends_right_after_a_matrix_title() -> None:
    lines = lines_of("p2p_06")
    assert lines[38] == "P2P=Enabled Latency (P2P Writes) Matrix (us)"
    err = parse_error("\n".join(lines[:39]))
    assert err.line == 39
    assert err.message == "the output ends before the matrix under this title"


@pytest.mark.parametrize(
    "text",
    ["", "hello\nworld\n", "Device=0 CAN Access Peer Device=1\n"],
    ids=["empty", "prose", "access-line-only"],
)
def test_it_rejects_text_that_is_not_p2p_output(text: str) -> None:
    assert "not p2pBandwidthLatencyTest output" in parse_error(text).message


def test_a_paste_of_only_the_device_list_is_detected_and_read_without_matrices() -> None:
    devices = "\n".join(lines_of("p2p_11")[2:8])
    assert detect_format(devices) == "p2p-bandwidth-latency"
    result = p2p.parse(devices)
    assert [g.pci_bus_id for g in result.gpus] == ["b4", "b5"]
    assert result.p2p_access == ((True, False), (False, True))
    assert result.matrices == {}
    assert result.warnings == ("the output holds no bandwidth or latency matrix",)


# Two tools' outputs in one paste: detection picks one reader (nvbandwidth, then p2p, then
# nccl-tests), which skips the other's lines as commentary; the other is named, not lost.
@pytest.mark.parametrize(
    ("first", "second", "read_as", "unread"),
    [
        ("p2p_03", "nccl_06", "p2p_03", "nccl-tests"),
        ("nccl_06", "p2p_05", "p2p_05", "nccl-tests"),
        ("nvbandwidth_02", "p2p_03", "nvbandwidth_02", "p2pBandwidthLatencyTest"),
        ("p2p_11", "topo_01", "p2p_11", "`nvidia-smi topo -m`"),
    ],
)
def test_a_paste_of_two_tools_outputs_names_the_one_not_read_and_its_line(
    first: str, second: str, read_as: str, unread: str
) -> None:
    def fixture(prefix: str) -> str:
        (path,) = FIXTURES.glob(f"{prefix}_*")
        return path.read_text()

    paste = fixture(first) + "\n" + fixture(second)
    alone = parse_text(fixture(read_as))
    both = parse_text(paste)
    assert type(both) is type(alone)
    assert both.warnings[: len(alone.warnings)] == alone.warnings  # type: ignore[union-attr]
    (extra,) = both.warnings[len(alone.warnings) :]  # type: ignore[union-attr]
    assert extra.endswith(f"starts {unread} output, which was not read: upload it on its own")
    line = int(extra.split()[1])
    started = paste.split("\n")[line - 1]
    second_at = fixture(first).count("\n") + 2
    assert (line >= second_at) == (read_as == first), (line, started)
    assert started.strip(), started


def test_no_single_benchmark_fixture_is_said_to_hold_another_tools_output() -> None:
    for path in sorted(FIXTURES.glob("*")):
        if path.name.split("_")[0] not in ("p2p", "nccl", "nvbandwidth"):
            continue
        if path.name.startswith("nccl_21_"):
            continue  # refused by design: two independent runs interleaved (test_nccl_format)
        if path.name.startswith("nccl_24_"):
            continue  # a run, then `nvidia-smi topo -m` pasted under it (test_nccl_format)
        if path.name.startswith("p2p_14_"):
            continue  # refused by design: its first matrix's title is cut (below)
        parsed = parse_text(path.read_text())
        assert not [w for w in parsed.warnings if "which was not read" in w], path.name  # type: ignore[union-attr]


def test_a_second_run_pasted_after_the_first_is_named_and_not_read() -> None:
    text = text_of("p2p_05")
    twice = p2p.parse(text + "\n" + text.replace("26.32", "25.00"))
    assert twice.matrices == result_of("p2p_05").matrices
    second = text.count("\n") + 2
    # Named at the second run's banner, the line above its device list.
    assert [w for w in twice.warnings if "second run" in w] == [
        f"line {second + _first_device_line(text) - 1} starts a second run; only the first run "
        "was read"
    ]
    # With no banner, at its device list.
    bare = text.replace("[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n", "")
    twice = p2p.parse(text + "\n" + bare)
    assert [w for w in twice.warnings if "second run" in w] == [
        f"line {second + _first_device_line(bare)} starts a second run; only the first run was read"
    ]


def _first_device_line(text: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if line.startswith("Device: 0"))


def _without_lines(lines: list[str], first: int, last: int) -> list[str]:
    """`lines` less lines first..last (numbered from 1, both kept out)."""
    return lines[: first - 1] + lines[last:]


def test_a_reads_matrix_is_kept_where_the_paste_has_no_writes_one() -> None:
    lines = lines_of("p2p_12")
    assert lines[179].startswith("Unidirectional P2P=Enabled Bandwidth (P2P Writes)")
    reads_only = _without_lines(lines, 180, 193)  # the Writes bandwidth matrix cut out
    result = p2p.parse("\n".join(reads_only))
    assert result.matrices["unidirectional_p2p_enabled_gbps"][0][:2] == (850.59, 145.50)
    assert result.matrices["latency_gpu_p2p_enabled_us"][0][:2] == (4.00, 2.90)  # Writes
    assert result.warnings == (
        "line 278: the P2P Reads figures under this title were not kept: the P2P Writes ones "
        "printed before them were (a --p2p_read run prints both)",
        "line 180: the P2P=Enabled figures under this title were measured with P2P reads "
        "(--p2p_read): the paste holds no P2P Writes ones",
    )


def test_a_writes_matrix_after_a_kept_reads_one_takes_its_place() -> None:
    lines = lines_of("p2p_12")
    writes, reads = lines[179:193], lines[193:207]
    swapped = lines[:179] + reads + writes + lines[207:]
    result = p2p.parse("\n".join(swapped))
    assert result.matrices == result_of("p2p_12").matrices
    assert result.warnings[0] == (
        "line 180: the P2P Reads figures under this title were not kept: the P2P Writes ones "
        "at line 194 were"
    )


def test_a_second_writes_matrix_is_refused_with_its_line() -> None:
    lines = lines_of("p2p_12")
    twice = lines[:207] + lines[179:193] + lines[207:]
    err = parse_error("\n".join(twice))
    assert err.line == 209
    assert err.message == "a second unidirectional_p2p_enabled_gbps matrix"


def test_titles_retyped_as_a_readme_author_sets_them_read_the_same() -> None:
    # A driver patch's README: each title a markdown heading over a fenced block, a note after
    # the connectivity title, and "(μs)" for "(us)".
    text = text_of("p2p_01")
    retyped: list[str] = []
    for line in text.split("\n"):
        if line.endswith("Matrix (GB/s)") or line.endswith("Matrix (us)"):
            retyped += ["```", "", "### " + line.replace("(us)", "(μs)"), "", "```"]
        elif line == "P2P Connectivity Matrix":
            retyped.append("P2P Connectivity Matrix (1 = P2P enabled)")
        else:
            retyped.append(line)
    assert "### P2P=Enabled Latency Matrix (μs)" in retyped
    assert p2p.parse("\n".join(retyped)).to_document() == p2p.parse(text).to_document()


def test_a_run_kept_as_a_scripts_comment_reads_with_a_warning() -> None:
    text = text_of("p2p_01")
    commented = "\n".join("# " + line if line else "#" for line in text.split("\n"))
    run = p2p.parse(commented)
    plain = p2p.parse(text)
    assert run.warnings == (
        "every line is commented out with `#`: read as if it were not",
        *plain.warnings,
    )
    assert run.to_document()["matrices"] == plain.to_document()["matrices"]
    assert run.gpus == plain.gpus


def test_a_paste_with_an_editor_s_line_numbers_is_read_without_them() -> None:
    # As an issue pasted it (NVIDIA/cuda-samples#230): vim's line numbers before every line.
    body = [
        "P2P=Disabled Latency Matrix (us)",
        "   GPU     0      1",
        "     0   2.61  14.95",
        "     1  11.09   2.10",
        "",
        "   CPU     0      1",
        "     0   2.67   6.78",
        "     1   6.12   2.55",
    ]
    text = "A snippet of my result:\n\n```\n" + "\n".join(
        f"{n:3d} {line}".rstrip() for n, line in enumerate(body, 1)
    )
    result = p2p.parse(text + "\n```\n")
    assert result.matrices["latency_gpu_p2p_disabled_us"] == ((2.61, 14.95), (11.09, 2.10))
    assert result.matrices["latency_cpu_p2p_disabled_us"] == ((2.67, 6.78), (6.12, 2.55))
    assert result.warnings[0] == (
        "lines 4-11: each line starts with its number in an editor's line-number column: "
        "read without it"
    )


@pytest.mark.parametrize("marker", ["> ", ">", "> > "])
def test_a_run_quoted_in_a_reply_reads_as_the_run_itself(marker: str) -> None:
    plain = p2p.parse(text_of("p2p_05"))
    quoted = "\n".join(marker + line for line in text_of("p2p_05").splitlines())
    assert detect_format(quoted) == "p2p-bandwidth-latency"
    assert parse_text(quoted) == plain


def test_matrices_printed_between_another_program_s_log_lines_are_read_without_a_device_list() -> (
    None
):
    # Isaac Sim's startup log: Omniverse runs a one-GPU P2P validation when the IOMMU is on and
    # prints two of the test's matrices, with no banner or device list, between its log lines
    result = parse_text(text_of("p2p_13"))
    assert isinstance(result, P2PResult)
    assert result.matrices == {
        "unidirectional_p2p_enabled_gbps": ((197.51,),),
        "latency_gpu_p2p_enabled_us": ((1.38,),),
        "latency_cpu_p2p_enabled_us": ((3.15,),),
    }
    assert result.gpus == () and result.p2p_access is None
    assert result.warnings == (NO_DEVICE_LIST,)


def test_a_run_read_from_a_container_s_log_reads_as_the_run_itself() -> None:
    # `kubectl logs --timestamps`: the time before every line
    lines = text_of("p2p_05").splitlines()
    logged = "\n".join(
        f"2026-02-16T10:00:{n % 60:02d}.123456789Z {ln}" for n, ln in enumerate(lines)
    )
    assert detect_format(logged) == "p2p-bandwidth-latency"
    assert parse_text(logged) == p2p.parse(text_of("p2p_05"))


@pytest.mark.parametrize(
    "tag", [lambda n: "[1,0]<stdout>:", lambda n: " 0: "], ids=["mpirun --tag-output", "srun -l"]
)
def test_a_run_tagged_by_its_launcher_reads_as_the_run_itself(tag: Callable[[int], str]) -> None:
    # The command line above the run carries no tag
    lines = text_of("p2p_01").splitlines()
    tagged = "\n".join(
        ["$ srun -l ./p2pBandwidthLatencyTest", *(tag(n) + ln for n, ln in enumerate(lines))]
    )
    assert detect_format(tagged) == "p2p-bandwidth-latency"
    assert parse_text(tagged) == p2p.parse(text_of("p2p_01"))


def test_a_matrix_under_a_cut_title_is_refused_naming_both_lines() -> None:
    # tinygrad/open-gpu-kernel-modules#16: "...in the bios directional P2P=Disabled Bandwidth
    # Matrix (GB/s)": Unidirectional or Bidirectional was cut off with the start of the paste
    with pytest.raises(ParseError) as err:
        parse_text(text_of("p2p_14"))
    assert err.value.line == 2
    assert err.value.message == (
        "a matrix header (D\\D) under a matrix title that is cut or run into other text "
        "(line 1): which matrix it heads is unknown"
    )


def test_a_run_that_died_keeps_the_matrices_it_printed_and_names_the_failure() -> None:
    # The same paste with its title whole: the sample printed one matrix, then the next title,
    # then died with cudaCheckError's message (it exits at once)
    lines = text_of("p2p_14").splitlines()
    lines[0] = "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"
    result = parse_text("\n".join(lines))
    assert isinstance(result, P2PResult)
    disabled = result.matrices["unidirectional_p2p_disabled_gbps"]
    assert list(result.matrices) == ["unidirectional_p2p_disabled_gbps"]
    assert (disabled[0][0], disabled[4][3], disabled[6][6]) == (723.04, 16.62, 287.68)
    assert result.warnings == (
        "line 11: the test failed here (Cuda failure p2pBandwidthLatencyTest.cu:189: 'mapping of "
        "buffer object failed'); the matrices it had still to print are missing",
        NO_DEVICE_LIST,
    )


def test_a_run_that_died_before_printing_anything_is_refused_naming_the_failure() -> None:
    text = (
        "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n"
        "CUDA error at p2pBandwidthLatencyTest.cu:634 code=100(cudaErrorNoDevice) "
        '"cudaGetDeviceCount(&numGPUs)" \n'
    )
    with pytest.raises(ParseError) as err:
        parse_text(text)
    assert err.value.line == 2
    assert err.value.message.startswith(
        "the test failed before printing a device list or matrix: CUDA error at "
        "p2pBandwidthLatencyTest.cu:634 code=100(cudaErrorNoDevice)"
    )
