"""nccl-tests output read from the real captured fixtures, and variants made from them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from topoweb.core.formats import ParseError, detect_format, nccl, parse_text
from topoweb.core.model import NcclMeasurement, NcclRank, NcclRow, NcclRun

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NCCL_FIXTURES = sorted(FIXTURES.glob("nccl_*.txt"))


def text_of(prefix: str) -> str:
    (path,) = FIXTURES.glob(f"{prefix}_*.txt")
    return path.read_text()


def run_of(prefix: str) -> NcclRun:
    return nccl.parse(text_of(prefix))


def row_at(run: NcclRun, size: int) -> NcclRow:
    (row,) = [r for r in run.rows if r.bytes == size]
    return row


@pytest.mark.parametrize("path", NCCL_FIXTURES, ids=lambda p: p.name[:7])
def test_every_nccl_fixture_is_detected_as_nccl_tests(path: Path) -> None:
    assert detect_format(path.read_text()) == "nccl-tests"


def test_it_reads_a_two_node_single_size_all_reduce_with_hex_bus_ids() -> None:
    run = run_of("nccl_01")
    assert run.collective == "all_reduce"
    assert (run.n_threads, run.n_gpus) == (1, 1)  # as printed, although -g 8 was asked for
    assert run.tests_version is None and run.nccl_version is None
    assert len(run.ranks) == 16
    assert run.ranks[8] == NcclRank(
        8, 0, 371, "inst-yyyyy-gpu4-ol89", 0, "0x0f", "NVIDIA A100-SXM4-40GB"
    )
    assert [r.bus_id for r in run.ranks[:8]] == [
        "0x0f", "0x15", "0x51", "0x54", "0x8d", "0x92", "0xd6", "0xda"
    ]  # fmt: skip
    (row,) = run.rows
    assert (row.bytes, row.count, row.type, row.redop, row.root) == (
        10737418240, 2684354560, "float", "sum", -1
    )  # fmt: skip
    assert row.out_of_place == NcclMeasurement(90330.0, 118.87, 222.88, 0)
    assert row.in_place == NcclMeasurement(91945.0, 116.78, 218.96, 0)
    assert run.avg_busbw_gbps == 220.921
    assert run.errors == ()
    assert run.command is not None and run.command.startswith("mpirun --allow-run-as-root -np 2")
    assert run.command.endswith("./build/all_reduce_perf -b 10G -e 10G -t 1 -g 8")


def test_it_reads_versions_and_the_collective_through_authorization_noise() -> None:
    run = run_of("nccl_03")
    assert run.tests_version == "2.18.3"
    assert run.nccl_version == "2.28.9"  # decoded from nccl-library=22809
    assert run.collective == "all_gather"
    assert [(r.host, r.bus_id, r.name) for r in run.ranks] == [
        ("spark-fb97", "000f:01:00", "NVIDIA GB10"),
        ("spark-4440", "000f:01:00", "NVIDIA GB10"),
    ]
    assert [r.bytes for r in run.rows] == [1073741824, 2147483648, 4294967296]
    assert run.rows[0].redop == "none"
    assert run.rows[0].out_of_place.time_us == 27211.0
    assert run.rows[2].in_place == NcclMeasurement(95610.9, 44.92, 22.46, 0)
    assert run.avg_busbw_gbps == 21.4033
    assert run.errors == ()
    # the multi-line mpirun command is joined, without the backslashes
    assert run.command == (
        "mpirun -np 2 -H 192.168.100.15:1,192.168.100.16:1 --mca oob_tcp_if_include enp1s0f1np1 "
        "--mca btl_tcp_if_include enp1s0f1np1 -x LD_LIBRARY_PATH -x NCCL_SOCKET_IFNAME=enp1s0f1np1 "
        "./build/all_gather_perf -b 1G -e 4G -f 2 -n 50 -w 10 -g 1"
    )


def test_it_reports_a_run_that_printed_only_its_header_as_failed() -> None:
    run = run_of("nccl_05")
    assert run.failed
    assert run.errors == (
        "no results: the output ends before the first table row "
        "(the run hung or died after its header)",
    )
    assert run.rows == ()
    assert run.n_gpus == 8
    assert {r.pid for r in run.ranks} == {498607}
    assert [r.bus_id for r in run.ranks] == [
        "0x18", "0x2a", "0x3a", "0x5d", "0x9a", "0xab", "0xba", "0xdb"
    ]  # fmt: skip
    assert run.ranks[7].name == "NVIDIA H100 80GB HBM3"
    assert run.avg_busbw_gbps is None
    assert run.collective is None
    assert run.warnings == ("the collective is unknown: no command line names the test binary",)


def test_it_reads_a_full_sweep_whose_time_column_turns_integer() -> None:
    run = run_of("nccl_06")
    assert run.collective == "all_reduce"
    assert run.command == "./build/all_reduce_perf -b 64 -e 10G -f 2 -t 1 -g 8"
    assert len(run.rows) == 28
    assert run.rows[0].bytes == 64 and run.rows[-1].bytes == 8589934592
    assert row_at(run, 4194304).out_of_place == NcclMeasurement(134.5, 31.18, 54.57, 0)
    assert row_at(run, 2147483648).out_of_place.time_us == 16232.0
    assert row_at(run, 8589934592).in_place.busbw_gbps == 235.21
    assert run.avg_busbw_gbps == 81.112
    assert {r.host for r in run.ranks} == {"inst-ks8ls-comp"}
    assert run.errors == ()


def test_it_reads_a_log_tail_with_debug_lines_and_na_wrong_as_a_broadcast() -> None:
    run = run_of("nccl_08")
    assert len(run.rows) == 30
    assert all(r.out_of_place.wrong is None and r.in_place.wrong is None for r in run.rows)
    assert all((r.redop, r.root) == ("none", 0) for r in run.rows)
    assert row_at(run, 2147483648).out_of_place == NcclMeasurement(13018.0, 164.97, 164.97, None)
    assert row_at(run, 16777216).in_place.time_us == 122.8
    assert run.avg_busbw_gbps == 52.4049
    assert run.ranks == () and run.n_threads is None
    assert run.errors == ()
    assert run.collective == "broadcast"
    assert run.warnings == (
        "the start of the output is missing: no `# nThread` header or rank list comes "
        "before the table (line 10), so the ranks and GPUs the run used are unknown",
        "the collective (broadcast) is inferred from the table's columns: "
        "no command line names the test binary",
    )


def test_it_reports_the_cuda_failure_of_a_markdown_mangled_alltoall_run() -> None:
    run = run_of("nccl_09")
    assert run.failed
    assert (
        run.errors[0]
        == "node: Test CUDA failure common.cu:297 'an illegal memory access was encountered'"
    )
    assert run.errors[1:] == tuple(
        f".. node pid 12225: Test failure {where}"
        for where in ("common.cu:407", "common.cu:594", "alltoall.cu:97", "common.cu:625",
                      "common.cu:1123", "common.cu:893")
    )  # fmt: skip
    assert run.rows == ()
    assert (run.n_threads, run.n_gpus) == (1, 1)  # from '#nThread', hash glued to the word
    assert run.ranks == (NcclRank(0, 0, 12225, "node", 0, "0000:16:00", "NVIDIA GeForce RTX 5090"),)
    assert run.nccl_version == "2.25.1+cuda12.4"  # from the NCCL_DEBUG=INFO banner
    assert run.collective == "alltoall"
    assert run.command == "NCCL_DEBUG=INFO ./alltoall_perf"
    assert run.avg_busbw_gbps is None


def test_a_log_line_that_starts_with_a_digit_still_gives_the_nccl_version() -> None:
    # Rows are told by their first digit; a host named by its address is not a row.
    text = text_of("nccl_09").replace("node:12225:12225 [0] NCCL INFO", "10.0.0.7:12225 NCCL INFO")
    assert nccl.parse(text).nccl_version == "2.25.1+cuda12.4"


def test_a_forks_banner_gives_the_nccl_version_from_its_version_code() -> None:
    # The line a fork of nccl-tests' common.cu prints before its header (a public capture,
    # from host gdr116), in place of NCCL's own banner; its code 22602 is NCCL 2.26.2.
    banner = (
        "[gdr116] tid:21762, main(), common.cu:699, NCCL version: 22602, "
        "CUDA Runtime Version: 12.0, CUDA Driver Version: 12.4"
    )
    plain = run_of("nccl_06")
    run = nccl.parse(banner + "\n" + text_of("nccl_06"))
    assert plain.nccl_version is None
    assert run.nccl_version == "2.26.2"
    assert run.rows == plain.rows and run.warnings == plain.warnings


def test_it_reads_a_two_gpu_sweep_with_stripped_trailing_whitespace() -> None:
    run = run_of("nccl_11")
    assert run.n_gpus == 2 and len(run.ranks) == 2
    assert len(run.rows) == 28
    assert row_at(run, 1048576).out_of_place == NcclMeasurement(279.5, 3.75, 3.75, 0)
    assert row_at(run, 1073741824).in_place == NcclMeasurement(268461.0, 4.0, 4.0, 0)
    assert run.avg_busbw_gbps == 2.05774


def test_it_reads_misaligned_in_place_columns_and_an_integer_average() -> None:
    run = run_of("nccl_12")
    assert run.collective == "reduce"
    assert len(run.rows) == 28
    assert all(r.root == 0 for r in run.rows)
    last = row_at(run, 1073741824)
    assert last.out_of_place == NcclMeasurement(4016.0, 267.37, 267.37, 0)
    assert last.in_place == NcclMeasurement(0.19, 5706839.35, 5706839.35, 0)
    assert row_at(run, 2048).in_place == NcclMeasurement(0.18, 11.17, 11.17, 0)
    assert run.avg_busbw_gbps == 202818.0


def test_it_reads_a_single_alltoall_row_with_in_place_wrong_na_and_zero_average() -> None:
    run = run_of("nccl_14")
    (row,) = run.rows
    assert row.out_of_place == NcclMeasurement(19.56, 1715.44, 0.0, 0)
    assert row.in_place == NcclMeasurement(0.78, 43046.10, 0.0, None)
    assert run.avg_busbw_gbps == 0.0
    assert run.ranks[0].host == "GENOA-01"
    assert run.ranks[0].bus_id == "0x01"
    assert run.command == "sudo ./build/./alltoall_perf"
    assert run.collective == "alltoall"
    assert run.errors == ()


def test_it_reads_the_old_format_with_an_error_column_and_no_root_or_group() -> None:
    run = run_of("nccl_15")
    assert run.collective == "all_reduce"
    assert run.n_gpus == 12
    assert run.ranks[11] == NcclRank(11, None, 88131, "seville", 11, "0xe7", "Tesla V100-SXM3-32GB")
    assert len(run.rows) == 31
    first = run.rows[0]
    assert (first.bytes, first.count, first.type, first.redop, first.root) == (
        8,
        2,
        "float",
        "sum",
        None,
    )
    assert first.out_of_place == NcclMeasurement(61.03, 0.0, 0.0, None, 2e-07)
    assert first.in_place.error == 1e-07
    assert row_at(run, 8589934592).out_of_place == NcclMeasurement(
        127453.0, 67.40, 123.56, None, 2e-07
    )
    assert run.avg_busbw_gbps == 42.5578
    assert run.errors == ()
    assert run.command is not None and run.command.startswith("CUDA_VISIBLE_DEVICES=1,2,6,7")


def test_a_failure_printed_inside_the_first_row_reads_as_a_failed_run() -> None:
    run = run_of("nccl_17")  # line 28: the row's leading columns, then the CUDA failure
    assert run.failed
    assert run.collective == "alltoall"
    assert (run.tests_version, run.nccl_version) == ("2.17.6", "2.28.7+cuda13.0")
    assert len(run.ranks) == 16
    assert run.ranks[15] == NcclRank(15, 0, 36795, "node1", 7, "0000:db:00", "NVIDIA H800")
    assert run.rows == ()
    assert run.errors == (
        "node0: Test CUDA failure common.cu:389 'an illegal memory access was encountered'",
        *(
            f".. node0 pid 62767: Test failure {where}"
            for where in ("common.cu:519", "common.cu:532", "common.cu:704", "alltoall.cu:348",
                          "common.cu:718", "common.cu:1368")
        ),
    )  # fmt: skip
    assert run.warnings == (
        "line 28: a failure message cuts off the table row before it; that row is not read",
    )
    assert run.avg_busbw_gbps is None


def test_it_reads_old_format_alltoall_rows_that_leave_the_redop_blank() -> None:
    run = run_of("nccl_18")  # each row a column short of its header: no redop printed
    assert run.n_gpus == 8
    assert run.ranks[7] == NcclRank(7, None, 167261, "localhost", 7, "0x00", "A100-SXM4-40GB")
    assert len(run.rows) == 34
    assert [r.bytes for r in run.rows[:6]] == [0, 0, 0, 0, 0, 32]
    assert all((r.type, r.redop, r.root) == ("float", None, None) for r in run.rows)
    assert run.rows[0].out_of_place == NcclMeasurement(1.63, 0.0, 0.0, None, None)
    assert row_at(run, 8388608).in_place == NcclMeasurement(120.6, 69.56, 60.87, None, None)
    assert row_at(run, 8589934592).out_of_place == NcclMeasurement(
        33508.0, 256.36, 224.31, None, None
    )
    assert run.avg_busbw_gbps == 58.6481
    assert run.errors == ()
    # busbw/algbw = 7/8 fits alltoall and all_gather alike, and no command line names it
    assert run.collective is None


def test_a_finished_run_without_its_average_and_with_an_elided_rank_list_warns() -> None:
    run = run_of("nccl_19")  # ranks 0, 7, 8, 15 of 16 listed; the Avg line taken out
    assert (run.tests_version, run.nccl_version) == ("2.17.9", "2.29.3+cuda13.1")
    assert run.collective == "all_reduce"
    assert [(r.rank, r.host[-1], r.device, r.bus_id) for r in run.ranks] == [
        (0, "0", 0, "0000:0f:00"),
        (7, "0", 7, "0000:da:00"),
        (8, "1", 0, "0000:0f:00"),
        (15, "1", 7, "0000:da:00"),
    ]
    assert [r.bytes for r in run.rows] == [1073741824 << i for i in range(4)]
    assert run.rows[0].out_of_place == NcclMeasurement(10887.4, 98.62, 184.92, 0)
    assert row_at(run, 8589934592).in_place == NcclMeasurement(84992.3, 101.07, 189.50, 0)
    assert run.avg_busbw_gbps is None
    assert run.errors == ()  # "# Collective test concluded" (line 27): the sweep finished
    assert run.warnings == (
        "lines 12-15: the rank list is elided: ranks are numbered up to 15 but 4 are listed",
        "the `# Avg bus bandwidth` line is missing, though line 27 shows the run finished: "
        "the average is unknown",
    )


# --- variants made from the real text ------------------------------------------------------


def lines_of(prefix: str) -> list[str]:
    return text_of(prefix).splitlines()


def test_a_run_that_died_mid_table_keeps_its_rows_and_reports_the_failure() -> None:
    lines = lines_of("nccl_11")
    first_rows = lines[:20]  # header, column header and ten rows
    failure = "autodl: Test NCCL failure common.cu:1005 'unhandled system error'"
    run = nccl.parse(
        "\n".join([*first_rows, failure, " .. autodl pid 31706: Test failure common.cu:400"])
    )
    assert len(run.rows) == 10 and run.rows[-1].bytes == 4096
    assert run.errors == (failure, ".. autodl pid 31706: Test failure common.cu:400")


def test_a_failure_that_cuts_a_row_keeps_the_complete_rows_before_it() -> None:
    lines = lines_of("nccl_11")
    cut = lines[20][: lines[20].index("-1") + 2]  # the 8192-byte row up to its root column
    failure = "autodl: Test NCCL failure common.cu:1005 'unhandled system error'"
    run = nccl.parse("\n".join([*lines[:20], f"{cut} {failure}"]))
    assert len(run.rows) == 10 and run.rows[-1].bytes == 4096
    assert run.errors == (failure,)
    assert run.warnings == (
        "line 21: a failure message cuts off the table row before it; that row is not read",
    )


def test_a_log_cut_off_mid_table_without_a_message_is_reported_as_unfinished() -> None:
    run = nccl.parse("\n".join(lines_of("nccl_06")[:22]))
    assert len(run.rows) == 5
    assert run.errors == ("the output ends before `# Avg bus bandwidth`: the run did not finish",)


def test_a_run_whose_average_line_was_removed_finished_by_its_out_of_bounds_line() -> None:
    lines = [ln for ln in lines_of("nccl_11") if "Avg bus bandwidth" not in ln]
    run = nccl.parse("\n".join(lines))
    assert len(run.rows) == 28 and run.avg_busbw_gbps is None
    assert run.errors == ()
    assert run.warnings == (
        "the `# Avg bus bandwidth` line is missing, though line 39 shows the run finished: "
        "the average is unknown",
    )


def test_a_rank_list_with_ranks_taken_out_is_named_as_elided() -> None:
    lines = lines_of("nccl_06")
    del lines[6:12]  # ranks 1 to 6, leaving 0 and 7
    run = nccl.parse("\n".join(lines))
    assert [r.rank for r in run.ranks] == [0, 7] and run.n_gpus == 8
    assert run.warnings == (
        "lines 6-7: the rank list is elided: ranks are numbered up to 7 but 2 are listed",
    )


def test_a_rank_list_condensed_into_ranges_is_named() -> None:
    # As a cluster's docs print a run's rank list (`#  Rank  0 .. Rank  7 on host  GPU`):
    # which hosts ran how many ranks, not each rank's GPU and bus id.
    lines = lines_of("nccl_06")
    lines[5:13] = [
        "#  Rank  0 .. Rank  3 on inst-ks8ls-comp  NVIDIA A100-SXM4-40GB",
        "#  Rank  4 .. Rank  7 on inst-ks8ls-comp  NVIDIA A100-SXM4-40GB",
    ]
    run = nccl.parse("\n".join(lines))
    assert run.ranks == () and run.n_gpus == 8
    assert run.rows == run_of("nccl_06").rows
    assert run.warnings == (
        "lines 6-7: the rank list is condensed into ranges (8 ranks on 1 host(s)), not a line "
        "per rank as nccl-tests prints it: each rank's GPU and bus id are unknown",
    )


def test_a_log_cut_inside_a_row_keeps_the_complete_rows() -> None:
    text = (
        "\n".join(lines_of("nccl_06")[:22])
        + "\n        2048           512     float     sum      -1    31.7"
    )
    run = nccl.parse(text)
    assert len(run.rows) == 5
    assert "the output ends inside a table row (line 23)" in run.errors


def test_a_command_quoted_in_markdown_is_read_without_its_quote_markers() -> None:
    lines = lines_of("nccl_03")
    lines[1:8] = ["> " + ln for ln in lines[1:8]]  # the mpirun command, quoted line by line
    assert nccl.parse("\n".join(lines)).command == run_of("nccl_03").command


def test_it_rejects_a_garbled_number_in_a_row_naming_the_line() -> None:
    lines = lines_of("nccl_11")
    lines[14] = lines[14].replace("11.69", "11.6x9")
    with pytest.raises(ParseError) as err:
        nccl.parse("\n".join(lines))
    assert err.value.line == 15
    assert "out-of-place time '11.6x9' is not a number" in str(err.value)


def test_it_rejects_a_row_with_a_missing_column_naming_the_line() -> None:
    lines = lines_of("nccl_11")
    lines[12] = lines[12].rsplit(maxsplit=1)[0]
    with pytest.raises(ParseError) as err:
        nccl.parse("\n".join(lines))
    assert err.value.line == 13
    assert "12 columns, the header names 13" in err.value.message


def test_an_old_format_row_short_of_another_column_than_the_redop_is_refused() -> None:
    lines = lines_of("nccl_15")
    lines[21] = lines[21].rsplit(maxsplit=1)[0]  # its in-place error dropped; redop "sum" kept
    with pytest.raises(ParseError) as err:
        nccl.parse("\n".join(lines))
    assert err.value.line == 22
    assert "11 columns, the header names 12" in err.value.message


def test_wrong_elements_and_out_of_bounds_values_make_a_run_fail() -> None:
    lines = lines_of("nccl_01")
    lines[24] = lines[24][:-1] + "7"  # in-place #wrong 0 -> 7
    lines[25] = "# Out of bounds values : 7 FAILED"
    run = nccl.parse("\n".join(lines))
    assert run.rows[0].in_place.wrong == 7
    assert run.errors == (
        "out of bounds values: 7 FAILED",
        "7 wrong elements at 10737418240 bytes (in-place)",
    )


def test_a_table_pasted_without_any_header_is_still_read() -> None:
    rows = [ln for ln in lines_of("nccl_06") if ln.startswith("  ")]
    run = nccl.parse("\n".join(rows))
    assert len(run.rows) == 28
    assert run.collective == "all_reduce"  # busbw/algbw = 1.75 = 2(n-1)/n with n = 8
    assert run.errors == ("the output ends before `# Avg bus bandwidth`: the run did not finish",)
    assert run.ranks == () and run.n_gpus is None
    assert run.warnings[0] == (
        "the start of the output is missing: no `# nThread` header or rank list comes "
        "before the table (line 1), so the ranks and GPUs the run used are unknown"
    )


def test_a_log_tail_from_the_first_row_to_the_average_warns_its_start_is_missing() -> None:
    # As kubectl logs --tail gives it: a debug line (one of nccl_08's), then the rows and the
    # summary lines.
    tail = [lines_of("nccl_08")[0], *lines_of("nccl_06")[17:]]
    run = nccl.parse("\n".join(tail))
    assert len(run.rows) == 28 and run.avg_busbw_gbps == 81.112
    assert run.errors == ()
    assert run.warnings == (
        "the start of the output is missing: no `# nThread` header or rank list comes "
        "before the table (line 2), so the ranks and GPUs the run used are unknown",
        "the collective (all_reduce) is inferred from the table's columns: "
        "no command line names the test binary",
    )


def test_only_the_first_of_two_concatenated_runs_is_read() -> None:
    text = text_of("nccl_11") + "\n" + text_of("nccl_12")
    run = nccl.parse(text)
    assert run.collective == "all_reduce" and len(run.rows) == 28
    assert run.avg_busbw_gbps == 2.05774
    assert run.warnings == (
        "line 44 starts a second run; only the first run was read",
    )  # its nThread line


def test_it_rejects_an_unknown_column_header_naming_the_line() -> None:
    lines = lines_of("nccl_11")
    lines[8] = lines[8].replace("busbw", "latency", 1)
    with pytest.raises(ParseError) as err:
        nccl.parse("\n".join(lines))
    assert err.value.line == 9
    assert "unrecognised nccl-tests column header" in err.value.message


@pytest.mark.parametrize(
    "text",
    ["", "hello world\n", "GPU0\tX\tNV18\n", "./build/all_reduce_perf -b 8\n"],
    ids=["empty", "prose", "topology", "command-only"],
)
def test_it_rejects_text_that_is_not_nccl_tests_output(text: str) -> None:
    with pytest.raises(ParseError, match="not nccl-tests output"):
        nccl.parse(text)


def test_a_table_with_only_its_column_header_is_detected_as_nccl_tests() -> None:
    lines = lines_of("nccl_08")
    header = [ln for ln in lines if "#wrong" in ln]
    rows = [ln for ln in lines if ln[:1] == " " and ln.split()[0].isdigit()]
    assert len(header) == 1 and len(rows) == 30
    text = "\n".join(header + rows)
    assert detect_format(text) == "nccl-tests"
    assert len(nccl.parse(text).rows) == 30


def test_it_reads_a_two_rank_run_whose_lines_mpirun_tagged() -> None:
    run = run_of("nccl_16")  # mpirun --tag-output: "[1,0]<stdout>:" before every line
    assert run.collective == "all_reduce"
    assert (run.tests_version, run.nccl_version) == ("2.18.0", "2.29.7")
    assert (run.n_threads, run.n_gpus) == (1, 1)
    assert [(r.rank, r.pid, r.host, r.bus_id) for r in run.ranks] == [
        (0, 2994447, "lab", "0000:02:00"),
        (1, 2994448, "lab", "0000:02:00"),
    ]
    assert [r.bytes for r in run.rows] == [1048576 << i for i in range(8)]
    assert row_at(run, 134217728).out_of_place == NcclMeasurement(58479.5, 2.30, 2.30, 0)
    assert run.avg_busbw_gbps == 1.57614
    assert run.errors == () and run.warnings == ()


# How a run's lines reach someone who pastes them: tagged by the launcher that ran it (Open MPI's
# --tag-output, Slurm's srun --label with task numbers right-aligned, MPICH's -prepend-rank),
# indented as a markdown code block, or with every '#' taken by a page that renders markdown.
VARIANTS = {
    "mpirun --tag-output": lambda line: "[1,0]<stdout>:" + line,
    "srun --label": lambda line: " 0: " + line,
    "mpiexec -prepend-rank": lambda line: "[0] " + line,
    "markdown indent": lambda line: "    " + line,
    "rendered markdown": lambda line: line.lstrip().removeprefix("#"),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("prefix", ["nccl_01", "nccl_06", "nccl_15", "nccl_18"])
def test_a_run_reads_the_same_however_its_lines_were_tagged_or_pasted(
    prefix: str, variant: str
) -> None:
    original = run_of(prefix)
    text = "\n".join(VARIANTS[variant](line) for line in lines_of(prefix))
    assert detect_format(text) == "nccl-tests"
    read = nccl.parse(text)
    assert read.rows == original.rows and read.avg_busbw_gbps == original.avg_busbw_gbps
    assert read.ranks == original.ranks and read.collective == original.collective
    assert (read.n_threads, read.n_gpus) == (original.n_threads, original.n_gpus)
    assert read.errors == original.errors


def test_a_sendrecv_table_without_a_command_line_is_not_taken_for_an_all_reduce() -> None:
    # Two ranks: all_reduce's busbw/algbw, 2(n-1)/n, is 1 as sendrecv's is; only sendrecv and
    # alltoall print their in-place #wrong as N/A while checking the out-of-place one.
    run = run_of("nccl_20")
    assert (run.n_threads, run.n_gpus, len(run.ranks)) == (2, 1, 2)
    assert run.nccl_version == "2.22.3+cuda12.2" and run.command is None
    assert len(run.rows) == 29
    assert all(r.out_of_place.wrong == 0 and r.in_place.wrong is None for r in run.rows)
    assert row_at(run, 2147483648).out_of_place == NcclMeasurement(29935.0, 71.74, 71.74, 0)
    assert run.collective == "sendrecv"
    assert run.warnings == (
        "the collective (sendrecv) is inferred from the table's columns: "
        "no command line names the test binary",
    )
    assert run.errors == () and run.avg_busbw_gbps == 24.3607


def _with_checks(lines: list[str], out_of_place: str, in_place: str) -> list[str]:
    """The table's rows with their #wrong columns set as given."""

    def row(line: str) -> str:
        tokens = line.split()
        if len(tokens) != 13 or not tokens[0].isdigit():
            return line
        tokens[8], tokens[12] = out_of_place, in_place
        return "  ".join(tokens)

    return [row(ln) for ln in lines]


