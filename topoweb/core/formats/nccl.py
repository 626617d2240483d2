"""Reader for nccl-tests output (all_reduce_perf and its siblings) -> `NcclRun`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import partial

from topoweb.core.formats.errors import ParseError, lines_named
from topoweb.core.model import NcclMeasurement, NcclRank, NcclRow, NcclRun

# Header lines. Pasted into markdown the leading "# " often loses its space ("#nThread"), so
# every header pattern takes the hash and the blank as optional.
# A fork's header (NVIDIA/nccl-tests PR #364) prints `# nGpus(perProc) N` in place of
# `# nThread T nGpus N`: it disabled -t, so each process runs one thread.
_THREADS_RE = re.compile(r"^#?\s*(?:nThread\s+([0-9]+)\s+nGpus|nGpus\(perProc\))\s+([0-9]+)")
_RANK_RE = re.compile(
    r"^#?\s*Rank\s+([0-9]+)\s+(?:Group\s+([0-9]+)\s+)?Pid\s+([0-9]+)\s+on\s+(\S+)\s+"
    r"device\s+([0-9]+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
# A rank list condensed by whoever ran or pasted it: `#  Rank  0 .. Rank  7 on host  GPU name`.
_RANK_RANGE_RE = re.compile(r"^#?\s*Rank\s+([0-9]+)\s*\.\.\s*Rank\s+([0-9]+)\s+on\s+(\S+)")
_TESTS_VERSION_RE = re.compile(r"^#?\s*nccl-tests version\s+(\S+)(?:.*?nccl-library=([0-9]+))?")
# NCCL's own banner ("NCCL version 2.21.5+cuda12.4"), or a harness that prints the version
# code ("NCCL version: 22602", as some forks of nccl-tests' common.cu do).
_NCCL_VERSION_RE = re.compile(
    r"\bNCCL version(?:\s+([0-9]+\.[0-9]+\.[0-9]+\S*)|:\s*([0-9]{4,6})\b)"
)
_STARTING_RE = re.compile(r"^#?\s*Collective test starting:\s*(\S+)")
_AVG_RE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S*)")
_OOB_RE = re.compile(r"^#?\s*Out of bounds values\s*:\s*([0-9]+)\s+(\w+)")
_CONCLUDED_RE = re.compile(r"^#?\s*Collective test concluded\b")
# nccl-tests prints "<host>: Test CUDA failure file.cu:N 'why'", "... Test NCCL failure ..." and
# " .. <host> pid N: Test failure file.cu:N" on its way out.
_FAILURE_RE = re.compile(r"\bTest (?:CUDA |NCCL )?failure\b")
# The first of those can cut a row short: a rank that fails mid-collective prints its message
# after the leading columns the row had already printed, on the same line.
_CUT_BY_FAILURE_RE = re.compile(r"\s(\S+:\s+Test (?:CUDA |NCCL )?failure\b.*)$")
_BINARY_RE = re.compile(r"(?:^|[\s/=])([a-z][a-z0-9_]*?)_perf(?:_mpi)?(?=\s|$)")
# What follows the binary on a command line: nothing, its options, a continuation or a
# redirection. A sentence that names the binary ("all_reduce_perf now works") goes on in words.
_ARGUMENTS_RE = re.compile(r"\s*(?:$|-|\\|[|;&<>]|[0-9]>)")
_PROMPT_RE = re.compile(r"^\s*(?:\S*@\S*?[$#]_?\s+|[$#>]\s+|Running:\s+)")
# A command quoted in markdown carries "> " on every line it is continued on, too.
_QUOTE_RE = re.compile(r"^>\s+")
_INFO_RE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b")
# What a launcher puts before each line of a job's output, saying where it came from: Open
# MPI's `mpirun --tag-output` ("[1,0]<stdout>:"), Slurm's `srun --label` ("0: ", the task
# numbers right-aligned) and MPICH's `-prepend-rank` ("[0] "). No line of nccl-tests' own
# starts like any of them.
_LAUNCHER_TAG_RE = re.compile(r"^(?:\[[0-9]+,[0-9]+\]<std(?:out|err)>:|[ \t]*[0-9]+: |\[[0-9]+\] )")
# MPICH tags each chunk of output it forwards, and nccl-tests prints a row in several chunks
# (the leading columns, then each measurement group), so the tag a line starts with also stands
# glued to the end of a token inside it: "-1[0]    1626.5 ...      0[0]    2302.3".
_MPICH_TAG_RE = re.compile(r"^\[([0-9]+)\] ")
_GLUED_TAG_RE = re.compile(r"(?<=\S)\[([0-9]+)\](?=\s|$)")

_TYPE_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_INT_RE = re.compile(r"^-?[0-9]+$")
_FLOAT_RE = re.compile(r"^-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$")
_DIGITS_RE = re.compile(r"^[0-9]+$")

# The element types nccl-tests knows; used only to recognise a row before any column header.
_TYPES = frozenset(
    "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2 "
    "fp8_e4m3 fp8_e5m2 int char".split()
)
_LEADING = ("size", "count", "type", "redop", "root")
_MEASURE = ("time", "algbw", "busbw")


@dataclass(frozen=True)
class _Layout:
    """Which leading columns a table has and whether it checks by #wrong or by error."""

    leading: tuple[str, ...]
    check: str  # "#wrong" (count of wrong elements) or "error" (old: max deviation)

    @property
    def width(self) -> int:
        return len(self.leading) + 8


