"""The CPU and NUMA affinity values of a `nvidia-smi topo -m` row: checked as a machine can
print them, and a CPU value that may have the NUMA value glued to it read every way it splits.
The topo reader decides which reading to keep (see its module's notes)."""

from __future__ import annotations

import re

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