def test_a_two_rank_all_reduce_is_told_from_a_sendrecv_by_its_in_place_check() -> None:
    run = nccl.parse("\n".join(_with_checks(lines_of("nccl_20"), "0", "0")))
    assert len(run.rows) == 29 and run.collective == "all_reduce"


def test_a_ratio_of_one_with_no_check_at_all_leaves_the_collective_unknown() -> None:
    # validation 0: every check N/A, so nothing tells a two-rank all_reduce from a sendrecv
    run = nccl.parse("\n".join(_with_checks(lines_of("nccl_20"), "N/A", "N/A")))
    assert len(run.rows) == 29 and run.collective is None
    assert run.warnings == ("the collective is unknown: no command line names the test binary",)


def test_the_rank_count_keeps_a_ratio_that_does_not_fit_it_from_naming_an_all_reduce() -> None:
    # 16 ranks listed, busbw/algbw 1: not all_reduce's 2(n-1)/n = 1.875
    lines = lines_of("nccl_01")
    lines[24] = lines[24].replace("222.88", "118.87")
    lines = [ln for ln in lines if "all_reduce_perf" not in ln]
    run = nccl.parse("\n".join(lines))
    assert len(run.ranks) == 16 and run.command is None
    assert run.collective is None


def test_a_rank_list_condensed_into_ranges_counts_its_ranks_for_the_collective() -> None:
    # The same table under `#  Rank  0 .. Rank  7 on host` lines: 16 ranks, and busbw/algbw 1
    # is not all_reduce's 2(n-1)/n = 1.875
    lines = lines_of("nccl_01")
    lines[24] = lines[24].replace("222.88", "118.87")
    lines[4:20] = [
        "#  Rank  0 .. Rank  7 on inst-xxxxx-gpu4-ol89  NVIDIA A100-SXM4-40GB",
        "#  Rank  8 .. Rank 15 on inst-yyyyy-gpu4-ol89  NVIDIA A100-SXM4-40GB",
    ]
    run = nccl.parse("\n".join(ln for ln in lines if "all_reduce_perf" not in ln))
    assert run.ranks == () and len(run.rows) == 1 and run.command is None
    assert run.collective is None
    assert "16 ranks on 2 host(s)" in run.warnings[0]