# Without a column header (a pasted table tail) the width alone tells the two known layouts.
_CURRENT = _Layout(_LEADING, "#wrong")
_OLD = _Layout(("size", "count", "type", "redop"), "error")
_BY_WIDTH = {_CURRENT.width: _CURRENT, _OLD.width: _OLD}


@dataclass
class _State:
    n_threads: int | None = None
    n_gpus: int | None = None
    tests_version: str | None = None
    nccl_version: str | None = None  # decoded from the header's nccl-library code
    nccl_banner: str | None = None  # as NCCL printed it, with the CUDA it was built for
    collective: str | None = None
    command: str | None = None
    ranks: list[NcclRank] = field(default_factory=list)
    layout: _Layout | None = None
    rows: list[NcclRow] = field(default_factory=list)
    avg: float | None = None
    avg_seen: bool = False
    # The line of the last closing line (out-of-bounds check, "Collective test concluded"):
    # nccl-tests prints them only once the sweep is done.
    closed_at: int | None = None
    header_at: int | None = None  # the line of the `# nThread` header
    sweep: str | None = None  # the header's `maxBytes N step: S(factor)`, the sweep it ran
    later_run: bool = False  # a second run's header was seen (its lines are not this run's)
    rank_lines: list[int] = field(default_factory=list)
    rank_ranges: list[tuple[int, int, str, int]] = field(default_factory=list)  # lo, hi, host, line
    table_at: int | None = None  # the line of the column header, or of the first row
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def started_table(self) -> bool:
        return bool(self.rows) or self.avg_seen


def parse(text: str) -> NcclRun:
    """Read one nccl-tests run. A run that failed comes back with `errors`; text that is not
    nccl-tests output raises ParseError."""
    # Line numbers as editors count them; each line without a launcher's tags, and read
    # without the indentation a paste into markdown gives every line.
    lines, retagged = _untagged(text.split("\n"))
    last = max((i for i, ln in enumerate(lines, 1) if ln.strip()), default=0)
    st = _State()
    if retagged:
        st.warnings.append(
            f"{lines_named(retagged[0], retagged[-1])}: the launcher's tags (MPICH "
            "-prepend-rank's `[N]`, printed again inside a line at each flush of its output) "
            "were removed"
        )
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        # Header, banner and summary lines start with '#' or a word: a line that starts with a
        # digit can only be a table row, unless it names the NCCL version.
        if not line[0].isdigit() or "NCCL version" in line:
            if _read_header_fact(st, line, lineno):
                continue
            if _starts_new_run(st, line):
                st.warnings.append(
                    f"line {lineno} starts a second run; only the first run was read"
                )
                break
            if _read_table_line(st, line, lineno):
                continue
        if _read_failure(st, line, lineno):
            continue
        if _read_row_line(st, line, lineno, truncated=lineno == last):
            continue
        if _is_row_tail(line):
            st.warnings.append(
                f"line {lineno}: a row's measurements stand alone, without its size, count and "
                "type (the rest of a row split off by interleaved log lines); it is not read"
            )
            continue
        if st.command is None and not _INFO_RE.search(line):
            _read_command(st, lines, lineno)
    return _finish(st)


