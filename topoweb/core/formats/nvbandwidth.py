"""nvbandwidth output (NVIDIA's successor to p2pBandwidthLatencyTest), plain text and `-j` JSON,
into an NvbandwidthRun; `to_p2p` gives health and calibration the same matrices a
p2pBandwidthLatencyTest run would (unidirectional GPU->GPU copies, GPU latency)."""

from __future__ import annotations

import dataclasses
import json
import re

from topoweb.core.formats.errors import ParseError
from topoweb.core.model import NvbandwidthRun, NvbTestcase, P2PGpu, P2PResult

# Kept as printed: v0.10 prints the CUDA runtime as "13.2 (13020)" where earlier versions print
# the number alone ("12040"); nothing compares it, and the printed text is what a reader knows.
_HEADER = {
    "nvbandwidth Version:": "version",
    "CUDA Runtime Version:": "cuda",
    "Driver Version:": "driver",
}
_RUNNING = re.compile(r"^Running (\w+)\.\s*$")
# A matrix's title: "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", "memory latency SM
# CPU(row) <-> GPU(column) (ns)" and, from v0.10, "Device to Device Latency SM ... (ns)".
_DESCRIPTION = re.compile(r"^(memcpy|(?:[\w ]+ )?latency) (CE|SM) .*\((row|column)\).*$", re.I)
_SUM = re.compile(r"^SUM (\w+) ([\d.]+)\s*$")
_DEVICE = re.compile(r"^Device (\d+): (.+?)\s*$")
# A multinode (MPI) build lists one GPU per process, the process id padded to the widest:
# "Process  3 (node-a): device 3: NVIDIA GB200 (00000019:01:00)".
_PROCESS_DEVICE = re.compile(r"^Process\s+(\d+) \((.*)\): device \d+: (.+?)\s*$")
_STATUS = re.compile(r"^(Waived|Error|Not Found|Passed):\s*(.*)$")
# Up to v0.4 a testcase that cannot run on these GPUs is named ("Waiving X."); from v0.5 the
# text prints a bare "Waived: " where it would have run (the JSON names it).
_WAIVING = re.compile(r"^Waiving (\w+)\.\s*$")
_NUMBER_OR_NA = re.compile(r"^(N/A|-?\d+(\.\d+)?)$")

# Testcases whose matrix is one GPU copying to another, best first.
_UNIDIRECTIONAL = (
    "device_to_device_memcpy_write_ce",
    "device_to_device_memcpy_read_ce",
    "device_to_device_memcpy_write_sm",
    "device_to_device_memcpy_read_sm",
)


def _copies(engine: str, host_bidirectional: bool) -> tuple[str, ...]:
    """One engine's copy testcases in the order nvbandwidth runs them."""
    host = ("host_to_device_memcpy", "device_to_host_memcpy")
    both_ways = ("host_to_device_bidirectional_memcpy", "device_to_host_bidirectional_memcpy")
    peers = (
        "device_to_device_memcpy_read", "device_to_device_memcpy_write",
        "device_to_device_bidirectional_memcpy_read",
        "device_to_device_bidirectional_memcpy_write",
        "all_to_host_memcpy", "all_to_host_bidirectional_memcpy",
        "host_to_all_memcpy", "host_to_all_bidirectional_memcpy",
        "all_to_one_write", "all_to_one_read", "one_to_all_write", "one_to_all_read",
    )  # fmt: skip
    names = (*host, *both_ways, *peers) if host_bidirectional else (*host, *peers)
    return tuple(f"{n}_{engine}" for n in names)


_LATENCY = ("host_device_latency_sm", "device_to_device_latency_sm")
_TMA = (
    "device_to_device_memcpy_read_tma", "device_to_device_memcpy_write_tma",
    "device_to_device_bidirectional_memcpy_read_tma",
    "device_to_device_bidirectional_memcpy_write_tma",
)  # fmt: skip
_LOCAL = (
    "device_local_copy", "device_local_copy_sm", "device_local_read_sm", "device_local_write_sm",
    "device_to_device_latency_tma", "device_local_copy_tma",
)  # fmt: skip
# The testcases a run without -t goes through, in order, by (major, minor) version, to name
# the bare `Waived:` lines by: from nvbandwidth's createTestcases (v0.5 to v0.8, a single-node
# build's) and a v0.10.0 build's --list; v0.9's is not known.
_ORDER: dict[tuple[int, int], tuple[str, ...]] = {
    (0, 5): (*_copies("ce", True), *_copies("sm", False), *_LATENCY),
    (0, 6): (*_copies("ce", True), *_copies("sm", False), *_LATENCY),
    (0, 7): (*_copies("ce", True), *_copies("sm", True), *_LATENCY, "device_local_copy"),
    (0, 8): (*_copies("ce", True), *_copies("sm", True), *_LATENCY, "device_local_copy"),
    (0, 10): (*_copies("ce", True), *_copies("sm", True), *_LATENCY, *_TMA, *_LOCAL),
}


