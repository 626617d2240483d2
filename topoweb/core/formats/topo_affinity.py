"""The values after a `nvidia-smi topo -m` row's link cells (CPU Affinity, NUMA Affinity,
GPU NUMA ID): placed under their header columns, checked as a machine can print them, and a CPU
value that may have the NUMA value glued to it read every way it splits, one reading kept only
where it is the single one that fits (see the topo reader's module notes for why)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from topoweb.core.formats.errors import ParseError
from topoweb.core.model import DEVICE_NAME, MAX_CPU_ID, MAX_NUMA_NODE

_MAX_CPU = MAX_CPU_ID
_MAX_NODE = MAX_NUMA_NODE
_NODE_LIST = re.compile(
    r"(0|[1-9]\d{0,3})(-(0|[1-9]\d{0,3}))?(,(0|[1-9]\d{0,3})(-(0|[1-9]\d{0,3}))?)*\Z"
)
_CPU_ITEM = re.compile(r"(0|[1-9]\d*)(?:-(0|[1-9]\d*))?\Z")
_NODE_ID = re.compile(r"(0|[1-9]\d*|N/A)\Z")
# Past this many joint readings the repair gives up (and withholds) rather than search.
MAX_READINGS = 4096
MISSING = frozenset({"", "N/A"})
_TOKEN = re.compile(r"\S+")
_ONE_CELL = re.compile(r"X|NV\d+|NODE|SYS|SOC|PHB|PXB|PIX")

# A value found after a row's cells: (token number in the row, characters of the token
# before the value, the value). Columns are worked out only when a value must be placed by
# position, which real rows rarely need.
Found = tuple[int, int, str]


@dataclass(frozen=True)
class Column:
    name: str  # canonical label, e.g. "CPU Affinity"
    start: int  # column of the label in the tab-expanded header


class RowValues(Protocol):
    """What the glued-affinity repair reads of a row."""

    label: str
    line: int  # 1-based
    values: tuple[str | None, ...]  # one per header column, None for N/A or empty
    short: bool  # fewer values than columns: some placed by position


Interval = tuple[int, int]


def cpu_intervals(text: str) -> tuple[Interval, ...] | None:
    """A cpulist (`0-45,92-137`) as ascending disjoint intervals, or None if it is not one."""
    out: list[Interval] = []
    for item in text.split(","):
        match = _CPU_ITEM.match(item)
        if match is None:
            return None
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low or high > _MAX_CPU or (out and low <= out[-1][1]):
            return None
        out.append((low, high))
    return tuple(out)


def _overlap(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> bool:
    return any(x0 <= y1 and y0 <= x1 for x0, x1 in a for y0, y1 in b)


# One reading of a short row's CPU value: (cpu list, NUMA node or None when left missing).
Reading = tuple[str, str | None]


def readings(token: str) -> list[Reading]:
    """The token as it stands (NUMA value missing) and every split into CPUs + node."""
    out: list[Reading] = []
    if cpu_intervals(token) is not None:
        out.append((token, None))
    for cut in range(1, len(token)):
        cpus, node = token[:cut], token[cut:]
        if _NODE_ID.match(node) and cpu_intervals(cpus) is not None:
            if node == "N/A" or int(node) <= _MAX_NODE:
                out.append((cpus, node))
    return out


def consistent(pairs: list[Reading]) -> bool:
    """Every two CPU lists equal or disjoint, and one list tied to at most one node."""
    nodes: dict[str, str] = {}
    lists = {}
    for cpus, node in pairs:
        if node not in (None, "N/A"):
            if nodes.setdefault(cpus, node) != node:
                return False
        intervals = cpu_intervals(cpus)
        assert intervals is not None  # readings hold only well-formed lists
        lists[cpus] = intervals
    items = list(lists.values())
    return not any(_overlap(a, b) for i, a in enumerate(items) for b in items[i + 1 :])


def check_name(name: str, what: str, line: int) -> None:
    if not DEVICE_NAME.match(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ParseError(
            f"{what} {shown!r} ({len(name)} characters) is not a device name: letters, "
            "digits, `_ . : -`, at most 64 characters",
            line=line,
        )


def check_row(
    label: str, line: int, cpu: str | None, numa: str | None, gpu_numa: str | None
) -> None:
    """A row's label and affinity values as a machine can print them: a later export
    (gres.conf, the NCCL XML) expands the CPU list and writes every name."""
    check_name(label, "device", line)
    if cpu is not None and cpu_intervals(cpu) is None:
        raise ParseError(
            f"row {label}, CPU Affinity: {cpu[:40]!r} is not a list of CPUs "
            f"(ascending, 0-{MAX_CPU_ID})",
            line=line,
        )
    if numa is not None and not (
        _NODE_LIST.match(numa) and all(int(n) <= MAX_NUMA_NODE for n in re.split("[,-]", numa))
    ):
        raise ParseError(
            f"row {label}, NUMA Affinity: {numa[:40]!r} is not a list of NUMA nodes "
            f"(0-{MAX_NUMA_NODE})",
            line=line,
        )
    if gpu_numa is not None and not (
        _NODE_ID.match(gpu_numa) and (gpu_numa == "N/A" or int(gpu_numa) <= MAX_NUMA_NODE)
    ):
        raise ParseError(
            f"row {label}, GPU NUMA ID: {gpu_numa[:40]!r} is not a NUMA node (0-{MAX_NUMA_NODE})",
            line=line,
        )


# Where a tab-separated row's values sit: (fields after the row's link cells, the field of
# each column in order).
Layout = tuple[int, tuple[int, ...]]


def printed_layout(columns: tuple[Column, ...]) -> Layout:
    """The fields nvidia-smi prints after a row's cells: one per column, empty when the value
    is, and an empty one between NUMA Affinity and GPU NUMA ID (`0-63<TAB>0<TAB><TAB>N/A`)."""
    fields: list[int] = []
    for i, column in enumerate(columns):
        after_numa = i > 0 and columns[i - 1].name == "NUMA Affinity"
        position = (fields[-1] + 1 if fields else 0) + int(
            after_numa and column.name == "GPU NUMA ID"
        )
        fields.append(position)
    return (fields[-1] + 1 if fields else 0), tuple(fields)


def value_fields(line: str, tokens: list[str], found: list[Found], size: int) -> list[str] | None:
    """The tab-separated fields after the row's label and cells, empty ones too; None unless
    the label and each cell have a field of their own and the values are the other fields.
    A row whose tabs a terminal expanded has its fields counted back from where its tokens
    start (each at a tab stop, ` X ` one past it)."""
    if "\t" in line:
        fields = line.split("\t")
        if [f.strip() for f in fields[: size + 1]] != tokens[: size + 1]:
            return None
        rest = [f.strip() for f in fields[size + 1 :]]
    elif (spaced := _expanded_fields(line, len(tokens), size)) is not None:
        rest = spaced
    else:
        return None
    return rest if [f for f in rest if f] == [token for _, _, token in found] else None


def _expanded_fields(line: str, count: int, size: int) -> list[str] | None:
    """The value fields of a row printed with tabs and shown with them expanded: a value one
    tab after the one before starts at the next tab stop, each tab more moves it eight
    columns on, and each of those tabs is an empty field."""
    # Counted from the label: a block indented after its tabs were expanded keeps its stops.
    line = line.expandtabs(8)
    indent = len(line) - len(line.lstrip())
    at = [(m.start() - indent, m.end() - indent, m.group(0)) for m in _TOKEN.finditer(line)]
    if len(at) != count or any(start % 8 != (token == "X") for start, _, token in at[1:]):
        return None  # not every token at its tab stop: the spaces are not expanded tabs
    fields: list[str] = []
    end = at[size][1]
    for start, stop, token in at[size + 1 :]:
        fields += [""] * (start // 8 - end // 8 - 1) + [token]
        end = stop
    return fields


def _one_cell_each(tokens: list[str], size: int) -> bool:
    """Whether the row's tokens after its label are one link cell each (none run together)."""
    return all(_ONE_CELL.fullmatch(token) for token in tokens[1 : size + 1])