def _untagged(raw_lines: list[str]) -> tuple[list[str], list[int]]:
    """The lines without their launcher's tags, and the numbers of the lines whose MPICH tag
    also stood inside them. Only the tag the line starts with is taken from inside it, so a
    value is never eaten."""
    lines: list[str] = []
    retagged: list[int] = []
    for lineno, raw in enumerate(raw_lines, 1):
        line = _LAUNCHER_TAG_RE.sub("", raw, count=1)
        if m := _MPICH_TAG_RE.match(raw):
            inner = _GLUED_TAG_RE.sub(partial(_drop_tag, m.group(1)), line)
            if inner != line:
                line = inner
                retagged.append(lineno)
        lines.append(line)
    return lines, retagged


def _drop_tag(tag: str, glued: re.Match[str]) -> str:
    return "" if glued.group(1) == tag else glued.group(0)


def _is_row_tail(line: str) -> bool:
    """Both measurement groups of a row (time, algbw, busbw, check) and nothing else."""
    tokens = line.split()
    return len(tokens) == 2 * (len(_MEASURE) + 1) and all(
        t == "N/A" or _FLOAT_RE.match(t) for t in tokens
    )


def _read_failure(st: _State, line: str, lineno: int) -> bool:
    """A failure message, on its own line or after the start of the row it interrupted."""
    if not _FAILURE_RE.search(line):
        return False
    m = _CUT_BY_FAILURE_RE.search(line)
    if m and _is_row_start(line[: m.start()].split()):
        st.failures.append(m.group(1).strip())
        st.warnings.append(
            f"line {lineno}: a failure message cuts off the table row before it; "
            "that row is not read"
        )
    else:
        st.failures.append(line)
    return True


def _read_header_fact(st: _State, line: str, lineno: int) -> bool:
    if m := _NCCL_VERSION_RE.search(line):
        version = m.group(1) or _version_from_code(int(m.group(2)))
        st.nccl_banner = st.nccl_banner or version
        return True
    if m := _TESTS_VERSION_RE.match(line):
        st.tests_version = m.group(1)
        if m.group(2):
            st.nccl_version = _version_from_code(int(m.group(2)))
        return True
    if m := _STARTING_RE.match(line):
        st.collective = st.collective or _collective_of(m.group(1))
        return True
    if m := _THREADS_RE.match(line):
        # (A run that failed and its rerun, pasted together, are two runs one after the other.)
        if st.header_at is not None and not st.avg_seen and not st.failures:
            raise _several_runs(
                f"a second `# nThread` header, while the run headed at line {st.header_at} "
                "has not finished its table",
                lineno,
            )
        if st.started_table or st.failures:
            st.later_run = True
            return False  # a second run, after the first one's table (or failure)
        st.n_threads, st.n_gpus = int(m.group(1) or 1), int(m.group(2))
        st.header_at = lineno
        st.sweep = line
        return True
    if m := _RANK_RE.match(line):
        if st.avg_seen or st.later_run:
            return False  # a second run's rank list
        rank, group, pid, host, device, bus_id, name = m.groups()
        listed = NcclRank(
            rank=int(rank),
            group=int(group) if group is not None else None,
            pid=int(pid),
            host=host,
            device=int(device),
            bus_id=bus_id.strip(),
            name=name or None,
        )
        _refuse_a_rank_listed_twice(st, listed, lineno)
        st.ranks.append(listed)
        st.rank_lines.append(lineno)
        return True
    if m := _RANK_RANGE_RE.match(line):
        st.rank_ranges.append((int(m.group(1)), int(m.group(2)), m.group(3), lineno))
        return True
    return False


def _refuse_a_rank_listed_twice(st: _State, listed: NcclRank, lineno: int) -> None:
    """One run lists each rank once; the same rank in another process or on another host is
    a second run's rank list, printed into the same output."""
    for earlier, at in zip(st.ranks, st.rank_lines, strict=True):
        if earlier.rank == listed.rank and (earlier.pid, earlier.host) != (
            listed.pid,
            listed.host,
        ):
            raise _several_runs(
                f"rank {listed.rank} is listed again (Pid {listed.pid} on {listed.host}; "
                f"line {at}: Pid {earlier.pid} on {earlier.host})",
                lineno,
            )