def parse(text: str) -> NvbandwidthRun:
    """Text or JSON, told apart by the first `{` that opens the `"nvbandwidth"` object."""
    m = re.search(r'\{\s*"nvbandwidth"\s*:', text)
    if m is not None:
        return _parse_json(text, m.start())
    return _parse_text(text)


def _cell(token: str) -> float | None:
    return None if token == "N/A" else float(token)


def _parse_text(text: str) -> NvbandwidthRun:
    """One run, or several printed one after another (a script running one testcase per
    invocation): their testcases are read as one run's while they list the same GPUs; a run
    on other GPUs ends the reading, and a testcase run again keeps its first result."""
    lines = text.splitlines()
    header: dict[str, str] = {}
    devices: list[str] = []
    later_run: tuple[int, list[str]] | None = None  # a later run's first line, its GPUs so far
    cases: list[NvbTestcase] = []
    errors: list[str] = []
    warnings: list[str] = []
    name: str | None = None
    description = ""
    rows: list[tuple[float | None, ...]] = []
    columns: int | None = None
    status = "Passed"
    last_ran: str | None = None  # the testcase the run went through last, for bare `Waived:`
    waived: list[int] = []  # the lines of bare `Waived:` since, their names not yet known
    named: list[int] = []  # those named from the version's order of testcases
    unnamed = 0

    def add(case: NvbTestcase, number: int) -> None:
        if any(c.name == case.name for c in cases):
            warnings.append(f"line {number}: {case.name} ran again; its first result was kept")
        else:
            cases.append(_unmeasured_diagonal(case))

    def finish(number: int, total: float | None = None) -> None:
        nonlocal name, description, rows, columns, status
        if name is not None:
            add(NvbTestcase(name, status if rows or status != "Passed" else "Error",
                            description, tuple(rows), total), number)  # fmt: skip
            if not rows and status == "Passed":
                errors.append(f"{name}: no result was printed")
        name, description, rows, columns, status = None, "", [], None, "Passed"

    def place_waived(after: str | None) -> None:
        """Record the bare `Waived:` lines before testcase `after` (None: the run's end)."""
        nonlocal unnamed
        if not waived:
            return
        version = header.get("version")
        names = _waived_names(version, last_ran, after, len(waived))
        if names is None:
            names = [f"waived_{k}" for k in range(unnamed + 1, unnamed + len(waived) + 1)]
            unnamed += len(waived)
            shown = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
            warnings.append(
                f"line {waived[0]}: {len(waived)} bare `Waived:` line(s) that nvbandwidth "
                f"{version or '(version not printed)'}'s order of testcases does not place "
                f"(the text names none): read as {shown}"
            )
        else:
            named.extend(waived)
        for waived_name, number in zip(names, waived, strict=True):
            add(NvbTestcase(waived_name, "Waived"), number)
        waived.clear()

    def other_gpus() -> bool:
        """Whether the later run being read lists GPUs other than the first run's."""
        return later_run is not None and bool(devices) and later_run[1] not in ([], devices)

    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("nvbandwidth Version:") and (cases or name or devices or waived):
            finish(number)
            if other_gpus():
                break
            place_waived(None)
            later_run, last_ran = (number, []), None
        for prefix, key in _HEADER.items():
            if line.startswith(prefix) and key not in header:
                header[key] = line[len(prefix) :].strip()
        if (device := _device_of(line)) and name is None:
            if device[0] == 0 and cases and (later_run is None or later_run[1]):
                # A later run's device list with its header cut from the paste.
                if other_gpus():
                    break
                place_waived(None)
                later_run, last_ran = (number, []), None
            (devices if later_run is None else later_run[1]).append(device[1])
        elif m := _RUNNING.match(line):
            finish(number)
            if other_gpus():
                break
            place_waived(m.group(1))
            name = last_ran = m.group(1)
        elif m := _WAIVING.match(line):
            finish(number)
            if other_gpus():
                break
            place_waived(m.group(1))
            add(NvbTestcase(m.group(1), "Waived"), number)
            last_ran = m.group(1)
        elif m := _SUM.match(line):
            if name is None and rows:
                name = m.group(1)  # the "Running" line was cut from the paste
                warnings.append(f"line {number}: no `Running {name}.` line; named from SUM")
            if name == m.group(1) or m.group(1) == f"{name}_total":
                finish(number, float(m.group(2)))
            elif name is not None and m.group(1).startswith(f"{name}_") and rows:
                # One direction of a bidirectional testcase (read1 and read2, write1 and
                # write2), each summed before the Total that ends it: a testcase of its own.
                add(
                    NvbTestcase(m.group(1), status, description, tuple(rows), float(m.group(2))),
                    number,
                )
                description, rows, columns = "", [], None
        elif _DESCRIPTION.match(line):
            if name is None and rows:
                finish(number)
            description = line
            rows, columns = [], None
        elif description and columns is None and re.fullmatch(r"(\d+\s+)*\d+", line):
            columns = len(line.split())
        elif description and columns is not None:
            tokens = line.split()
            if tokens[0].isdigit() and all(_NUMBER_OR_NA.match(t) for t in tokens[1:]):
                if len(tokens) - 1 != columns:
                    raise ParseError(
                        f"matrix row has {len(tokens) - 1} values but the header names "
                        f"{columns} columns",
                        line=number,
                    )
                rows.append(tuple(_cell(t) for t in tokens[1:]))
        elif m := _STATUS.match(line):
            if name is not None:
                status = m.group(1)
                if status == "Error":
                    errors.append(f"{name}: {m.group(2)}")
                finish(number)
            elif m.group(1) == "Waived":
                waived.append(number)  # printed where the testcase would have run
        elif line.startswith("ASSERT") or "ERROR" in line or line.startswith("Error"):
            errors.append(f"{name + ': ' if name else ''}{line[:300]}")
            if name is not None:
                status = "Error"
    else:
        if name is not None and rows and status == "Passed":
            warnings.append(f"{name}: no SUM line (the output may be cut)")
        finish(len(lines))
        if not other_gpus():
            place_waived(None)
    if named:
        warnings.append(
            f"line {named[0]}: {len(named)} bare `Waived:` line(s) named from nvbandwidth "
            f"{header.get('version')}'s order of testcases (the text names none), each by the "
            "testcases that ran around it"
        )
    if later_run is not None and other_gpus():
        first, later = _listed(devices), _listed(later_run[1])
        hosts = any("): (" in d for d in devices)  # a multinode run names each GPU's host
        same = "other bus ids or hosts" if hosts else "other bus ids"
        where = f"{later}, where the first run had {first}" if later != first else same
        warnings.append(
            f"line {later_run[0]} starts a run on other GPUs ({where}); "
            "only the runs before it were read"
        )
    if not cases and not header:
        raise ParseError("no nvbandwidth testcase or header found", line=1)
    if not cases:
        errors.append("no testcase ran")
    return NvbandwidthRun(
        testcases=tuple(cases),
        version=header.get("version"),
        driver_version=header.get("driver"),
        cuda_runtime_version=header.get("cuda"),
        devices=tuple(devices),
        errors=tuple(errors),
        warnings=tuple(warnings),
    )


