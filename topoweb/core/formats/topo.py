"""Reader for `nvidia-smi topo -m` (and `-mp`) output: the link-class matrix -> Topology.

How a real output is read, and why:
- The matrix is found, not assumed: prompts, banners, timestamps and scheduler noise come
  before it and legends or a second command's output after it. The header is the line naming
  `GPU<n>` that is followed by a row whose label the header starts with and whose next token
  is a link class. Blank lines between the header and the rows, or between rows, are skipped
  (a markdown paste puts one after every line).
- A matrix commented out (`#` before every line, as a script's comment holds it) or quoted
  (a reply's `>`, which parse_text takes off before any reader, but not before this one
  called on its own) has no header the reader can find as it stands; only then are the lines
  read again without the marks, with a warning naming the header's line.
- Device ids come from the row labels, checked against the header with whitespace removed, so
  a glued header (`GPU0GPU1...GPU7mlx5_0`) reads like a tab-separated one and any NIC naming
  (`NIC3`, `mlx5_bond_0`, `mlx4_0`) works without a list of known names.
- Link cells are read in order from whitespace-separated tokens, not by column position: a
  label wider than a tab stop shifts a whole row by 8 columns, and tab expansion can drop the
  separator between two cells (`NODENODE`, `NODEPIX`), so a token that is a run of link
  classes is split into its cells.
- The trailing `CPU Affinity` / `NUMA Affinity` / `GPU NUMA ID` values never contain spaces.
  When a row has one value per column they are taken in order. nvidia-smi prints an empty
  value as an empty tab-separated field, so in a row whose fields are laid out as the matrix's
  full rows lay theirs (or, with none, as nvidia-smi does: one field a column and an empty one
  before GPU NUMA ID) the values are read by field: empty, not lost, and nothing to warn of.
  Where a terminal expanded the tabs, the fields are counted back from the tab stops the
  values start on. Otherwise the values a row lacks are placed by position under the header
  (with a warning), since nvidia-smi's values drift left of their wider header labels but
  never past the previous one; where the paste collapsed every run of spaces to one, a
  position says nothing and such a row's values are left out (with a warning).
- A tool that loses the separator glues CPU Affinity to NUMA Affinity (`0-45,92-1370` is
  `0-45,92-137` and node `0`). The header says a NUMA value belongs there, so a short row's
  CPU value is read every way it can split; a reading is kept only when it is the single one,
  over all such rows together, in which CPU lists are well formed, within a machine (no CPU id
  above 8191), and either equal to or disjoint from every other row's list (two NUMA nodes
  never share a CPU) and tie one list to one node. Otherwise the row's affinity is withheld,
  so no pinning hint is built from it, and a warning says why.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, replace

from topoweb.core.bulk import collector_paused
from topoweb.core.formats.errors import ParseError
from topoweb.core.formats.topo_affinity import (
    MISSING,
    Column,
    Found,
    Layout,
    by_field,
    check_name,
    check_row,
    place_values,
    repair_glued_affinity,
    tab_layout,
    value_fields,
)
from topoweb.core.formats.topo_table import SHORT_LABELS, Quoted, Table, find_table, unquote
from topoweb.core.model import (
    Device,
    Link,
    Topology,
    normalise_link_class,
)

# One link class at the start of a run of glued cells; longest spellings first so that
# `NODEPIX` splits as NODE+PIX. `X` is the diagonal.
_CELL_PIECE = re.compile(r"NODE|SYS|SOC|PHB|PXB|PIX|NV[1-9]\d?(?!\d)|X")
_HEADER_GPU = re.compile(r"GPU\d+")
_TERMINAL_STYLE = re.compile(r"\x1b?\[[0-9;]*m")
# The labels nvidia-smi prints, and the shortened ones a retyped header has (SHORT_LABELS).
_COLUMN_LABEL = re.compile(
    r"CPU\s+Affinity|NUMA\s+Affinity|GPU\s+NUMA\s+ID|\b(?:GPU\s+NUMA|NUMA|CPU)(?![\w-])"
)
_NIC_LEGEND_ENTRY = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# A device's name: GPU0, NIC3, or a legend's (mlx5_2, mlx5_bond_0).
_NAMED_DEVICE = r"(?:GPU|NIC)\d+|[A-Za-z][A-Za-z0-9]*?_(?:bond_)?\d+"
_DEVICE_NAME = re.compile(_NAMED_DEVICE + r"|\S+")
# Cells of `nvidia-smi topo -p2p <r|w|n|a|p>`: a status matrix, not link classes.
_P2P_STATUS = frozenset({"OK", "NS", "CNS", "GNS", "TNS", "U", "DR", "NR"})

# Column label -> Device field. Labels are matched with any run of whitespace inside.
_COLUMN_FIELDS = {
    "CPU Affinity": "cpu_affinity",
    "NUMA Affinity": "numa_affinity",
    "GPU NUMA ID": "gpu_numa_id",
}

# Decomposition of a token into cells, cached: real matrices repeat a handful of tokens, and
# each is decomposed once.
_pieces_read: dict[str, tuple[tuple[str, ...], str]] = {}
_single_cell: dict[str, str] = {}  # tokens that are exactly one cell -> canonical class
_cell_of = _single_cell.__getitem__
_not_cells: set[str] = set()  # tokens seen that are not a whole run of link classes
_PIECES_READ_LIMIT = 4096


@dataclass(slots=True)  # not frozen: a frozen __init__ sets each field through object.__setattr__
class _Row:
    label: str
    line: int  # 1-based
    cells: tuple[str, ...]  # canonical classes, "X" on the diagonal
    values: tuple[str | None, ...]  # one per header column, None for N/A or empty
    short: bool = False  # fewer values than columns: some placed by position


def parse(text: str) -> Topology:
    """Read the first `nvidia-smi topo -m` matrix in `text`; ParseError if there is none."""
    with collector_paused():  # a matrix's cells and links hold no cycles
        return _parse(text)


def _parse(text: str) -> Topology:
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise ParseError("the input is binary, not text", line=line)
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise ParseError("the input is empty", line=1)
    table = find_table(lines) if "|" in text else None
    if table is None:
        try:
            return _read_matrix(lines, None)
        except _NoMatrix as exc:
            # Commented out or quoted, every line starts with the marker, which no header or
            # row does: read again without the markers, or refuse as before.
            quoted = unquote(lines) if "#" in text or ">" in text else None
            if quoted is None:
                raise
            try:
                topology = _read_matrix(quoted.lines, None, quoted)
            except _NoMatrix:
                raise exc from None
            if not quoted.markers[_find_header(quoted.lines)]:
                raise  # the header was not marked: not a commented-out or quoted matrix
            return topology
    try:
        return _read_matrix(table.lines, table)
    except ParseError as exc:
        if exc.line is None or exc.line < table.line:
            raise
        raise ParseError(
            f"{exc.message} (in {table.kind} of `topo -m` output from line {table.line}: "
            "paste the command's plain output)",
            line=exc.line,
        ) from exc


def _read_matrix(lines: list[str], table: Table | None, quoted: Quoted | None = None) -> Topology:
    """The first matrix in `lines`; `table` is the retyped table they were made from, `quoted`
    the comment or quote they were taken out of."""
    header_index = _find_header(lines)
    # An underline escape around the header (`\x1b[4m`, or `[4m` where a paste lost the ESC)
    # takes no room on a terminal: left in, it moves every label a tab stop right of its
    # values, and a row with empty cells would have its values placed a column early.
    header = _TERMINAL_STYLE.sub("", lines[header_index]).expandtabs(8)
    first_gpu = _HEADER_GPU.search(header)
    assert first_gpu is not None  # _find_header only returns lines naming a GPU
    region = header[first_gpu.start() :]
    labels = list(_COLUMN_LABEL.finditer(region))
    device_region = region[: labels[0].start()] if labels else region
    names = [" ".join(m.group(0).split()) for m in labels]
    columns = tuple(
        Column(SHORT_LABELS.get(name, name), first_gpu.start() + m.start())
        for name, m in zip(names, labels, strict=True)
    )
    blob = "".join(device_region.split())

    rows, end_index, warnings = _read_rows(lines, header_index, blob, first_gpu.start(), columns)
    if table is None and (short := [n for n in names if n in SHORT_LABELS]):
        warnings.insert(0, f"line {header_index + 1}: the header's " + ", ".join(
            f"{n!r}" for n in short) + " read as " + ", ".join(SHORT_LABELS[n] for n in short)
            + " (a retyped header: nvidia-smi prints the full labels)")  # fmt: skip
    if quoted is not None:
        marker = quoted.markers[header_index].strip()
        what = "commented out" if marker.startswith("#") else "quoted"
        warnings.insert(
            0,
            f"line {header_index + 1}: the matrix is {what} ({marker!r} before its lines): "
            "read without those marks",
        )
    if table is not None and table.line == header_index + 1:
        warnings.insert(
            0,
            f"line {table.line}: the matrix is {table.kind} (a retyped `topo -m` output), "
            "read from its cells without their borders and bold markers: check it against "
            "the command's plain output",
        )
    _check_square_and_symmetric(rows)
    nic_names = _read_nic_legend(lines, end_index, warnings)
    if _pcie_paths_only(lines, header_index, end_index, rows):
        warnings.append(
            "this is `nvidia-smi topo -mp` output (PCIe paths only): NVLinks between the GPUs, "
            "if any, are not shown; upload `nvidia-smi topo -m` to see them"
        )
    return _build(rows, columns, nic_names, warnings)


_MATRIX_PCI_COMMAND = re.compile(r"\btopo\s+(?:-mp\b|--matrixpci\b)")


def _pcie_paths_only(lines: list[str], header_index: int, end_index: int, rows: list[_Row]) -> bool:
    """Whether the matrix is `nvidia-smi topo -mp`'s, which prints PCIe paths only: its command
    line just above it says so, or its legend lists the PCIe classes without `NV#` (a legend
    clipped before its last line, `NV#`, does too: an NV# cell proves it is `-m` output)."""
    if any(cell[:2] == "NV" for row in rows for cell in row.cells):
        return False
    if any(
        _MATRIX_PCI_COMMAND.search(line) for line in lines[max(0, header_index - 3) : header_index]
    ):
        return True
    for index in range(end_index, min(len(lines), end_index + 8)):
        if lines[index].strip() == "Legend:":
            legend = [line.strip() for line in lines[index + 1 : index + 14]]
            return any(line.startswith("PIX") for line in legend) and not any(
                line.startswith("NV#") for line in legend
            )
    return False


class _NoMatrix(ParseError):
    """No matrix header in the lines (a commented-out or quoted one may still be there)."""


# A matrix row (`GPU0   X   NV4 ...`): its label, then the diagonal or a link class.
_ROW = re.compile(r"\s*(GPU\d+)\s+(?:X|NV\d+|NODE|SYS|SOC|PHB|PXB|PIX)(?!\S)")


def _find_header(lines: list[str]) -> int:
    """Index of the header line: names a GPU and is followed at once by the first row."""
    lone_header: int | None = None
    p2p_status: tuple[int, str] | None = None
    for index, line in enumerate(lines):
        match = _HEADER_GPU.search(line)
        if match is None:
            continue
        following = _row_under(lines, index, match.start())
        if following:
            pieces, _ = _split_cells(following[1])
            if pieces:
                return index
            if following[1] in _P2P_STATUS and p2p_status is None:
                p2p_status = (_next_filled(lines, index + 1) + 1, following[1])
        if lone_header is None and (
            _COLUMN_LABEL.search(line) or len(_HEADER_GPU.findall(line)) >= 2
        ):
            lone_header = index
    if p2p_status is not None:
        raise ParseError(
            "this is an `nvidia-smi topo -p2p` status matrix (cells such as "
            f"{p2p_status[1]!r}), not a `nvidia-smi topo -m` link matrix",
            line=p2p_status[0],
        )
    if lone_header is not None:
        if prefixed := _prefixed_row(lines, lone_header):
            raise _NoMatrix(
                f"the rows under the header have {prefixed[1]!r} before their device names "
                "(a log's or an editor's prefix on every line): paste the command's output "
                "without it",
                line=prefixed[0] + 1,
            )
        if (first_row := _wrapped_header(lines, lone_header)) is not None:
            over = (
                f"line {first_row}"
                if first_row == lone_header + 2
                else f"lines {lone_header + 2}-{first_row}"
            )
            raise _NoMatrix(
                f"the matrix header goes on over {over}, wrapped at a "
                "terminal's, an editor's or a mail program's width: paste the command's output "
                "unwrapped, or save it (`nvidia-smi topo -m > topo.txt`) and upload the file",
                line=lone_header + 1,
            )
        raise _NoMatrix(
            "the matrix header is not followed by a row starting with its first device "
            "and a link class: the matrix is missing or truncated",
            line=lone_header + 1,
        )
    for index, line in enumerate(lines):
        row = _ROW.match(line) if "GPU" in line else None
        if row:  # rows kept, header left out (a paste filtered to the lines naming a GPU)
            raise _NoMatrix(
                f"a matrix row ({row.group(1)} ...) with no header line above it naming the "
                "devices of its columns: paste the output from its header line on",
                line=index + 1,
            )
    raise _NoMatrix(
        "no `nvidia-smi topo -m` matrix found: expected a header line naming GPU0 "
        "followed by rows of link classes (X, NV#, PIX, PXB, PHB, NODE, SYS)",
        line=1,
    )


def _prefixed_row(lines: list[str], header: int) -> tuple[int, str] | None:
    """The row under the header and what stands before its device name, where that name (the
    header's first) comes after other text and is followed by a link class: a log line's
    timestamp or container name, an editor's line number."""
    first = _HEADER_GPU.search(lines[header])
    index = _next_filled(lines, header + 1)
    tokens = lines[index].split() if first and index < len(lines) else []
    if first is None or first.group(0) not in tokens[1:-1]:
        return None
    at = tokens.index(first.group(0))
    if not _split_cells(tokens[at + 1])[0]:
        return None
    return index, lines[index][: lines[index].index(first.group(0))].strip()


def _wrapped_header(lines: list[str], header: int) -> int | None:
    """The index of the first row when the lines between it and the header go on naming
    devices and column labels: a header wrapped at a width (a row's own wrapped lines come
    after it); None otherwise."""
    first = _HEADER_GPU.search(lines[header])
    if first is None:
        return None
    index = _next_filled(lines, header + 1)
    continued = False
    while index < min(len(lines), header + 10):
        tokens = lines[index].split()
        if len(tokens) >= 2 and tokens[0] == first.group(0) and _split_cells(tokens[1])[0]:
            return index if continued else None
        if not all(_HEADER_WORD.fullmatch(token) for token in tokens):
            return None
        continued = True
        index = _next_filled(lines, index + 1)
    return None


# What a header line holds: device names and its labels' words.
_HEADER_WORD = re.compile(_NAMED_DEVICE + r"|CPU|NUMA|GPU|ID|Affinity")


# A line drawn to set the header off (`-----`, `=====`, box drawing): a retyped matrix has one.
_RULE = re.compile(r"[\s\-=+|_~\u2500-\u257f]*\Z")


def _next_filled(lines: list[str], index: int) -> int:
    """The index of the first line from `index` on that is neither blank nor a rule
    (len(lines) if none): a matrix pasted into markdown may have a blank line between its
    header and every row, and a retyped one a dashed line under its header."""
    while index < len(lines) and _RULE.match(lines[index]):
        index += 1
    return index


def _row_under(lines: list[str], index: int, first_gpu: int) -> list[str]:
    """The tokens of the row under the line at `index` (after blank lines and rules) when its
    label is the first device the line names from column `first_gpu` on; [] if not."""
    blob = "".join(lines[index][first_gpu:].split())
    first_row = _next_filled(lines, index + 1)
    following = lines[first_row].split() if first_row < len(lines) else []
    return following if len(following) >= 2 and blob.startswith(following[0]) else []


def _starts_matrix(lines: list[str], index: int) -> bool:
    """Whether lines[index] is a matrix's header: it names a GPU and the row under it starts
    with that device and a link class or a `topo -p2p` status (not a sentence that names
    GPUs)."""
    match = _HEADER_GPU.search(lines[index]) if "GPU" in lines[index] else None
    following = _row_under(lines, index, match.start()) if match else []
    return bool(following) and (bool(_split_cells(following[1])[0]) or following[1] in _P2P_STATUS)


def _split_cells(token: str) -> tuple[tuple[str, ...], str]:
    """A token as its leading link-class cells, canonical (SOC -> SYS) and with glued runs
    split, and whatever text follows them."""
    cached = _pieces_read.get(token)
    if cached is not None:
        return cached
    pieces: list[str] = []
    pos = 0
    while pos < len(token):
        match = _CELL_PIECE.match(token, pos)
        if match is None:
            break
        piece = match.group(0)
        pieces.append(piece if piece == "X" else normalise_link_class(piece) or piece)
        pos = match.end()
    result = (tuple(pieces), token[pos:])
    if len(_pieces_read) < _PIECES_READ_LIMIT:
        _pieces_read[token] = result
        if len(pieces) == 1 and pos == len(token):
            _single_cell[token] = pieces[0]
        elif not pieces or pos < len(token):
            _not_cells.add(token)
    return result


def _read_rows(
    lines: list[str],
    header_index: int,
    blob: str,
    header_start: int,
    columns: tuple[Column, ...],
) -> tuple[list[_Row], int, list[str]]:
    """Rows under the header until the header's devices are all used; the index after them."""
    labels: list[str] = []
    row_tokens: list[list[str]] = []
    row_indexes: list[int] = []
    offset = 0
    index = header_index + 1
    while offset < len(blob) and index < len(lines):
        # Blank lines are skipped only when the next row follows them: otherwise the matrix
        # ends (or is truncated) where the first of them is.
        row_index = _next_filled(lines, index)
        tokens = lines[row_index].split() if row_index < len(lines) else []
        if not tokens or not blob.startswith(tokens[0], offset):
            break
        labels.append(tokens[0])
        row_tokens.append(tokens)
        row_indexes.append(row_index)
        offset += len(tokens[0])
        index = row_index + 1
    if offset < len(blob):
        missing = " ".join(_DEVICE_NAME.findall(blob[offset:]))
        _check_relabelled(lines, index, labels, row_indexes, missing)
        seen = lines[index].strip() if index < len(lines) else ""
        what = f"found {seen[:40]!r}" if seen else "the matrix ends"
        raise ParseError(
            f"the matrix is truncated: the header on line {header_index + 1} names "
            f"{missing} but {what} where their rows should be",
            line=index + 1,
        )

    size = len(labels)
    count = len(columns)
    warnings: list[str] = []
    rows: list[_Row] = []
    glued: list[_Glued] = []
    none_values = (None,) * count
    lost_tabs = _may_have_lost_tabs([lines[i] for i in row_indexes])
    layout: Layout | None = None  # worked out for the first row with values left empty
    for number, label in enumerate(labels):
        line_index = row_indexes[number]
        if lost_tabs and (spaced := _lost_tab(lines[line_index], label)):
            glued.append((line_index + 1, label, spaced))
        # Fast path, the common rows: known single cells, then one value per column, none of
        # them link classes, or no value at all (a NIC's row). What it returns is what the
        # general path below would.
        tokens = row_tokens[number]
        rest = tokens[size + 1 :]
        if not rest or (len(rest) == count and _not_cells.issuperset(rest)):
            try:
                cells = tuple(map(_cell_of, tokens[1 : size + 1]))
            except KeyError:
                cells = ()
            if len(cells) == size:
                values = (
                    tuple([None if token in MISSING else token for token in rest])
                    if rest
                    else none_values
                )
                rows.append(_Row(label, line_index + 1, cells, values))
                continue
        line = lines[line_index]
        cells, found = _row_cells(tokens, label, labels, line_index + 1, glued, warnings)
        found = _values_found(found, columns, label, line_index + 1, warnings)
        short = len(found) < len(columns) and bool(found)
        fields = value_fields(line, tokens, found, size) if short else None
        if fields is not None:
            if layout is None:
                layout = tab_layout(lines, row_indexes, row_tokens, size, columns)
            # The tabs kept the empty values' places: they are empty, not lost.
            if (as_printed := by_field(fields, layout)) is not None:
                rows.append(_Row(label, line_index + 1, cells, as_printed))
                continue
        values = place_values(found, line, columns, header_start, label, line_index + 1, warnings)
        rows.append(_Row(label, line_index + 1, cells, values, short))
    assert len(rows) == size
    warnings.extend(_glued_warnings(glued))
    for i, values in repair_glued_affinity(rows, columns, warnings).items():
        rows[i] = replace(rows[i], values=values)
    return rows, index, warnings


# A token a paste ran cells together in: (line number, row label, the token).
_Glued = tuple[int, str, str]


def _glued_warnings(glued: list[_Glued]) -> list[str]:
    """One warning per row with cells run together, or one for them all when a paste ran the
    same columns together on many rows (tab expansion does): a line each would drown the rest."""
    lines = sorted({(line, label) for line, label, _ in glued})
    if len(lines) > 2:
        examples = ", ".join(repr(t) for t in sorted({t for _, _, t in glued})[:3])
        (first, label), last = lines[0], lines[-1][0]
        return [
            f"line {first}: {label} and {len(lines) - 1} more rows to line {last} have cells "
            f"run together in the paste (such as {examples}): read apart as link classes"
        ]
    return [
        f"line {line}: {label}: cells run together in the paste "
        f"({', '.join(repr(t) for n, _, t in glued if n == line)}): read apart as link classes"
        for line, label in lines
    ]


def _check_relabelled(
    lines: list[str], index: int, labels: list[str], row_indexes: list[int], missing: str
) -> None:
    """Refuse a row, after any blank lines at `index`, whose label an earlier row has: a
    retyped matrix whose later rows repeat the first labels (GPU0.. again for GPU4..)."""
    row_index = _next_filled(lines, index)
    tokens = lines[row_index].split() if row_index < len(lines) else []
    if tokens and tokens[0] in labels:
        first = row_indexes[labels.index(tokens[0])] + 1
        raise ParseError(
            f"device {tokens[0]} has two rows (lines {first} and {row_index + 1}) where the "
            f"header names {missing} next: the rows are mislabelled",
            line=row_index + 1,
        )


# The last link cell cut to a start only one class has (`PH` of PHB) and run into the value
# after it (`PH0-115`): the class is sure (the symmetric cell checks it), the value is not.
_CLIPPED_CELL = re.compile(r"(NOD?|SY|SO|PH|PX|PI)(\d.*)")
_CLIPPED_CLASSES = {"NO": "NODE", "NOD": "NODE", "SY": "SYS", "SO": "SYS", "PH": "PHB"}
_CLIPPED_CLASSES |= {"PX": "PXB", "PI": "PIX"}

# What a value nvidia-smi prints is made of (`0-23`, `N/A`, `mlx5_0`). A surplus token with
# anything else in it (`<-`, `#`, a word in another script) starts a note typed after the row.
_VALUE_LIKE = re.compile(r"[A-Za-z0-9_/,.-]+\Z")

# In a tab-separated row, two cells with only spaces between them: a paste lost a tab.
_CELL = r"(?:X|NV\d+|NODE|SYS|SOC|PHB|PXB|PIX)"
_SPACE_GAP = re.compile(rf"(?<!\S){_CELL} +{_CELL}(?!\S)")
_INNER_SPACE = re.compile(r"\S +\S")


def _may_have_lost_tabs(rows: list[str]) -> bool:
    """Whether any tab-separated row has a space between two cells' characters. No cell holds
    a space, and nvidia-smi pads only its own `X` with them, so a row with no other space
    lost no tab: told with string operations, before any search."""
    return any(
        "\t" in row and " " in row.replace("\t X \t", "\tX\t").strip() and _INNER_SPACE.search(row)
        for row in rows
    )


def _lost_tab(line: str, label: str) -> str | None:
    """Cells a paste ran together with spaces (` X NODE`) in a tab-separated row: they read
    apart by whitespace, but the row was damaged and is warned of like a glued run."""
    gap = _SPACE_GAP.search(line, line.find(label) + len(label)) if "\t" in line else None
    return gap.group(0) if gap else None


def _row_cells(
    tokens: list[str],
    label: str,
    labels: list[str],
    line_number: int,
    glued: list[_Glued],
    warnings: list[str],
) -> tuple[tuple[str, ...], list[Found]]:
    """The row's link cells (canonical) and the values that follow them; `tokens` is the
    row's line split on whitespace, its label first. Tokens it splits go to `glued`."""
    size = len(labels)
    # Fast path, the common case: one known cell per token (a KeyError leaves it).
    try:
        quick = tuple(map(_cell_of, tokens[1 : size + 1]))
    except KeyError:
        pass
    else:
        if len(quick) == size:
            return quick, [(n, 0, tokens[n]) for n in range(size + 1, len(tokens))]
    cells: list[str] = []
    found: list[Found] = []
    run_together: set[str] = set()  # tokens holding more than one cell, or a cell and a value
    for number in range(1, len(tokens)):
        token = tokens[number]
        if len(cells) == size:
            found.append((number, 0, token))
            continue
        pieces, rest = _split_cells(token)
        if len(pieces) > 1 or (pieces and rest):
            run_together.add(token)
        clipped = _CLIPPED_CELL.fullmatch(token) if not pieces and len(cells) == size - 1 else None
        if clipped:
            cells.append(_CLIPPED_CLASSES[clipped.group(1)])
            found.append((number, len(clipped.group(1)), "N/A"))
            warnings.append(
                f"line {line_number}: {label}: {token!r} is the last link cell cut short and run "
                f"into the value after it: read as {cells[-1]}, and that value is left out (what "
                "was lost may include its start)"
            )
            continue
        if not pieces:
            column = labels[len(cells)]
            if token in _P2P_STATUS:
                raise ParseError(
                    "this is an `nvidia-smi topo -p2p` status matrix (cells such as "
                    f"{token!r}), not a `nvidia-smi topo -m` link matrix",
                    line=line_number,
                )
            if token[0].isdigit() or token in MISSING:
                raise ParseError(
                    f"row {label} has {len(cells)} link cells but the header names "
                    f"{size} devices (no cell for {column})",
                    line=line_number,
                )
            raise ParseError(
                f"row {label}, column {column}: {token!r} is not a link class "
                "(X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)",
                line=line_number,
            )
        room = size - len(cells)
        if len(pieces) <= room:
            if rest and len(pieces) < room:
                raise ParseError(
                    f"row {label}, column {labels[len(cells) + len(pieces)]}: {token!r} "
                    "is not a run of link classes",
                    line=line_number,
                )
            cells.extend(pieces)
            if rest:
                found.append((number, len(token) - len(rest), rest))
            continue
        # A run of cells glued to what follows the last one: keep the rest as a value.
        cells.extend(pieces[:room])
        leftover = token[_glued_length(token, room) :]
        found.append((number, len(token) - len(leftover), leftover))
    if len(cells) < size:
        raise ParseError(
            f"row {label} has {len(cells)} link cells but the header names {size} devices "
            f"(no cell for {labels[len(cells)]}): the row is truncated",
            line=line_number,
        )
    glued.extend((line_number, label, token) for token in tokens[1:] if token in run_together)
    return tuple(cells), found


def _glued_length(token: str, count: int) -> int:
    """Characters taken by the first `count` cells of a glued run (spellings, not SOC->SYS)."""
    pos = 0
    for _ in range(count):
        match = _CELL_PIECE.match(token, pos)
        assert match is not None  # the caller split these same pieces
        pos = match.end()
    return pos


def _values_found(
    found: list[Found],
    columns: tuple[Column, ...],
    label: str,
    line_number: int,
    warnings: list[str],
) -> list[Found]:
    """The row's values without a note typed after them; an extra link cell is refused."""
    count = len(columns)
    if len(found) > count and not _VALUE_LIKE.match(found[count][2]):
        note = " ".join(token for _, _, token in found[count:])
        warnings.append(
            f"line {line_number}: {label}: the text after its "
            f"{f'{count} values' if count else 'cells'} ({note[:60]!r}) is a note typed after "
            "the row, not part of the matrix: ignored"
        )
        found = found[:count]
    for _, _, token in found:
        pieces, rest = _split_cells(token)
        if pieces and not rest:
            raise ParseError(
                f"row {label} has more link cells than the header names devices "
                f"(an extra {token!r})",
                line=line_number,
            )
    return found


def _check_square_and_symmetric(rows: list[_Row]) -> None:
    ids = [r.label for r in rows]
    # The whole matrix at once in C: distinct labels, X on the diagonal and nowhere else, and
    # equal to its transpose. Only a matrix that fails is walked cell by cell, to name the
    # first fault.
    matrix = [r.cells for r in rows]
    if (
        len(set(ids)) == len(ids)
        and [cells[i] for i, cells in enumerate(matrix)] == ["X"] * len(matrix)
        and sum(cells.count("X") for cells in matrix) == len(matrix)
        and matrix == list(zip(*matrix, strict=True))
    ):
        return
    seen: dict[str, int] = {}
    for row in rows:
        if row.label in seen:
            raise ParseError(
                f"device {row.label} has two rows (lines {seen[row.label]} and {row.line})",
                line=row.line,
            )
        seen[row.label] = row.line
    for i, row in enumerate(rows):
        if row.cells[i] != "X":
            raise ParseError(
                f"the diagonal cell of {row.label} is {row.cells[i]!r}, expected X",
                line=row.line,
            )
        for j in range(i):
            mine, theirs = row.cells[j], rows[j].cells[i]
            if mine == "X":
                raise ParseError(
                    f"{row.label}-{ids[j]} is X, but X marks only the diagonal", line=row.line
                )
            if mine != theirs:
                raise ParseError(
                    f"the matrix is not symmetric: {row.label}-{ids[j]} is {mine} here but "
                    f"{ids[j]}-{row.label} is {theirs} on line {rows[j].line}",
                    line=row.line,
                )


def _read_nic_legend(lines: list[str], start: int, warnings: list[str]) -> dict[str, str]:
    """`NIC<n>: mlx5_<m>` entries after the matrix, up to the next command's output (a second
    matrix, `topo -p2p r` pasted after `topo -m`, is named in `warnings`)."""
    names: dict[str, str] = {}
    # The substring tests spare a regex on lines that cannot match it (most of them).
    for number, line in enumerate(lines[start:], start + 1):
        command = "nvidia-smi" in line
        if command or _starts_matrix(lines, number - 1):
            after = range(number - 1, min(len(lines), number + 6)) if command else [number - 1]
            if any(_starts_matrix(lines, i) for i in after):  # its banner, header
                warnings.append(f"line {number}: another matrix starts; only the first is read")
            break
        match = _NIC_LEGEND_ENTRY.match(line) if "NIC" in line else None
        if match:
            check_name(match.group(2), f"the NIC legend's name for {match.group(1)}", number)
            names.setdefault(match.group(1), match.group(2))
    return names


# Links are immutable and a fleet repeats the same few matrices: one object per distinct link.
_links: dict[tuple[str, str, str], Link] = {}
_link_of = _links.__getitem__
_LINK_CACHE_LIMIT = 1 << 16
_device = functools.lru_cache(maxsize=1 << 16)(Device)


def _new_links(keys: list[tuple[str, str, str]]) -> list[Link]:
    """A matrix not (all) seen before: every link made anew, each pair once (a per-link
    look-up first cost more than making them), kept for the next report while there is room."""
    links = list(itertools.starmap(Link, keys))
    if len(_links) + len(keys) <= _LINK_CACHE_LIMIT:
        _links.update(zip(keys, links, strict=True))
    return links


def _build(
    rows: list[_Row],
    columns: tuple[Column, ...],
    nic_names: dict[str, str],
    warnings: list[str],
) -> Topology:
    # Where each field's value sits in a row's values (the last column of a repeated label).
    at = {_COLUMN_FIELDS[c.name]: i for i, c in enumerate(columns)}
    cpu_at, numa_at, gpu_numa_at = (
        at.get("cpu_affinity"),
        at.get("numa_affinity"),
        at.get("gpu_numa_id"),
    )
    gpus: list[tuple[int, Device]] = []
    nics: list[tuple[int, Device]] = []
    for position, row in enumerate(rows):
        values = row.values
        cpu = None if cpu_at is None else values[cpu_at]
        numa = None if numa_at is None else values[numa_at]
        gpu_numa = None if gpu_numa_at is None else values[gpu_numa_at]
        check_row(row.label, row.line, cpu, numa, gpu_numa)
        # `GPU<n>` (what the regex GPU(\d+)\Z matched: \d is isdecimal), for a fifth of its cost.
        if row.label[:3] == "GPU" and row.label[3:].isdecimal():
            device = _device(row.label, "gpu", int(row.label[3:]), cpu, numa, gpu_numa, None)
            gpus.append((position, device))
        else:
            # `NIC<n>` needs the legend for its RDMA name; `mlx5_0` and friends are their name.
            name = nic_names.get(row.label, None if row.label.startswith("NIC") else row.label)
            device = _device(row.label, "nic", len(nics), cpu, numa, gpu_numa, name)
            nics.append((position, device))
    ordered = gpus + nics
    ids = [d.id for _, d in ordered]
    positions = [p for p, _ in ordered]
    # Every pair once, in device order, as three columns for one C-level look-up in _links.
    ends_a: list[str] = []
    ends_b: list[str] = []
    classes: list[str] = []
    in_order = positions == list(range(len(positions)))  # GPUs before NICs in the matrix
    for n, a in enumerate(ids[:-1]):
        cells = rows[positions[n]].cells
        ends_a += [a] * (len(ids) - n - 1)
        ends_b += ids[n + 1 :]
        classes += cells[n + 1 :] if in_order else map(cells.__getitem__, positions[n + 1 :])
    keys = list(zip(ends_a, ends_b, classes, strict=True))
    try:
        links = list(map(_link_of, keys))
    except KeyError:
        links = _new_links(keys)
    # What Topology's checks would refuse, this reader has already refused with the line at
    # fault: labels are distinct and X only on the diagonal (_check_square_and_symmetric),
    # every other cell is a canonical class (_split_cells), one link per pair (built above).
    return Topology.from_checked(tuple(d for _, d in ordered), tuple(links), tuple(warnings))
