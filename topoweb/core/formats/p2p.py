"""Reader for CUDA samples `p2pBandwidthLatencyTest` output -> `P2PResult`."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from topoweb.core.formats.errors import ParseError, lines_named
from topoweb.core.model import P2P_MATRIX_NAMES, Matrix, P2PGpu, P2PResult

_DEVICE_RE = re.compile(
    r"^\s*Device:\s*([0-9]+),\s*(.*?),\s*pciBusID:\s*([0-9A-Fa-f]+),\s*"
    r"pciDeviceID:\s*([0-9A-Fa-f]+),\s*pciDomainID:\s*([0-9A-Fa-f]+)\s*$"
)
_ACCESS_RE = re.compile(r"^\s*Device=([0-9]+)\s+(CAN|CANNOT)\s+Access Peer Device=([0-9]+)\s*$")
# A note after it ("(1 = P2P enabled)") is a README author's, as is a title set as a markdown
# heading (`### Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)`) or "(μs)" for "(us)".
_CONNECTIVITY_RE = re.compile(r"^\s*P2P Connectivity Matrix(?:\s*\([^()]*\))?\s*$")
_HEADING_RE = re.compile(r"^\s*#{1,6}\s+(.*)$")
# Old samples say "P2P=Enabled Bandwidth Matrix", new ones add "(P2P Writes)" (or "(P2P Reads)"
# when run with --p2p_read); the same words name the latency matrices.
_BANDWIDTH_RE = re.compile(
    r"^\s*(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth"
    r"(?: \(P2P (Writes|Reads)\))? Matrix \(GB/s\)\s*$"
)
_LATENCY_RE = re.compile(
    r"^\s*P2P=(Enabled|Disabled) Latency(?: \(P2P (Writes|Reads)\))? Matrix \((?:us|μs|µs)\)\s*$"
)
# The column header: "D\D" in bandwidth and old latency matrices, "GPU"/"CPU" in new latency ones.
_HEADER_RE = re.compile(r"^\s*(D\\D|GPU|CPU)((?:\s+[0-9]+)+)\s*$")
_ROW_START_RE = re.compile(r"^\s*([0-9]+)(?=\s)")
# Values are printed "%6.02f": always two decimals, so a wide value that runs into its
# neighbour ("1234.5622.23") still splits unambiguously.
_VALUES_RE = re.compile(r"^(?:\s*[0-9]+\.[0-9][0-9])+\s*$")
_VALUE_RE = re.compile(r"[0-9]+\.[0-9][0-9]")
_ELISION_RE = re.compile(r"^\s*(\.\.\.|…)\s*$")
# How the sample dies: its cudaCheckError ("Cuda failure file:line: 'why'") and the samples'
# checkCudaErrors ("CUDA error at file:line code=N(name) ..."); it exits at once.
_FAILURE_RE = re.compile(r"^\s*(Cuda failure \S+:[0-9]+: .*|CUDA error at \S+:[0-9]+ code=.*?)\s*$")


@dataclass
class _Title:
    """A matrix title: its family (unidirectional, bidirectional, latency or connectivity),
    P2P state, line, and whether it names P2P reads."""

    family: str
    state: str
    line: int
    reads: bool = False


@dataclass
class _Block:
    """A matrix being read: its document key (None for the connectivity matrix); `keep` is
    False for a P2P Reads matrix whose P2P Writes one was already read."""

    key: str | None
    title: str
    under: _Title
    keep: bool = True
    rows: list[tuple[float, ...]] = field(default_factory=list)


@dataclass
class _State:
    gpus: list[P2PGpu] = field(default_factory=list)
    access_lines: dict[tuple[int, int], bool] = field(default_factory=dict)
    access_line_no: dict[tuple[int, int], int] = field(default_factory=dict)
    connectivity: Matrix | None = None
    matrices: dict[str, Matrix] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    n: int | None = None  # device count: from the device list, else the first matrix header
    title: _Title | None = None  # the last matrix title
    title_unused: bool = False  # a title whose matrix has not started yet
    block: _Block | None = None
    reads: dict[str, int] = field(default_factory=dict)  # key -> title line of a kept Reads one
    failure: tuple[int, str] | None = None  # the line the run died on, and its message
    cut_title: int | None = None  # a line holding a matrix title's words, not a whole title


def parse(text: str) -> P2PResult:
    """Read one p2pBandwidthLatencyTest run; ParseError names the line of anything malformed."""
    st = _State()
    lines = text.split("\n")  # line numbers as editors count them
    if all(line.lstrip().startswith("#") for line in lines if line.strip()):
        # Kept as a script's comment: the program itself prints no line starting with "#".
        lines = [re.sub(r"^(\s*)# ?", r"\1", line) for line in lines]
        st.warnings.append("every line is commented out with `#`: read as if it were not")
    lines = _without_line_numbers(lines, st.warnings)
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if st.block is not None and _read_row(st, st.block, line, lineno):
            continue
        if not line.strip() or _ELISION_RE.match(line):
            continue
        if (heading := _HEADING_RE.match(line)) and _is_title(heading.group(1)):
            line = heading.group(1)
        if _starts_second_run(st, line):
            # The run starts at its banner when one is printed just above its device list.
            above = [n for n in range(max(1, lineno - 4), lineno) if _BANNER in lines[n - 1]]
            start = above[-1] if above else lineno
            st.warnings.append(f"line {start} starts a second run; only the first run was read")
            break
        if m := _FAILURE_RE.match(line):
            st.failure = (lineno, m.group(1))
            break
        _read_line(st, line, lineno)
    if st.block is not None:
        _close(st, st.block, len(lines))  # the output ends inside the matrix
    if st.title is not None and st.title_unused and st.failure is None:
        raise ParseError("the output ends before the matrix under this title", st.title.line)
    return _finish(st)


_BANNER = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"
_NUMBERED = re.compile(r"\s*(\d+)(?: |$)")


def _without_line_numbers(lines: list[str], warnings: list[str]) -> list[str]:
    """The lines without an editor's line-number column (vim's `:set number`, copied with the
    text): a run of lines numbered one by one, a matrix title among them. A matrix row starts
    with a number too, but never every line of a run that holds a title."""
    # Each line's number less its index: constant along a numbered run.
    offsets = [
        int(m.group(1)) - index if (m := _NUMBERED.match(line)) else None
        for index, line in enumerate(lines)
    ]
    out = list(lines)
    start = 0
    for offset, run in itertools.groupby(offsets):
        end = start + len(list(run))
        cut = [_NUMBERED.sub("", line, count=1) for line in lines[start:end]]
        if offset is not None and end - start >= 3 and any(_is_title(c.strip()) for c in cut):
            out[start:end] = cut
            warnings.append(
                f"{lines_named(start + 1, end)}: each line starts with its number in an "
                "editor's line-number column: read without it"
            )
        start = end
    return out


def _is_title(line: str) -> bool:
    return any(r.match(line) for r in (_CONNECTIVITY_RE, _BANDWIDTH_RE, _LATENCY_RE))


def _starts_second_run(st: _State, line: str) -> bool:
    """A device list starting again after matrices were read: the next run of a log."""
    if st.connectivity is None and not st.matrices:
        return False
    m = _DEVICE_RE.match(line)
    return m is not None and m.group(1) == "0"


def _read_line(st: _State, line: str, lineno: int) -> None:
    if m := _DEVICE_RE.match(line):
        index = int(m.group(1))
        if st.connectivity is not None or st.matrices or index != len(st.gpus):
            raise ParseError(f"device {index} is out of order in the device list", lineno)
        bus, device, domain = m.group(3), m.group(4), m.group(5)
        st.gpus.append(P2PGpu(index, m.group(2).strip(), bus, domain, device))
        st.n = len(st.gpus)
        return
    if m := _ACCESS_RE.match(line):
        pair = (int(m.group(1)), int(m.group(3)))
        st.access_lines[pair] = m.group(2) == "CAN"
        st.access_line_no[pair] = lineno
        return
    if _CONNECTIVITY_RE.match(line):
        st.title = _Title("connectivity", "", lineno)
        st.title_unused = True
        return
    if m := _BANDWIDTH_RE.match(line):
        st.title = _Title(m.group(1).lower(), m.group(2).lower(), lineno, m.group(3) == "Reads")
        st.title_unused = True
        return
    if m := _LATENCY_RE.match(line):
        st.title = _Title("latency", m.group(1).lower(), lineno, m.group(2) == "Reads")
        st.title_unused = True
        return
    if m := _HEADER_RE.match(line):
        st.block = _open(st, m.group(1), m.group(2).split(), lineno)
        return
    if _ROW_START_RE.match(line) and st.title_unused:
        raise ParseError("a matrix row with no column header (D\\D, GPU or CPU) above it", lineno)
    # Anything else is prompt, notes or commentary around the output, or a title run into it.
    if "P2P=" in line and " Matrix (" in line:
        st.cut_title = lineno


def _open(st: _State, label: str, columns: list[str], lineno: int) -> _Block:
    if st.title is None and st.cut_title == lineno - 1:
        raise ParseError(
            f"a matrix header ({label}) under a matrix title that is cut or run into other text "
            f"(line {lineno - 1}): which matrix it heads is unknown",
            lineno,
        )
    if st.title is None:
        raise ParseError(f"a matrix header ({label}) with no matrix title above it", lineno)
    family, state = st.title.family, st.title.state
    if family == "connectivity" and label != "D\\D":
        raise ParseError(f"the connectivity matrix cannot have a {label} header", lineno)
    if family == "latency":
        key = f"latency_{'cpu' if label == 'CPU' else 'gpu'}_p2p_{state}_us"
    elif family == "connectivity":
        key = None
    else:
        if label != "D\\D":
            raise ParseError(f"a bandwidth matrix cannot have a {label} header", lineno)
        key = f"{family}_p2p_{state}_gbps"
    name = key or "P2P connectivity"
    if st.n is None:
        st.n = len(columns)  # an elided paste can lack the device list
    if columns != [str(i) for i in range(st.n)]:
        raise ParseError(
            f"the {name} matrix header names columns {' '.join(columns)}, "
            f"expected 0..{st.n - 1} for {st.n} devices",
            lineno,
        )
    if key is None and st.connectivity is not None:
        raise ParseError(f"a second {name} matrix", lineno)
    keep = key is None or _is_kept(st, key, st.title, lineno)
    st.title_unused = False
    return _Block(key, name, st.title, keep)


def _is_kept(st: _State, key: str, title: _Title, lineno: int) -> bool:
    """Whether a matrix is kept under its key. A --p2p_read run prints a P2P Reads matrix after
    each P2P Writes one: the Writes one stays, as every run prints it, so that the figures
    health and calibration take mean the same in every run; a Reads one is kept only where the
    paste has no Writes one, and gives way to a Writes one read after it."""
    if key not in st.matrices:
        return True
    if title.reads and key not in st.reads:
        _drop_reads(st, title)
        return False
    if not title.reads and key in st.reads:
        return True
    raise ParseError(f"a second {key} matrix", lineno)


def _drop_reads(st: _State, title: _Title) -> None:
    """One warning per Reads title (a latency title covers a GPU and a CPU matrix)."""
    _warn_once(
        st,
        f"line {title.line}: the P2P Reads figures under this title were not kept: the P2P "
        "Writes ones printed before them were (a --p2p_read run prints both)",
    )


def _warn_once(st: _State, warning: str) -> None:
    if warning not in st.warnings:
        st.warnings.append(warning)


def _read_row(st: _State, block: _Block, line: str, lineno: int) -> bool:
    """Take `line` as the block's next row; False (and the block closed) when it is not one."""
    n = st.n or 0
    m = _ROW_START_RE.match(line)
    if m is None:
        _close(st, block, lineno)
        return False
    if len(block.rows) == n:
        raise ParseError(f"the {block.title} matrix has more rows than the {n} devices", lineno)
    index = int(m.group(1))
    if index != len(block.rows):
        raise ParseError(
            f"row {index} of the {block.title} matrix where row {len(block.rows)} belongs", lineno
        )
    rest = line[m.end() :]
    values: tuple[float, ...]
    if block.key is None:
        cells = rest.split()
        if any(c not in ("0", "1") for c in cells):
            raise ParseError("the P2P connectivity matrix holds values other than 0 and 1", lineno)
        values = tuple(float(c) for c in cells)
    else:
        if not _VALUES_RE.match(rest):
            raise ParseError(f"row {index} of the {block.title} matrix is not all numbers", lineno)
        values = tuple(float(v) for v in _VALUE_RE.findall(rest))
    if len(values) != n:
        raise ParseError(
            f"row {index} of the {block.title} matrix has {len(values)} values for {n} devices",
            lineno,
        )
    block.rows.append(values)
    return True