def test_two_independent_runs_printed_into_one_output_are_refused_naming_the_line() -> None:
    # nccl-tests built without MPI=1, started by mpirun on two hosts: each process ran alone
    with pytest.raises(ParseError) as err:
        run_of("nccl_21")
    assert err.value.line == 4  # the second `# nThread` header, before any table
    assert "several independent nccl-tests runs" in err.value.message
    assert "without being built with MPI=1" in err.value.message
    assert "Upload one process's output, or rebuild nccl-tests with MPI=1" in err.value.message


def test_a_rank_listed_again_by_another_process_is_refused_as_another_run() -> None:
    lines = lines_of("nccl_21")
    del lines[3:6]  # the second header: the second rank list, inside the table, tells it
    with pytest.raises(ParseError) as err:
        nccl.parse("\n".join(lines))
    assert err.value.line == 27
    assert err.value.message.startswith(
        "rank 0 is listed again (Pid 2171626 on node2; line 4: Pid 1528921 on node3): "
        "this output holds several independent nccl-tests runs"
    )


def test_a_second_run_whose_header_starts_at_its_rank_list_is_not_read() -> None:
    second = [ln for ln in lines_of("nccl_12") if "nThread" not in ln]
    run = nccl.parse(text_of("nccl_11") + "\n" + "\n".join(second))
    assert run.collective == "all_reduce" and len(run.rows) == 28
    assert run.ranks == run_of("nccl_11").ranks  # not nccl_12's rank besides
    (warning,) = run.warnings
    assert warning.endswith("starts a second run; only the first run was read")


