"""A `nvidia-smi topo -m` matrix retyped as a table (a markdown pipe table, an RST grid table),
or quoted or commented out (a reply's `>` or a comment's `#` before every line), turned back
into the plain lines the topo reader reads, line for line. (parse_text takes a reply's `>`
off before any reader; the topo reader is also called on its own, on the samples.)

Why it is read at all: such a table's cells are the command's cells, only bordered, so with
the borders and bold markers (`**NV4**`) removed each row reads as the command printed it.
Why the reader warns when it does: a person retyped the matrix (and may have renamed a
column, `NUMA` for `NUMA Affinity`), so the result is only as good as the transcription.
Border and separator lines become blank lines, which the reader skips between rows, so every
row keeps its line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A markdown separator (`|---|:--:|`) or an RST grid border (`+------+====+`).
_BORDER = re.compile(r"\s*(?:\+[-=+]*\+|\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?)\s*\Z")
# A column heading a transcriber shortened -> the label nvidia-smi prints.
SHORT_LABELS = {"NUMA": "NUMA Affinity", "CPU": "CPU Affinity", "GPU NUMA": "GPU NUMA ID"}


@dataclass(frozen=True)
class Table:
    kind: str  # "a markdown table" or "an RST grid table"
    line: int  # 1-based line of the table's header row
    lines: list[str]  # the whole text's lines, the table's as plain tab-separated cells


def _cells(line: str) -> list[str] | None:
    """A bordered row's cells without their bold markers; None for a line that is not one."""
    stripped = line.strip()
    if len(stripped) < 2 or stripped[0] != "|" or stripped[-1] != "|":
        return None
    return [cell.replace("**", "").strip() for cell in stripped[1:-1].split("|")]


def find_table(lines: list[str]) -> Table | None:
    """The first table whose header row has a `GPU0` cell, as plain lines; None if none."""
    for index, line in enumerate(lines):
        header = _cells(line) if "GPU0" in line else None
        if header is None or "GPU0" not in header:
            continue
        above = lines[index - 1].strip() if index else ""
        kind = "an RST grid table" if above.startswith("+") else "a markdown table"
        plain = list(lines)
        # The corner cell is empty; the others are device names and column labels.
        plain[index] = "\t" + "\t".join(SHORT_LABELS.get(c, c) for c in header if c)
        for row in range(index + 1, len(lines)):
            if _BORDER.match(lines[row]):
                plain[row] = ""
                continue
            cells = _cells(lines[row])
            if cells is None:
                break
            # An empty cell keeps its place: the values after it stay under their columns.
            plain[row] = "\t".join(cell or "N/A" for cell in cells)
        return Table(kind, index + 1, plain)
    return None


# The marker before a quoted line: a reply's `>`, nested as `>>>` or `> > `, or a comment's
# `#`, with the one space after it (the line's own indent, which aligns its columns, stays).
_QUOTE = re.compile(r"[ \t]*(?:(?:>[ \t]?)+|#+[ \t]?)")


@dataclass(frozen=True)
class Quoted:
    markers: list[str]  # each line's marker as it stood ("" for a line without one)
    lines: list[str]  # the whole text's lines, markers removed


def unquote(lines: list[str]) -> Quoted | None:
    """The lines without their quote or comment markers, when a marked line names a GPU; None
    if none does. Only a reader that found no matrix in the lines as they are asks for this."""
    markers = [""] * len(lines)
    plain = list(lines)
    for index, line in enumerate(lines):
        marker = _QUOTE.match(line)
        if marker is not None and marker.group(0).strip():
            markers[index] = marker.group(0)
            plain[index] = line[marker.end() :]
    named = any(m and "GPU" in line for m, line in zip(markers, plain, strict=True))
    return Quoted(markers, plain) if named else None
