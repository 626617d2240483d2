"""nvbandwidth output (NVIDIA's successor to p2pBandwidthLatencyTest), plain text and `-j` JSON,
into an NvbandwidthRun; `to_p2p` gives health and calibration the same matrices a
p2pBandwidthLatencyTest run would (unidirectional GPU->GPU copies, GPU latency)."""

from __future__ import annotations

import dataclasses
import json
import re

from topoweb.core.formats.errors import ParseError, lines_named
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
# CPU(row) <-> GPU(column) (ns)", from v0.10 "Device to Device Latency SM ... (ns)", and
# device_local_copy's "memcpy local GPU(column) bandwidth (GB/s)" (one row: each GPU's own).
_DESCRIPTION = re.compile(
    r"^(?:(?:memcpy|(?:[\w ]+ )?latency) (?:CE|SM)|memcpy local) .*\((?:row|column)\).*$", re.I
)
# What its rows and its columns are: GPU or CPU, or a fork's own word (sailbandwidth: PPU).
_ENDS = re.compile(r"(\w+)\(row\).*?(\w+)\(column\)")
_SUM = re.compile(r"^SUM (\w+) ([\d.]+)\s*$")
_DEVICE = re.compile(r"^Device (\d+): (.+?)\s*$")
# A multinode (MPI) build lists one GPU per process, the process id padded to the widest:
# "Process  3 (node-a): device 3: NVIDIA GB200 (00000019:01:00)".
_PROCESS_DEVICE = re.compile(r"^Process\s+(\d+) \((.*)\): device \d+: (.+?)\s*$")
_STATUS = re.compile(r"^(Waived|Error|Not Found|Passed):\s*(.*)$")
# Up to v0.4 a testcase that cannot run on these GPUs is named ("Waiving X."); from v0.5 the
# text prints a bare "Waived: " where it would have run, and only the JSON (-j) names it.
_WAIVING = re.compile(r"^Waiving (\w+)\.\s*$")
_NUMBER_OR_NA = re.compile(r"^(N/A|-?\d+(\.\d+)?)$")