def test_a_table_with_wrong_columns_and_a_blank_redop_is_read_as_v2_13_printed_it() -> None:
    # nccl-tests v2.13.0 printed "" as the redop of all_gather and the other non-reductions
    lines = [ln.replace("  none  ", "        ") for ln in lines_of("nccl_03")]
    run = nccl.parse("\n".join(lines))
    original = run_of("nccl_03")
    assert [r.redop for r in run.rows] == [None, None, None]
    assert [r.root for r in run.rows] == [-1, -1, -1]
    assert [(r.out_of_place, r.in_place) for r in run.rows] == [
        (r.out_of_place, r.in_place) for r in original.rows
    ]
    assert run.errors == ()


def _mpich_chunks(line: str) -> str:
    """A row as MPICH -prepend-rank forwards it: tagged at each flush of nccl-tests' output
    (after the leading columns and after each measurement group)."""
    tokens = line.split()
    if len(tokens) != 13 or not tokens[0].isdigit():
        return "[0] " + line
    return "[0] " + "  ".join([*tokens[:4], tokens[4] + "[0]", *tokens[5:8], tokens[8] + "[0]",
                               *tokens[9:]])  # fmt: skip


def test_mpich_tags_glued_inside_rows_are_removed_with_a_warning() -> None:
    original = run_of("nccl_06")
    run = nccl.parse("\n".join(_mpich_chunks(ln) for ln in lines_of("nccl_06")))
    assert run.rows == original.rows and run.avg_busbw_gbps == original.avg_busbw_gbps
    assert run.collective == "all_reduce" and run.errors == ()
    assert run.warnings == (
        "lines 18-45: the launcher's tags (MPICH -prepend-rank's `[N]`, printed again inside "
        "a line at each flush of its output) were removed",
    )