def _several_runs(evidence: str, lineno: int) -> ParseError:
    # A build without MPI=1 started by mpirun runs one whole test per process, each printing
    # its own header, rank list and table into the launcher's one stream.
    return ParseError(
        f"{evidence}: this output holds several independent nccl-tests runs, not one. "
        "nccl-tests was most likely launched by mpirun without being built with MPI=1, so "
        "each process ran the test alone and their outputs are interleaved. Upload one "
        "process's output, or rebuild nccl-tests with MPI=1 and run it again",
        lineno,
    )


def _version_from_code(code: int) -> str:
    # NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9 (major*1000 + ... before).
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _starts_new_run(st: _State, line: str) -> bool:
    if not st.started_table:
        return False
    if st.avg_seen and _RANK_RE.match(line):
        return True
    return bool(_THREADS_RE.match(line)) or _column_header(line) is not None


def _column_header(line: str) -> list[str] | None:
    """The column names of a `# size count type ...` line (a page that renders markdown may
    have taken its '#'), or None for any other line."""
    tokens = line.strip().lstrip("#").split()
    if len(tokens) < 3 or tokens[:2] != ["size", "count"] or "time" not in tokens:
        return None
    return tokens


def _layout_of(tokens: list[str], lineno: int) -> _Layout:
    split = tokens.index("time")
    leading, measured = tuple(tokens[:split]), tokens[split:]
    known = [c for c in _LEADING if c in leading]
    check = measured[3] if len(measured) == 8 else ""
    if (
        list(leading) != known
        or leading[:3] != ("size", "count", "type")
        or check not in ("#wrong", "error")
        or measured != [*_MEASURE, check, *_MEASURE, check]
    ):
        raise ParseError(f"unrecognised nccl-tests column header: {' '.join(tokens)}", lineno)
    return _Layout(leading, check)


def _read_table_line(st: _State, line: str, lineno: int) -> bool:
    """A column header, summary or banner line (the lines of a table that are not rows)."""
    if (tokens := _column_header(line)) is not None:
        st.layout = _layout_of(tokens, lineno)
        st.table_at = st.table_at or lineno
        return True
    if m := _AVG_RE.match(line):
        st.avg = _number(m.group(1), "average bus bandwidth", lineno)
        st.avg_seen = True
        return True
    if m := _OOB_RE.match(line):
        if m.group(2) != "OK":
            st.errors.append(f"out of bounds values: {m.group(1)} {m.group(2)}")
        st.closed_at = lineno
        return True
    if _CONCLUDED_RE.match(line):
        st.closed_at = lineno
        return True
    return line.lstrip().startswith("#")  # the out-of-place/in-place banner, units, bare '#'


def _read_row_line(st: _State, line: str, lineno: int, truncated: bool) -> bool:
    """A table row: read, or False when the line does not have a row's shape."""
    tokens = line.split()
    layout = st.layout
    if layout is None:
        # A table pasted without its header: recognise rows by shape only.
        candidate = _BY_WIDTH.get(len(tokens))
        if candidate is None or not _is_row_start(tokens) or tokens[2] not in _TYPES:
            return False
        layout = st.layout = candidate
    elif not (
        _DIGITS_RE.match(tokens[0]) and (len(tokens) == layout.width or _is_row_start(tokens))
    ) and not (len(tokens) == layout.width and _INT_RE.match(tokens[0])):
        # A row of the table's width whose size is negative is read, to be refused.
        return False
    tokens = _with_blank_redop(tokens, layout)
    try:
        if len(tokens) != layout.width:
            raise ParseError(
                f"table row has {len(tokens)} columns, the header names {layout.width}", lineno
            )
        st.rows.append(_row(tokens, layout, lineno))
        st.table_at = st.table_at or lineno
    except ParseError:
        # A malformed last line is most likely a paste or log cut off mid-row.
        if not truncated:
            raise
        st.errors.append(f"the output ends inside a table row (line {lineno})")
    return True