def tab_layout(
    lines: list[str],
    row_indexes: list[int],
    row_tokens: list[list[str]],
    size: int,
    columns: tuple[Column, ...],
) -> Layout:
    """Where the matrix's rows that have every value put them in their tab-separated fields,
    when they all agree; else where nvidia-smi prints them."""
    seen: set[Layout] = set()
    for index, tokens in zip(row_indexes, row_tokens, strict=True):
        values = tokens[size + 1 :]
        if len(values) == len(columns) and _one_cell_each(tokens, size):
            found = [(0, 0, value) for value in values]
            fields = value_fields(lines[index], tokens, found, size)
            if fields is not None:
                seen.add((len(fields), tuple(i for i, f in enumerate(fields) if f)))
    return seen.pop() if len(seen) == 1 else printed_layout(columns)


def by_field(fields: list[str], layout: Layout) -> tuple[str | None, ...] | None:
    """A row's values read from its tab-separated fields when they fit the layout: an empty
    field is an empty value, kept in its place by the tabs around it; None when they do not
    fit (a field lost or added), and the values must be placed some other way."""
    count, at = layout
    if len(fields) != count or any(f for i, f in enumerate(fields) if i not in at):
        return None
    return tuple(None if fields[i] in MISSING else fields[i] for i in at)


def _with_columns(line: str, found: list[Found]) -> tuple[int, list[tuple[int, str]]]:
    """The column of the row's first cell and of each value, in the tab-expanded line."""
    starts = [m.start() for m in _TOKEN.finditer(line.expandtabs(8))]
    return starts[1], [(starts[n] + skip, value) for n, skip, value in found]