@pytest.mark.parametrize(
    "excerpt",
    [
        lambda lines: [_mpich_chunks(ln) for ln in lines[17:45]],  # the rows alone
        # from the column header, on a page that took each '#'
        lambda lines: [_mpich_chunks(ln.lstrip().removeprefix("#")) for ln in lines[14:]],
    ],
    ids=["rows", "rendered-table"],
)
def test_an_mpich_tagged_excerpt_without_the_header_is_detected_and_read(
    excerpt: Callable[[list[str]], list[str]],
) -> None:
    text = "\n".join(excerpt(lines_of("nccl_06")))
    assert detect_format(text) == "nccl-tests"
    assert nccl.parse(text).rows == run_of("nccl_06").rows


def test_only_the_tag_a_line_starts_with_is_taken_from_inside_it() -> None:
    lines = [_mpich_chunks(ln).replace("[0]", "[1]", 1) for ln in lines_of("nccl_06")]
    with pytest.raises(ParseError) as err:
        nccl.parse("\n".join(lines))
    assert err.value.line == 18 and "root '-1[0]' is not an integer" in err.value.message


def test_a_row_tail_split_off_by_log_lines_is_named_in_a_warning() -> None:
    lines = lines_of("nccl_11")
    at = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["8"])
    lines.insert(at, "    579.3    0.00    0.00      0    137.0    0.00    0.00      0")
    run = nccl.parse("\n".join(lines))
    assert run.rows == run_of("nccl_11").rows
    assert run.warnings == (
        f"line {at + 1}: a row's measurements stand alone, without its size, count and type "
        "(the rest of a row split off by interleaved log lines); it is not read",
    )