def _with_blank_redop(tokens: list[str], layout: _Layout) -> list[str]:
    """The old format, and nccl-tests v2.13.0 with its #wrong columns (TimeTest(..., "", ...)
    until d313d20), print the redop of a collective that reduces nothing (alltoall,
    all_gather, broadcast, gather, scatter) as blanks, so its rows are a column short: where
    the redop belongs stands the root, or the time where there is no root column. An empty
    redop stands in for it; any other short row stays short."""
    if "redop" not in layout.leading or len(tokens) != layout.width - 1:
        return tokens
    at = layout.leading.index("redop")
    after = layout.leading[at + 1] if at + 1 < len(layout.leading) else "time"
    if not (_INT_RE if after == "root" else _FLOAT_RE).match(tokens[at]):
        return tokens
    return [*tokens[:at], "", *tokens[at:]]


def _is_row_start(tokens: list[str]) -> bool:
    return len(tokens) >= 2 and bool(_DIGITS_RE.match(tokens[0]) and _DIGITS_RE.match(tokens[1]))


def _row(tokens: list[str], layout: _Layout, lineno: int) -> NcclRow:
    lead = dict(zip(layout.leading, tokens, strict=False))  # the rest are measured
    n = len(layout.leading)
    type_ = lead["type"]
    if not _TYPE_NAME_RE.match(type_):
        raise ParseError(f"element type {type_!r} is not a type name", lineno)
    root = lead.get("root")
    return NcclRow(
        bytes=_integer(lead["size"], "size", lineno),
        count=_integer(lead["count"], "count", lineno),
        type=type_,
        redop=lead.get("redop") or None,
        root=_integer(root, "root", lineno, minimum=-1) if root is not None else None,
        out_of_place=_measurement(tokens[n : n + 4], layout, "out-of-place", lineno),
        in_place=_measurement(tokens[n + 4 : n + 8], layout, "in-place", lineno),
    )


def _measurement(cells: list[str], layout: _Layout, which: str, lineno: int) -> NcclMeasurement:
    time = _measured(cells[0], f"{which} time", lineno)
    algbw = _measured(cells[1], f"{which} algbw", lineno)
    busbw = _measured(cells[2], f"{which} busbw", lineno)
    check = cells[3]
    if layout.check == "#wrong":
        wrong = None if check == "N/A" else _integer(check, f"{which} #wrong", lineno)
        return NcclMeasurement(time, algbw, busbw, wrong)
    return NcclMeasurement(time, algbw, busbw, None, _optional(check, f"{which} error", lineno))


def _optional(token: str, what: str, lineno: int) -> float | None:
    return None if token == "N/A" else _number(token, what, lineno)


def _measured(token: str, what: str, lineno: int) -> float | None:
    """A time or bandwidth: never below zero."""
    value = _optional(token, what, lineno)
    if value is not None and value < 0:
        raise ParseError(f"{what} {token!r} is negative", lineno)
    return value


def _number(token: str, what: str, lineno: int) -> float:
    # float() alone would also take "nan", "inf" and "1_0", none of which nccl-tests prints.
    if not _FLOAT_RE.match(token):
        raise ParseError(f"{what} {token!r} is not a number", lineno)
    value = float(token)
    if not math.isfinite(value):
        raise ParseError(f"{what} {token!r} is out of range", lineno)
    return value


def _integer(token: str, what: str, lineno: int, minimum: int = 0) -> int:
    """A size, count or #wrong (a count of something), or a root (-1: none), stored as a
    64-bit integer."""
    if not _INT_RE.match(token):
        raise ParseError(f"{what} {token!r} is not an integer", lineno)
    if int(token[:19]) < minimum:
        raise ParseError(f"{what} {token!r} is negative", lineno)
    if len(token) > 18:
        raise ParseError(f"{what} {token!r} is out of range", lineno)
    return int(token)


def _collective_of(binary: str) -> str | None:
    m = _BINARY_RE.search(binary)
    return m.group(1) if m else None


def _read_command(st: _State, lines: list[str], lineno: int) -> None:
    line = lines[lineno - 1]
    m = next((m for m in _BINARY_RE.finditer(line) if _ARGUMENTS_RE.match(line, m.end())), None)
    if not m:
        return
    # A command continued with backslashes starts on the first line of its block.
    first = lineno - 1
    while first > 0 and lines[first - 1].rstrip().endswith("\\"):
        first -= 1
    parts = [
        _QUOTE_RE.sub("", ln.strip(), count=1).removesuffix("\\").strip()
        for ln in lines[first:lineno]
    ]
    parts[0] = _PROMPT_RE.sub("", parts[0], count=1).strip()
    st.command = " ".join(p for p in parts if p)
    st.collective = st.collective or m.group(1)