def _close(st: _State, block: _Block, lineno: int) -> None:
    n = st.n or 0
    if len(block.rows) != n:
        raise ParseError(
            f"the {block.title} matrix ends after {len(block.rows)} of its {n} rows", lineno
        )
    matrix = tuple(block.rows)
    if block.key is None:
        st.connectivity = matrix
        st.title = None
    else:
        if block.keep:
            _store(st, block.key, block.under, matrix)
        if not block.key.startswith("latency"):
            st.title = None  # a latency title covers its GPU and CPU sub-blocks
    st.block = None


def _store(st: _State, key: str, title: _Title, matrix: Matrix) -> None:
    if title.reads:
        st.reads[key] = title.line
    elif key in st.reads:
        _warn_once(
            st,
            f"line {st.reads.pop(key)}: the P2P Reads figures under this title were not kept: "
            f"the P2P Writes ones at line {title.line} were",
        )
    st.matrices[key] = matrix


def _finish(st: _State) -> P2PResult:
    if st.n is None and st.failure is not None:
        line, message = st.failure
        raise ParseError(
            f"the test failed before printing a device list or matrix: {message}", line
        )
    if st.n is None:
        raise ParseError("not p2pBandwidthLatencyTest output: no device list and no matrix found")
    if st.failure is not None:
        # What it printed before was measured; what it would have printed after is missing.
        line, message = st.failure
        st.warnings.append(
            f"line {line}: the test failed here ({message}); the matrices it had still to print "
            "are missing"
        )
    n = st.n
    for (a, b), lineno in st.access_line_no.items():
        if a >= n or b >= n:
            raise ParseError(f"peer access line names device {max(a, b)} of {n}", lineno)
    access = _access(st, n)
    if not st.gpus:
        # Cut from a paste, or never printed: a tool that runs the test for its own checks
        # (Omniverse's IOMMU validation) prints the matrices alone.
        st.warnings.append(
            "no device list comes before the matrices (cut from the paste, or not printed by "
            "the tool that ran the test): GPU names are unknown"
        )
    if not st.matrices:
        st.warnings.append("the output holds no bandwidth or latency matrix")
    for line in sorted(set(st.reads.values())):
        st.warnings.append(
            f"line {line}: the P2P=Enabled figures under this title were measured with P2P "
            "reads (--p2p_read): the paste holds no P2P Writes ones"
        )
    ordered = {k: st.matrices[k] for k in P2P_MATRIX_NAMES if k in st.matrices}
    return P2PResult(
        gpus=tuple(st.gpus), p2p_access=access, matrices=ordered, warnings=tuple(st.warnings)
    )


def _access(st: _State, n: int) -> tuple[tuple[bool, ...], ...] | None:
    """Peer access from the connectivity matrix, else from the `Device=i CAN Access` lines."""
    from_lines: tuple[tuple[bool, ...], ...] | None = None
    if st.access_lines:
        from_lines = tuple(
            tuple(i == j or st.access_lines.get((i, j), False) for j in range(n)) for i in range(n)
        )
    if st.connectivity is None:
        return from_lines
    matrix = tuple(tuple(v == 1.0 for v in row) for row in st.connectivity)
    if from_lines is not None and from_lines != matrix:
        st.warnings.append("the peer access lines disagree with the P2P connectivity matrix")
    return matrix