def test_a_forks_per_process_gpu_header_gives_one_thread_and_its_gpus() -> None:
    # NVIDIA/nccl-tests PR #364 prints `# nGpus(perProc) N ...` and runs one thread a process
    lines = [
        "# nGpus(perProc) 8 minBytes 64" + ln.split("minBytes 64", 1)[1] if "nThread" in ln else ln
        for ln in lines_of("nccl_06")
    ]
    run = nccl.parse("\n".join(lines))
    assert (run.n_threads, run.n_gpus) == (1, 8)
    assert run.rows == run_of("nccl_06").rows and run.warnings == ()


def test_a_failed_run_and_its_rerun_pasted_together_read_as_two_runs_not_as_interleaved_ones() -> (
    None
):
    # A run that failed mid-table (nccl_17), then a whole run pasted after it (nccl_06): the
    # second header and rank list belong to the rerun, not to processes of the first.
    run = nccl.parse(text_of("nccl_17") + "\n" + text_of("nccl_06"))
    assert run.errors
    assert {rank.host for rank in run.ranks} == {r.host for r in run_of("nccl_17").ranks}


def test_a_sentence_naming_the_test_binary_is_not_taken_for_its_command_line() -> None:
    # As a reply introduces a run it pastes: the sentence names the binary, the prompt runs it
    lines = ["Can confirm all_reduce_perf now works. Thank you.", "", *lines_of("nccl_06")]
    run = nccl.parse("\n".join(lines))
    assert run.command == "./build/all_reduce_perf -b 64 -e 10G -f 2 -t 1 -g 8"
    assert run.rows == run_of("nccl_06").rows and run.warnings == ()