def _warn_of_an_elided_rank_list(st: _State) -> None:
    """nccl-tests lists every rank; a list with numbers missing was cut down by whoever
    pasted it, so the ranks read are not all the run had."""
    numbers = {r.rank for r in st.ranks}
    if not numbers or len(numbers) > max(numbers):
        return
    where = lines_named(st.rank_lines[0], st.rank_lines[-1])
    st.warnings.append(
        f"{where}: the rank list is elided: ranks are numbered up to {max(numbers)} "
        f"but {len(numbers)} are listed"
    )


def _warn_of_a_condensed_rank_list(st: _State) -> None:
    """Rank ranges instead of nccl-tests' line per rank: how many ranks ran on which hosts is
    known, not each rank's GPU and bus id, so no rank is read from them."""
    if not st.rank_ranges or st.ranks:
        return
    where = lines_named(st.rank_ranges[0][3], st.rank_ranges[-1][3])
    count = sum(hi - lo + 1 for lo, hi, _, _ in st.rank_ranges)
    hosts = len({host for _, _, host, _ in st.rank_ranges})
    st.warnings.append(
        f"{where}: the rank list is condensed into ranges ({count} ranks on {hosts} host(s)), "
        "not a line per rank as nccl-tests prints it: each rank's GPU and bus id are unknown"
    )


def _finish(st: _State) -> NcclRun:
    seen_header = st.n_threads is not None or bool(st.ranks)
    seen_table = st.layout is not None or st.avg_seen
    if not (seen_header or seen_table or st.rows or st.failures):
        raise ParseError(
            "not nccl-tests output: no `# nThread` header, rank list, results table or "
            "`# Avg bus bandwidth` line"
        )
    _warn_of_an_elided_rank_list(st)
    _warn_of_a_condensed_rank_list(st)
    if st.n_threads is None and not st.ranks and st.table_at is not None:
        # A log tail or a table copied alone: nothing says how many ranks and GPUs ran it.
        st.warnings.append(
            "the start of the output is missing: no `# nThread` header or rank list comes "
            f"before the table (line {st.table_at}), so the ranks and GPUs the run used are unknown"
        )
    errors = [*st.failures, *st.errors]
    for row in st.rows:
        for which, m in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
            if m.wrong:
                errors.append(f"{m.wrong} wrong elements at {row.bytes} bytes ({which})")
    if not st.failures:
        if not st.rows and not st.avg_seen:
            errors.append(
                "no results: the output ends before the first table row "
                "(the run hung or died after its header)"
            )
        elif not st.avg_seen and st.closed_at is not None:
            # The sweep finished; the average was taken out of the paste, not never printed.
            st.warnings.append(
                f"the `# Avg bus bandwidth` line is missing, though line {st.closed_at} "
                "shows the run finished: the average is unknown"
            )
        elif not st.avg_seen and (end := _sweep_reached(st)) is not None:
            # A table pasted without its summary lines: its last row is the sweep's last size.
            st.warnings.append(
                f"the `# Avg bus bandwidth` line is missing, though the table reaches the "
                f"sweep's last size ({end}): the average is unknown"
            )
        elif not st.avg_seen:
            errors.append("the output ends before `# Avg bus bandwidth`: the run did not finish")
    collective = st.collective
    if collective is None:
        collective = _infer_collective(st)
    return NcclRun(
        collective=collective,
        rows=tuple(st.rows),
        avg_busbw_gbps=st.avg,
        errors=tuple(dict.fromkeys(errors)),
        nccl_version=st.nccl_banner or st.nccl_version,
        tests_version=st.tests_version,
        n_threads=st.n_threads,
        n_gpus=st.n_gpus,
        ranks=tuple(st.ranks),
        command=st.command,
        warnings=tuple(st.warnings),
    )


# The sweep as the header prints it, and as the command line asks for it (-e 1G, -f 2, -i 1M;
# nccl-tests reads K, M and G as powers of 1024).
_HEADER_SWEEP_RE = re.compile(r"\bmaxBytes\s+([0-9]+)\s+step:\s*([0-9]+)\((factor|bytes)\)")
_OPTION_RE = re.compile(
    r"(?:^|\s)(-e|--maxbytes|-f|--stepfactor|-i|--stepbytes)(?:\s+|=)?([0-9]+)([KMGkmg]?)(?=\s|$)"
)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_OPTION_NAMES = {"-e": "e", "--maxbytes": "e", "-f": "f", "--stepfactor": "f", "-i": "i",
                 "--stepbytes": "i"}  # fmt: skip


