"""Readers for the text formats topoweb ingests; `parse_text` detects which one it is given."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from topoweb.core.formats import ibnet, nccl, ncclxml, nvbandwidth, p2p, topo
from topoweb.core.formats.errors import ParseError
from topoweb.core.formats.ibnet import IbnetCapture
from topoweb.core.model import NcclRun, NvbandwidthRun, P2PResult, Parsed

__all__ = [
    "FORMATS",
    "TOPOLOGY_FORMATS",
    "ParseError",
    "detect_format",
    "device_counts",
    "parse_text",
]


FORMATS = (
    "topology",
    "nccl-tests",
    "p2p-bandwidth-latency",
    "nccl-topology-xml",
    "nvbandwidth",
    "ibnetdiscover",
)
# What each format parses into: the XML is a topology source beside `topo -m`.
TOPOLOGY_FORMATS = ("topology", "nccl-topology-xml")

# Each marker: a literal it cannot match without, and the pattern (None: the literal itself).
# Checking the literal first keeps detection to a few substring scans on text of another
# format; one alternation of all patterns costs a regex attempt at every character.
_Marker = tuple[str, "re.Pattern[str] | None"]
_P2P_MARKERS: tuple[_Marker, ...] = (
    ("P2P Connectivity Matrix", None),
    ("P2P=", re.compile(r"P2P=(Enabled|Disabled)")),
    ("p2pBandwidthLatencyTest", None),
    ("Peer-to-Peer (P2P)", None),
    ("Device=", re.compile(r"^Device=\d+ CAN(NOT)? Access Peer Device=\d+", re.M)),
    ("Device: ", re.compile(r"^Device: \d+, .*, pciBusID: ", re.M)),
)
# Lines only a program's own output prints (not a command naming it), shared by detection and
# by _OUTPUT_STARTS; anchored at a line's start after any indent, as a page that shows output
# as an indented code block (reStructuredText, markdown) leaves it. The first: nccl-tests'
# header line where a page that renders markdown took the '#'.
_NCCL_BARE_HEADER = re.compile(r"^[ \t]*nThread\s+\d+\s+nGpus\s+\d+", re.M)
_NVB_VERSION = re.compile(r"^[ \t]*nvbandwidth Version:", re.M)
_NVB_RUNNING = re.compile(r"^[ \t]*Running \w+_(memcpy|latency)_\w*(ce|sm)\.$", re.M)

_NCCL_MARKERS: tuple[_Marker, ...] = (
    (
        "#",
        re.compile(
            r"#\s*(?:nThread\s+\d|out-of-place|Avg bus bandwidth|Using devices"
            r"|size\s+count\s+type\s|Rank\s+\d+\s+(Group\s+\d+\s+)?Pid\s+\d)"
        ),
    ),
    ("_perf", re.compile(r"_perf\b")),
    ("nThread", _NCCL_BARE_HEADER),
    # A table's column header and its average where a page that renders markdown took the
    # '#', behind whatever tag a launcher put before the line.
    ("count", re.compile(r"\bsize\s+count\s+type\s+redop\b")),
    ("Avg bus bandwidth", re.compile(r"\bAvg bus bandwidth\s*:")),
    # A row as MPICH -prepend-rank forwards it, its tag glued again inside it after a flush:
    # "[0]   1048576   262144   float   sum   -1[0]   1626.5 ...".
    ("[", re.compile(r"^\[(\d+)\] +\d+ +\d+ +\w+ .*?\S\[\1\]\s", re.M)),
    ("nccl-tests version", None),
    ("failure", re.compile(r"\bTest (CUDA |NCCL )?failure\b")),
)
_NVBANDWIDTH_MARKERS: tuple[_Marker, ...] = (
    ("nvbandwidth Version:", _NVB_VERSION),
    ("SUM ", re.compile(r"^[ \t]*SUM \w+_(ce|sm) [\d.]+", re.M)),
    ("Running ", _NVB_RUNNING),
    ('"nvbandwidth"', re.compile(r'"nvbandwidth"\s*:\s*\{')),
    (
        "memcpy ",
        re.compile(r"^[ \t]*memcpy (?:(CE|SM) (CPU|GPU)\(row\)|local GPU\(column\))", re.M),
    ),
)


def _has_marker(text: str, markers: tuple[_Marker, ...]) -> bool:
    return any(
        literal in text and (pattern is None or pattern.search(text) is not None)
        for literal, pattern in markers
    )


# An ibnetdiscover node header: `switchguid=0x...` / `caguid=0x...` then `Switch 65 "S-..."`
# (its GUID may be masked: the reader refuses that naming the line); or, where a paste left the
# header lines out, a switch's line followed by its first port line.
_IBNET_MARKERS: tuple[_Marker, ...] = (
    ("guid=0x", re.compile(r'^[ \t]*(Switch|Ca|Rt)\s+\d+\s+"[SHR]-[^"\s]+"', re.M)),
    ('"S-', re.compile(r'^[ \t]*Switch\s+\d+\s+"S-[^"\s]+"[^\n]*\n[ \t]*\[\d+\]', re.M)),
)
# An XML declaration or <system>, after any comments a hand-written topology file opens with.
_XML_START = re.compile(r"^\s*(?:<!--.*?-->\s*)*<(\?xml|system|topology)\b", re.S)
# hwloc's XML starts as NCCL's may (`<?xml ...?>`): its DTD, or its root holding <object>s.
_HWLOC_XML = re.compile(r"<!DOCTYPE\s+topology\s+SYSTEM\s+\"hwloc|<topology\b[^>]*>\s*<object\b")
# The last alternative is a matrix retyped as a markdown or RST table: a `| GPU0 |` cell.
_TOPO_MARKERS = re.compile(
    r"GPU0\s*(GPU1|mlx|NIC|CPU|X\b)|\bGPU0\s+X\b|Legend:\s*$|\|\s*(\*\*)?GPU0(\*\*)?\s*\|", re.M
)


# Outputs taken for one of ours, refused with what they are: AMD's topology table (its GPU0
# columns look like a matrix), NCCL's search result (XML, but the rings found, not the wiring)
# and the InfiniBand tools' reports other than ibnetdiscover's plain one.
_LOOKALIKES = (
    (
        re.compile(r"ROCm System Management Interface|Weight between two GPUs"),
        "this is `rocm-smi --showtopo` output (AMD GPUs), not `nvidia-smi topo -m`",
    ),
    (
        re.compile(r"^\s*(?:<!--.*?-->\s*)*<graphs\b", re.S),
        "this is an NCCL graph file (NCCL_GRAPH_DUMP_FILE: the rings and trees NCCL chose), "
        "not its topology dump (NCCL_TOPO_DUMP_FILE)",
    ),
    # The fabric's other reports: each port's state, the nodes listed, and one line per port.
    (
        re.compile(r"^\s*0x[0-9a-f]+\s+\d+\s+\d+\[[^\]\n]*\]\s*==\(", re.M),
        "this is `iblinkinfo` output (each port's state), not `ibnetdiscover`: upload the "
        "plain `ibnetdiscover` report for the fabric",
    ),
    (
        re.compile(r"^(?:Switch|Ca|Router)\s*: 0x[0-9a-fA-F]+ ports \d+ ", re.M),
        "this is a list of nodes (`ibswitches`, `ibhosts`, `ibnetdiscover -l`/`-S`/`-H`), "
        "without the links between them: upload the plain `ibnetdiscover` report",
    ),
    (
        re.compile(r"^(?:CA|SW)\s+\d+\s+\d+\s+0x[0-9a-f]{16}\s+\d+x\s", re.M),
        "this is `ibnetdiscover -p` output (one line per port), not the plain `ibnetdiscover` "
        "report the fabric is read from: run it without -p",
    ),
)


# What comes before each line of an output that is not the output's: the markers a reply or a
# markdown page puts before a line it quotes ("> ", "> > "), then the prefix `kubectl logs
# --prefix` gives a container's line ("[pod/name/container] ") and the time `docker logs -t` or
# `kubectl logs --timestamps` gives it (RFC 3339). No line any of our programs prints starts
# with one, except a line of XML ending a long tag.
_LINE_WRAPPING = re.compile(
    r"^(?:[ \t]*>(?:[ \t]?>)*[ \t]?)?"
    r"(?:\[pod/[^\]\s]+\] )?"
    r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2}) )?",
    re.M,
)
_WRAPPED = re.compile(r"^(?:[ \t]*>|\[pod/|[0-9]{4}-[0-9]{2}-[0-9]{2}T)", re.M)


# The tag a launcher puts before each line of a job's output: Open MPI's `mpirun --tag-output`
# ("[1,0]<stdout>:") and Slurm's `srun --label` ("0: ", right-aligned). The nccl-tests reader
# takes them off itself (MPICH's too, whose tag recurs inside a line); for the other readers
# they are taken off here where most lines carry one, so a line of output is never cut.
_LAUNCHER_TAG = re.compile(r"^(?:\[[0-9]+,[0-9]+\]<std(?:out|err)>:|[ \t]*[0-9]+:(?: |$))", re.M)


def _unwrapped(text: str) -> str:
    """The text without what a reply, a container's log or a launcher put before its lines;
    line numbers stay as they were."""
    if _XML_START.match(text, 0, 4096):
        return text
    if _WRAPPED.search(text) is not None:
        text = _LINE_WRAPPING.sub("", text)
    tagged = len(_LAUNCHER_TAG.findall(text))
    if tagged and 2 * tagged >= sum(1 for line in text.splitlines() if line.strip()):
        text = _LAUNCHER_TAG.sub("", text)
    return text


def detect_format(text: str) -> str:
    """Which of FORMATS the text looks like; ParseError when it is none of them."""
    return _detected(_unwrapped(text))


def _detected(text: str) -> str:
    """detect_format on a text already unwrapped."""
    # Neither test copies the text (a capture with an emoji is stored 4 bytes a character).
    if not text or text.isspace():
        raise ParseError("the input is empty", line=1)
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise ParseError("the input is binary, not text", line=line)
    if _XML_START.match(text, 0, 4096):  # as on text[:4096], without the copy
        if found := _HWLOC_XML.search(text, 0, 4096):
            raise ParseError(
                "this is hwloc's XML (`lstopo --of xml`), not NCCL's topology: send NCCL's "
                "dump (NCCL_TOPO_DUMP_FILE) or `nvidia-smi topo -m`",
                line=text.count("\n", 0, found.start()) + 1,
            )
        return "nccl-topology-xml"
    if _has_marker(text, _IBNET_MARKERS):
        return "ibnetdiscover"
    if _has_marker(text, _NVBANDWIDTH_MARKERS):
        return "nvbandwidth"
    if _has_marker(text, _P2P_MARKERS):
        return "p2p-bandwidth-latency"
    if _has_marker(text, _NCCL_MARKERS):
        return "nccl-tests"
    for pattern, what in _LOOKALIKES:
        if found := pattern.search(text, 0, 4096):
            raise ParseError(what, line=text.count("\n", 0, found.start()) + 1)
    if _TOPO_MARKERS.search(text):
        return "topology"
    raise ParseError(
        "not a recognised format: expected `nvidia-smi topo -m`, an NCCL topology XML, "
        "nccl-tests, p2pBandwidthLatencyTest, nvbandwidth or ibnetdiscover output",
        line=1,  # nothing in the text is any of them: the whole text, from its first line
    )


def parse_text(text: str, expected: str | None = None) -> Parsed | IbnetCapture:
    """Parse any supported output; with `expected`, insist on that format. Output quoted in a
    reply (each line after "> "), or logged by a container with each line's time, is read as if
    it were not."""
    text = _unwrapped(text)  # once: the reader reads what detection saw
    kind = _detected(text)
    if expected == "topology" and kind in TOPOLOGY_FORMATS:
        pass  # either source gives a Topology
    elif expected is not None and kind != expected:
        raise ParseError(f"expected {expected} output but this looks like {kind} output")
    readers: dict[str, Callable[[str], Parsed | IbnetCapture]] = {
        "topology": topo.parse,
        "nccl-tests": nccl.parse,
        "p2p-bandwidth-latency": p2p.parse,
        "nccl-topology-xml": ncclxml.parse,
        "nvbandwidth": nvbandwidth.parse,
        "ibnetdiscover": ibnet.parse,
    }
    parsed = readers[kind](text)
    if isinstance(parsed, NcclRun | P2PResult | NvbandwidthRun):
        unread = _other_outputs(text, kind)
        if unread:
            parsed = dataclasses.replace(parsed, warnings=(*parsed.warnings, *unread))
    return parsed


# Where each program's output starts, for telling that a benchmark's paste holds another
# program's output too: each reader skips what is not its own.
_OUTPUT_STARTS: dict[str, tuple[str, tuple[re.Pattern[str], ...]]] = {
    "nccl-tests": (
        "nccl-tests",
        (re.compile(r"#\s*(?:nThread\s+\d+\s+nGpus|size\s+count\s+type\s)"), _NCCL_BARE_HEADER),
    ),
    "p2p-bandwidth-latency": (
        "p2pBandwidthLatencyTest",
        (
            re.compile(
                r"^\s*(?:P2P Connectivity Matrix|(?:Unidirectional|Bidirectional) P2P=(?:Enabled"
                r"|Disabled) Bandwidth|Device: \d+, .*, pciBusID: )",
                re.M,
            ),
        ),
    ),
    "nvbandwidth": ("nvbandwidth", (_NVB_VERSION, _NVB_RUNNING)),
    # The matrix starts at its header (`\tGPU0\tGPU1 ... CPU Affinity`) above GPU0's row.
    "topology": (
        "`nvidia-smi topo -m`",
        (
            re.compile(r"^[ \t]*GPU0[ \t]+X\b", re.M),
            re.compile(r"^[ \t]*GPU0[ \t][^\n]*\n[ \t]*GPU0[ \t]+X\b", re.M),
        ),
    ),
}


def _other_outputs(text: str, kind: str) -> list[str]:
    """A warning for each other program's output in a benchmark's text (a log holding two
    runs of different tools), naming the line it starts on: its reader read none of it."""
    found: list[tuple[int, str]] = []
    for other, (name, patterns) in _OUTPUT_STARTS.items():
        if other == kind:
            continue
        starts = [m.start() for p in patterns if (m := p.search(text))]
        if starts:
            found.append((text.count("\n", 0, min(starts)) + 1, name))
    return [
        f"line {line} starts {name} output, which was not read: upload it on its own"
        for line, name in sorted(found)
    ]


# A GPU's row of the matrix: its name, then cells, one of them its own `X` (the header names
# GPU0 too, but holds no X). Distinct names are counted: a capture may print a second matrix.
# A retyped table's row starts with a `|` border and may have its label in bold.
_GPU_ROW = re.compile(
    r"^[ \t]*(?:\|[ \t]*)?(?:\*\*)?(GPU\d+)(?:\*\*)?[ \t|][^\n]*?(?<![\w-])X(?![\w-])", re.M
)
_XML_GPU = re.compile(r"<gpu\b")
_XML_GPU_PCI = re.compile(r"<pci\b[^>]*\bclass=\"0x03")  # a GPU's slot, or a bare <pci> GPU
_XML_NET = re.compile(r"<net\b[^>]*")
_XML_NET_KEY = re.compile(r'\b(?:name|dev|guid)="[^"]*"')
# The columns of a topo -m header that are not devices (CPU Affinity, NUMA Affinity, GPU
# NUMA ID), counted generously so a real header is never overestimated.
_NON_DEVICE_COLUMNS = 8


def device_counts(text: str) -> tuple[int, int]:
    """(GPUs, devices) a topology text will have, counted on the raw text in one pass each,
    never more than the reader finds in a well-formed one: what limits are checked against
    before anything is parsed."""
    if _XML_START.match(text, 0, 4096):
        gpus = max(len(_XML_GPU.findall(text)), len(_XML_GPU_PCI.findall(text)))
        # A net listed under several <cpu>s is one NIC to the reader: counted once.
        nets = {tuple(sorted(_XML_NET_KEY.findall(m))) for m in _XML_NET.findall(text)}
        return gpus, gpus + len(nets)
    gpus = len(set(_GPU_ROW.findall(text)))
    header = re.search(r"^.*\bGPU0\b.*$", text, re.M)
    # A retyped table's `|` borders are not columns.
    columns = len(header.group(0).replace("|", " ").split()) - _NON_DEVICE_COLUMNS if header else 0
    return gpus, max(gpus, columns)