def test_a_run_quoted_in_a_reply_is_read_without_its_quote_markers() -> None:
    # NVIDIA/nccl-tests#287: a reply quoting a whole run, "> " before every line of it
    run = parse_text(text_of("nccl_22"), expected="nccl-tests")
    assert isinstance(run, NcclRun)
    assert run.collective == "all_reduce" and (run.n_threads, run.n_gpus) == (1, 4)
    assert [r.bus_id for r in run.ranks] == ["0x01", "0x21", "0x41", "0x61"]
    assert len(run.rows) == 25 and run.avg_busbw_gbps == 9.09703
    assert row_at(run, 2097152).out_of_place == NcclMeasurement(152.9, 13.72, 20.57, 0)
    assert row_at(run, 134217728).in_place == NcclMeasurement(7380.5, 18.19, 27.28, 0)
    assert run.command == "sudo ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 4"
    assert run.errors == () and run.warnings == ()


def test_a_table_pasted_without_its_summary_reads_as_finished_where_it_reaches_its_last_size() -> (
    None
):
    # li-plus/playground: the command line, the column header and four rows up to -e 1G
    run = run_of("nccl_23")
    assert (
        run.collective == "sendrecv"
        and run.command == "./build/sendrecv_perf -b 128M -e 1G -f 2 -g 8"
    )
    assert [r.bytes for r in run.rows] == [134217728 << i for i in range(4)]
    assert row_at(run, 1073741824).out_of_place == NcclMeasurement(5503.4, 195.10, 195.10, 0)
    assert row_at(run, 1073741824).in_place == NcclMeasurement(5490.5, 195.56, 195.56, None)
    assert run.errors == () and run.avg_busbw_gbps is None
    assert run.warnings[1] == (
        "the `# Avg bus bandwidth` line is missing, though the table reaches the sweep's last "
        "size (-e 1073741824 bytes): the average is unknown"
    )