def _unmeasured_diagonal(case: NvbTestcase) -> NvbTestcase:
    """A GPU-to-GPU matrix's diagonal as N/A: no GPU copies to itself there, but before v0.2
    nvbandwidth printed the cell it never measured as 0.00 where later versions print N/A."""
    m = case.matrix
    gpus = re.search(r"GPU\(row\).*GPU\(column\)", case.description)
    if gpus is None or any(len(row) != len(m) for row in m):
        return case
    cells = tuple(
        tuple(None if i == j and c == 0.0 else c for j, c in enumerate(row))
        for i, row in enumerate(m)
    )
    return case if cells == m else dataclasses.replace(case, matrix=cells)


def _waived_names(
    version: str | None, before: str | None, after: str | None, count: int
) -> list[str] | None:
    """The testcases `count` bare `Waived:` lines stand for: those the version's order puts
    between the testcase run before them and the one run after (None: the run's start, its
    end), where there are as many. A run of chosen testcases (-t) seldom fits: None."""
    m = re.match(r"v?(\d+)\.(\d+)", version or "")
    order = _ORDER.get((int(m.group(1)), int(m.group(2)))) if m else None
    if order is None or any(n is not None and n not in order for n in (before, after)):
        return None
    start = 0 if before is None else order.index(before) + 1
    end = len(order) if after is None else order.index(after)
    gap = order[start:end]
    return list(gap) if len(gap) == count else None


def _device_of(line: str) -> tuple[int, str] | None:
    """(index, device) from a device list line. A multinode run's GPU is its process's, the
    host kept as nvbandwidth's JSON keeps it: its processes' GPUs share bus ids across hosts."""
    if m := _DEVICE.match(line):
        return int(m.group(1)), m.group(2)
    if m := _PROCESS_DEVICE.match(line):
        return int(m.group(1)), f"{m.group(3)}: ({m.group(2)})"
    return None