def place_values(
    found: list[Found],
    line: str,
    columns: tuple[Column, ...],
    header_start: int,
    label: str,
    line_number: int,
    warnings: list[str],
) -> tuple[str | None, ...]:
    """One value per header column: in order when all are there, else by position."""
    count = len(columns)
    if len(found) > count:
        names = ", ".join(c.name for c in columns) or "none"
        raise ParseError(
            f"row {label} has {len(found)} values after its link cells but the header "
            f"names {count} such columns ({names})",
            line=line_number,
        )
    if len(found) == count:
        return tuple(None if token in MISSING else token for _, _, token in found)
    values: list[str | None] = [None] * count
    if not found:
        return tuple(values)
    if "\t" not in line and "  " not in line.strip():
        # Every run of spaces collapsed to one (a web page's text): where a value stood says
        # nothing of its column, and a NUMA node taken for a CPU list would pin wrongly.
        warnings.append(
            f"line {line_number}: {label} has {len(found)} values for {count} columns and "
            "its spacing was collapsed in the paste, so which columns they belong to cannot "
            f"be told: its {', '.join(c.name for c in columns)} are left out"
        )
        return tuple(values)
    # Fewer values than columns: a value belongs under the first label that starts at or
    # after it (nvidia-smi's values sit at or left of their wider labels), keeping order and
    # leaving room for the values still to come. `shift` undoes a row pushed right by a
    # label wider than a tab stop.
    first_cell, tokens = _with_columns(line, found)
    shift = max(0, first_cell - header_start)
    previous = -1
    placed: list[str] = []  # as printed, N/A too: where it went is what the warning tells
    for k, (start, token) in enumerate(tokens):
        room = count - (len(tokens) - k)
        chosen = room
        for i in range(previous + 1, room + 1):
            if columns[i].start >= start - shift - 1:
                chosen = i
                break
        values[chosen] = None if token in MISSING else token
        placed.append(f"{columns[chosen].name}={token}")
        previous = chosen
    warnings.append(
        f"line {line_number}: {label} has {len(tokens)} values for {count} columns; "
        f"placed by position ({', '.join(placed)})"
    )
    return tuple(values)


def repair_glued_affinity(
    rows: Sequence[RowValues], columns: tuple[Column, ...], warnings: list[str]
) -> dict[int, tuple[str | None, ...]]:
    """Short rows whose CPU value may hold the NUMA value too: split where one reading fits.
    Returns the new values of the rows it changed, by their index in `rows`."""
    names = [c.name for c in columns]
    if "CPU Affinity" not in names or "NUMA Affinity" not in names:
        return {}
    cpu_at, node_at = names.index("CPU Affinity"), names.index("NUMA Affinity")
    suspects = [
        i
        for i, row in enumerate(rows)
        if row.short and row.values[cpu_at] is not None and row.values[node_at] is None
    ]
    tokens = sorted({cast(str, rows[i].values[cpu_at]) for i in suspects})
    options = {t: readings(t) for t in tokens}
    if not any(any(node is not None for _, node in options[t]) for t in tokens):
        return {}  # nothing could be glued: the values are only missing
    intact: list[Reading] = []
    for row in rows:
        cpus = row.values[cpu_at]
        if not row.short and cpus is not None and cpu_intervals(cpus) is not None:
            intact.append((cpus, row.values[node_at]))
    fitting: list[tuple[Reading, ...]] = []
    count = 1
    for t in tokens:
        count *= max(1, len(options[t]))
    if count <= MAX_READINGS:
        for choice in itertools.product(*(options[t] for t in tokens)):
            if consistent(intact + list(choice)):
                fitting.append(choice)
    # The header promises a NUMA value on every row: prefer the readings that leave fewest out.
    if fitting:
        fewest = min(sum(node is None for _, node in c) for c in fitting)
        fitting = [c for c in fitting if sum(node is None for _, node in c) == fewest]
    chosen = dict(zip(tokens, fitting[0], strict=True)) if len(fitting) == 1 else None
    out: dict[int, tuple[str | None, ...]] = {}
    for i in suspects:
        row = rows[i]
        token = cast(str, row.values[cpu_at])
        values = list(row.values)
        if chosen is not None:
            cpus, node = chosen[token]
            if node is None:
                continue  # a value missing, not glued: the position warning stands
            values[cpu_at], values[node_at] = cpus, (None if node == "N/A" else node)
            message = (
                f"line {row.line}: {row.label}: CPU Affinity and NUMA Affinity are glued "
                f"together ({token!r}); read as CPUs {cpus} on NUMA node {node}"
            )
        elif all(node is None for _, node in options[token]):
            continue  # cannot hold a node: only missing
        else:
            ways = " or ".join(
                f"CPUs {c} + node {n}" if n is not None else f"CPUs {c} with no node"
                for c, n in options[token]
            )
            values[cpu_at] = values[node_at] = None
            message = (
                f"line {row.line}: {row.label}: CPU Affinity {token!r} may have NUMA Affinity "
                f"glued to it and reads more than one way ({ways}); its CPU and NUMA "
                "affinity are left out, so no pinning hint is given for it"
            )
        prefix = f"line {row.line}: {row.label} has "
        warnings[:] = [w for w in warnings if not w.startswith(prefix)]
        warnings.append(message)
        out[i] = tuple(values)
    return out