def test_the_sweep_s_long_options_read_as_its_short_ones() -> None:
    # nccl-tests takes --maxbytes, --stepfactor and --stepbytes for -e, -f and -i.
    text = text_of("nccl_23")
    short = "./build/sendrecv_perf -b 128M -e 1G -f 2 -g 8"
    assert short in text
    for long in (
        "./build/sendrecv_perf --minbytes 128M --maxbytes 1G --stepfactor 2 -g 8",
        "./build/sendrecv_perf --minbytes=128M --maxbytes=1G --stepbytes=256M --stepfactor=2 -g 8",
    ):
        run = nccl.parse(text.replace(short, long))
        assert run.command == long and run.errors == ()
        assert "the table reaches the sweep's last size (-e 1073741824 bytes)" in run.warnings[1]


def test_the_header_s_sweep_tells_a_table_cut_before_its_last_size_from_a_finished_one() -> None:
    # No command line: the header's `maxBytes 10737418240 step: 2(factor)` and the last row
    lines = [
        ln
        for ln in lines_of("nccl_06")
        if not ln.startswith(">") and "Out of bounds" not in ln and "Avg bus" not in ln
    ]
    finished = nccl.parse("\n".join(lines))
    assert len(finished.rows) == 28 and finished.errors == ()
    assert finished.warnings[0] == (
        "the `# Avg bus bandwidth` line is missing, though the table reaches the sweep's last "
        "size (maxBytes 10737418240): the average is unknown"
    )
    last_row = max(i for i, ln in enumerate(lines) if ln.strip()[:1].isdigit())
    cut = nccl.parse("\n".join(lines[:last_row]))
    assert len(cut.rows) == 27
    assert cut.errors == ("the output ends before `# Avg bus bandwidth`: the run did not finish",)


def test_a_2020_table_without_any_hash_and_a_topology_pasted_under_it() -> None:
    # NVIDIA/nccl-tests#37: all_gather_perf's columns had no redop then, the page kept no '#',
    # and `nvidia-smi topo -m` follows the run: named from its header line, not from GPU0's row
    run = parse_text(text_of("nccl_24"), expected="nccl-tests")
    assert isinstance(run, NcclRun)
    assert run.collective == "all_gather" and run.command is not None
    (row,) = run.rows
    assert (row.bytes, row.count, row.type, row.redop, row.root) == (
        4294967296, 134217728, "float", None, None
    )  # fmt: skip
    assert row.out_of_place == NcclMeasurement(29122.0, 129.05, 129.05, None, 1.0)
    assert row.in_place == NcclMeasurement(29169.0, 128.84, 128.84, None, 1.0)
    assert run.avg_busbw_gbps == 128.942
    assert run.errors == ("out of bounds values: 2 FAILED",)
    assert run.warnings[-1] == (
        "line 10 starts `nvidia-smi topo -m` output, which was not read: upload it on its own"
    )


# How a container's log gives each line: `docker logs -t` / `kubectl logs --timestamps` put the
# time (RFC 3339) before it, `kubectl logs --prefix` the pod and container, or both.
CONTAINER_LOG = {
    "timestamps": lambda n, line: f"2026-02-16T10:00:{n % 60:02d}.{n:09d}Z {line}",
    "kubectl --prefix": lambda n, line: f"[pod/nccl-launcher-7x2kq/launcher] {line}",
    "both": lambda n, line: f"[pod/nccl-launcher-7x2kq/launcher] 2026-02-16T10:00:00+00:00 {line}",
}


@pytest.mark.parametrize("log", CONTAINER_LOG)
@pytest.mark.parametrize("prefix", ["nccl_06", "nccl_16"])
def test_a_run_read_from_a_container_s_log_reads_as_the_run_itself(prefix: str, log: str) -> None:
    # nccl_16 has mpirun's --tag-output tags too, behind the container's
    lines = [CONTAINER_LOG[log](n, line) for n, line in enumerate(lines_of(prefix))]
    text = "\n".join(lines)
    assert detect_format(text) == "nccl-tests"
    assert parse_text(text) == parse_text(text_of(prefix))