# Testcases whose matrix is one GPU copying to another, best first.
_UNIDIRECTIONAL = (
    "device_to_device_memcpy_write_ce",
    "device_to_device_memcpy_read_ce",
    "device_to_device_memcpy_write_sm",
    "device_to_device_memcpy_read_sm",
)


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
    unnamed_waived: list[int] = []  # the lines of bare `Waived:` (no testcase named)
    sums_alone: list[int] = []  # the lines of SUM lines printed without their testcase
    fork_named = False  # whether a matrix labelled neither GPU nor CPU was warned of
    cases: list[NvbTestcase] = []
    errors: list[str] = []
    warnings: list[str] = []
    name: str | None = None
    description = ""
    rows: list[tuple[float | None, ...]] = []
    columns: int | None = None
    status = "Passed"

    def add(case: NvbTestcase, number: int) -> None:
        if any(c.name == case.name for c in cases):
            warnings.append(f"line {number}: {case.name} ran again; its first result was kept")
            return
        cases.append(_unmeasured_diagonal(case))
        gpus = _gpu_axis(case)
        if devices and later_run is None and gpus > len(devices):
            warnings.append(
                f"line {number}: {case.name}'s matrix has {gpus} GPUs along one side but the "
                f"device list names {len(devices)}: not as nvbandwidth prints it (edited?)"
            )

    def finish(number: int, total: float | None = None) -> None:
        nonlocal name, description, rows, columns, status
        if name is not None:
            add(NvbTestcase(name, status if rows or status != "Passed" else "Error",
                            description, tuple(rows), total), number)  # fmt: skip
            if not rows and status == "Passed":
                errors.append(f"{name}: no result was printed")
        name, description, rows, columns, status = None, "", [], None, "Passed"

    def other_gpus() -> bool:
        """Whether the later run being read lists GPUs other than the first run's."""
        return later_run is not None and bool(devices) and later_run[1] not in ([], devices)

    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("nvbandwidth Version:") and (cases or name is not None or devices):
            finish(number)
            if other_gpus():
                break
            later_run = (number, [])
        for prefix, key in _HEADER.items():
            if line.startswith(prefix) and key not in header:
                header[key] = line[len(prefix) :].strip()
        if (device := _device_of(line)) and name is None:
            if device[0] == 0 and cases and (later_run is None or later_run[1]):
                # A later run's device list with its header cut from the paste.
                if other_gpus():
                    break
                later_run = (number, [])
            (devices if later_run is None else later_run[1]).append(device[1])
        elif m := _RUNNING.match(line):
            finish(number)
            if other_gpus():
                break
            name = m.group(1)
        elif m := _SUM.match(line):
            if name is None and rows:
                name = m.group(1)  # the "Running" line was cut from the paste
                warnings.append(f"line {number}: no `Running {name}.` line; named from SUM")
            elif name is None and not description:
                # A SUM line alone: output filtered down to its totals (`| grep SUM`).
                add(NvbTestcase(m.group(1), "Passed", sum=float(m.group(2))), number)
                sums_alone.append(number)
                continue
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
            labels = set(_ends(line) or ()) - {"GPU", "CPU"}
            if labels and not fork_named:
                fork_named = True
                # A fork for another vendor's accelerators (T-Head's sailbandwidth: PPU).
                warnings.append(
                    f"line {number}: the matrix is labelled {', '.join(sorted(labels))}, not "
                    "GPU and CPU: another accelerator's fork of nvbandwidth, read as GPUs"
                )
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
        elif m := _WAIVING.match(line):
            finish(number)
            add(NvbTestcase(m.group(1), "Waived"), number)
        elif m := _STATUS.match(line):
            if name is not None:
                status = m.group(1)
                if status == "Error":
                    errors.append(f"{name}: {m.group(2)}")
                finish(number)
            elif m.group(1) == "Waived":
                unnamed_waived.append(number)
        elif line.startswith("ASSERT") or "ERROR" in line or line.startswith("Error"):
            errors.append(f"{name + ': ' if name else ''}{line[:300]}")
            if name is not None:
                status = "Error"
    else:
        if name is not None and rows and status == "Passed":
            last = max((n for n, ln in enumerate(lines, 1) if ln.strip()), default=len(lines))
            warnings.append(f"line {last}: {name}: the output ends with no SUM line (cut?)")
        unnamed = description if name is None and rows else ""  # a matrix pasted alone
        finish(len(lines))
    if unnamed_waived:
        count = len(unnamed_waived)
        warnings.append(
            f"line {unnamed_waived[0]}: {count} testcase{'s' if count > 1 else ''} waived "
            "(cannot run on these GPUs); the text does not name them (nvbandwidth -j does)"
        )
    if sums_alone:
        warnings.append(
            f"{lines_named(sums_alone[0], sums_alone[-1])}: {len(sums_alone)} SUM line(s) "
            "without their testcase's output (filtered, as by `| grep SUM`): totals only, "
            "no matrices"
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
        if unnamed:
            raise ParseError(
                f"the matrix {unnamed!r} has no testcase name: paste nvbandwidth's output "
                "from its `Running <testcase>.` line to the testcase's SUM line",
                line=_line_of(lines, unnamed),
            )
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


def _line_of(lines: list[str], text: str) -> int:
    """The 1-based number of the first line that is `text` (stripped)."""
    return next(n for n, line in enumerate(lines, 1) if line.strip() == text)


def _ends(description: str) -> tuple[str, str] | None:
    """(rows, columns) as a matrix's title labels them: ("CPU", "GPU") for `CPU(row) <-
    GPU(column)`; None for a title that labels neither."""
    m = _ENDS.search(description)
    return (m.group(1), m.group(2)) if m else None


def _gpu_axis(case: NvbTestcase) -> int:
    """How many GPUs the matrix lists along its GPU side (rows or columns, as its title labels
    them); 0 when neither side is labelled GPU."""
    ends = _ends(case.description)
    if ends is None or not case.matrix:
        return 0
    rows, columns = len(case.matrix), max(len(row) for row in case.matrix)
    return max(rows if ends[0] == "GPU" else 0, columns if ends[1] == "GPU" else 0)


def _unmeasured_diagonal(case: NvbTestcase) -> NvbTestcase:
    """A GPU-to-GPU matrix's diagonal as N/A: no GPU copies to itself there, but before v0.2
    nvbandwidth printed the cell it never measured as 0.00 where later versions print N/A."""
    m = case.matrix
    ends = _ends(case.description)  # GPU, or a fork's word for its accelerators
    if ends is None or "CPU" in ends or any(len(row) != len(m) for row in m):
        return case
    cells = tuple(
        tuple(None if i == j and c == 0.0 else c for j, c in enumerate(row))
        for i, row in enumerate(m)
    )
    return case if cells == m else dataclasses.replace(case, matrix=cells)


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