def _sweep_reached(st: _State) -> str | None:
    """Where the last row is the last size the sweep measures (the next step would pass its
    maximum), how the output names that maximum; None where it is not, or is not known. Sizes
    are rounded down to whole elements per rank, so the last is at most the maximum."""
    if not st.rows:
        return None
    if st.sweep and (h := _HEADER_SWEEP_RE.search(st.sweep)):
        maximum, step, how = int(h.group(1)), int(h.group(2)), h.group(3)
        named = f"maxBytes {maximum}"
    else:
        asked: dict[str, int] = {}
        for flag, number, unit in _OPTION_RE.findall(st.command or ""):
            asked[_OPTION_NAMES[flag]] = int(number) * _UNITS[unit.lower()]
        if "e" not in asked:
            return None
        maximum = asked["e"]
        # nccl-tests steps by bytes (1M unless -i) unless -f asks for a factor above 1
        if asked.get("f", 1) > 1:
            how, step = "factor", asked["f"]
        else:
            how, step = "bytes", asked.get("i", 1 << 20)
        named = f"-e {maximum} bytes"
    last = st.rows[-1].bytes
    following = last * step if how == "factor" else last + step
    if last > maximum or following <= maximum:
        return None
    return named


def _infer_collective(st: _State) -> str | None:
    """Guess the collective from the columns when no command line names it (a pasted tail).

    busbw/algbw is 1 for broadcast, reduce and sendrecv, 2(n-1)/n for all_reduce and (n-1)/n
    for reduce_scatter, the gathers, scatter and all-to-all, so with redop, root and the rank
    count it separates the common cases; the rest stay unknown. sendrecv and alltoall check
    only their out-of-place results (`reportErrors = in_place ? 0 : 1`): an in-place check
    printed N/A on every row that checked its out-of-place one tells them from the others."""
    ratio: float | None = None
    for r in sorted(st.rows, key=lambda r: r.bytes, reverse=True):
        alg, bus = r.out_of_place.algbw_gbps, r.out_of_place.busbw_gbps
        if alg and bus:
            ratio = bus / alg  # the largest message measures the ratio most precisely
            break
    guess: str | None = None
    if st.rows:
        row = st.rows[-1]
        rooted = row.root is not None and row.root >= 0
        reduces = row.redop not in (None, "none")
        n = _rank_count(st)
        checked = [(_checked(r.out_of_place), _checked(r.in_place)) for r in st.rows]
        point_to_point = all(out and not in_ for out, in_ in checked)
        if rooted and reduces:
            guess = "reduce"
        elif ratio is None:
            pass
        elif rooted and abs(ratio - 1) < 0.02:
            guess = "broadcast"
        elif not rooted and reduces and point_to_point:
            guess = "sendrecv" if abs(ratio - 1) < 0.02 else None
        elif not rooted and reduces:
            # reduce_scatter, the other unrooted reduction, stays below 1
            if n is not None:
                fits = abs(ratio - 2 * (n - 1) / n) < 0.02
            else:
                fits = 0.98 < ratio < 2
            if abs(ratio - 1) < 0.02 and not any(in_ for _, in_ in checked):
                fits = False  # two ranks, or a sendrecv whose checks all read N/A
            guess = "all_reduce" if fits else None
    if guess is None:
        st.warnings.append("the collective is unknown: no command line names the test binary")
    else:
        st.warnings.append(
            f"the collective ({guess}) is inferred from the table's columns: "
            "no command line names the test binary"
        )
    return guess


def _checked(m: NcclMeasurement) -> bool:
    return m.wrong is not None or m.error is not None


def _rank_count(st: _State) -> int | None:
    """How many ranks ran, where the rank list says it: every rank from 0 up listed once, one
    line each or condensed into ranges."""
    numbers = [r.rank for r in st.ranks]
    if not numbers:
        numbers = [n for lo, hi, _, _ in st.rank_ranges for n in range(lo, hi + 1)]
    if not numbers or len(set(numbers)) != len(numbers) or len(numbers) != max(numbers) + 1:
        return None
    return len(numbers)