def _listed(devices: list[str]) -> str:
    """'8 x NVIDIA A100-SXM4-80GB': a device list by model, bus ids and hosts left out."""
    models = [re.sub(r"\s*\([0-9A-Fa-f:.]+\)(: \(.*\))?$", "", d) for d in devices]
    return ", ".join(f"{models.count(m)} x {m}" for m in dict.fromkeys(models))


def _parse_json(text: str, start: int) -> NvbandwidthRun:
    line = text.count("\n", 0, start) + 1
    try:
        doc, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ParseError(f"nvbandwidth JSON is not valid: {exc.msg}", line=exc.lineno) from None
    warnings = []
    if text[:start].strip() or text[end:].strip():
        warnings.append("ignored text before or after the JSON document")
    body = doc.get("nvbandwidth")
    if not isinstance(body, dict):
        raise ParseError('"nvbandwidth" is not an object', line=line)
    cases: list[NvbTestcase] = []
    errors: list[str] = []
    for i, tc in enumerate(body.get("testcases") or []):
        if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
            raise ParseError(f"testcase {i} has no name", line=line)
        matrix = []
        for row in tc.get("bandwidth_matrix") or []:
            try:
                matrix.append(tuple(_cell(str(c).strip()) for c in row))
            except ValueError:
                raise ParseError(
                    f"testcase {tc['name']}: a matrix cell is not a number: {row!r:.80}",
                    line=line,
                ) from None
        status = str(tc.get("status", ""))
        if status.lower() == "error":
            errors.append(f"{tc['name']}: {tc.get('error', 'error')}")
        total = tc.get("sum")
        cases.append(
            NvbTestcase(
                tc["name"],
                status,
                str(tc.get("bandwidth_description", "")).strip(),
                tuple(matrix),
                float(total) if isinstance(total, int | float) else None,
            )
        )
    if body.get("error"):
        errors.append(str(body["error"]))
    if body.get("warning"):
        warnings.append(str(body["warning"]))
    devices = [str(d) for d in body.get("GPU Device list") or []]
    cuda = body.get("CUDA Runtime Version")
    return NvbandwidthRun(
        testcases=tuple(cases),
        version=body.get("version"),
        driver_version=body.get("Driver Version"),
        cuda_runtime_version=str(cuda) if cuda is not None else None,
        devices=tuple(devices),
        errors=tuple(errors),
        warnings=tuple(warnings),
    )


def _source_first(tc: NvbTestcase) -> list[list[float | None]]:
    """The matrix as [source][destination]: `GPU(row) <- GPU(column)` has it the other way."""
    m = [list(r) for r in tc.matrix]
    if re.search(r"\(row\)\s*<-\s*\w+\(column\)", tc.description):
        return [list(col) for col in zip(*m, strict=True)]
    return m


def _gpu(i: int, label: str | None) -> P2PGpu:
    if label is None:
        return P2PGpu(i, "unknown", None)
    m = re.match(r"(?:\d+:\s*)?(.+?)\s*\((?:PCI:)?([0-9a-fA-F:.]+)\)", label)
    return P2PGpu(i, m.group(1), m.group(2)) if m else P2PGpu(i, label, None)


def to_p2p(run: NvbandwidthRun) -> P2PResult:
    """The p2pBandwidthLatencyTest view: the unidirectional P2P=Enabled matrix (N/A off the
    diagonal means no peer access). Bidirectional testcases are left out: nvbandwidth reports
    one direction of them where p2pBandwidthLatencyTest sums both. So is its latency testcase:
    device_to_device_latency_sm times a pointer chase (one load from a peer's memory), not the
    fixed time of a copy that p2pBandwidthLatencyTest's latency matrix times and copies are
    priced with; it stays in the stored run."""
    uni = next((t for n in _UNIDIRECTIONAL if (t := run.testcase(n))), None)
    n = len(uni.matrix) if uni else 0
    if not n:
        n = len(run.devices) or max(
            (len(t.matrix[0]) for t in run.testcases if t.matrix), default=0
        )
    gpus = tuple(_gpu(i, run.devices[i] if i < len(run.devices) else None) for i in range(n))
    matrices: dict[str, tuple[tuple[float, ...], ...]] = {}
    access = None
    warnings = [f"from nvbandwidth {run.version or ''}".strip()]
    if uni is not None and all(len(r) == n for r in uni.matrix):
        m = _source_first(uni)
        matrices["unidirectional_p2p_enabled_gbps"] = tuple(
            tuple(0.0 if c is None else c for c in r) for r in m
        )
        access = tuple(tuple(i == j or m[i][j] is not None for j in range(n)) for i in range(n))
        warnings.append(f"unidirectional matrix from {uni.name}")
    return P2PResult(gpus=gpus, p2p_access=access, matrices=matrices, warnings=tuple(warnings))
