"""Readers for the text formats topoweb ingests; `parse_text` detects which one it is given."""

from __future__ import annotations

import re
from collections.abc import Callable

from topoweb.core.formats import nccl, ncclxml, nvbandwidth, p2p, topo
from topoweb.core.formats.errors import ParseError
from topoweb.core.model import Parsed

__all__ = ["FORMATS", "TOPOLOGY_FORMATS", "ParseError", "detect_format", "parse_text"]


FORMATS = ("topology", "nccl-tests", "p2p-bandwidth-latency", "nccl-topology-xml", "nvbandwidth")
# What each format parses into: the XML is a topology source beside `topo -m`.
TOPOLOGY_FORMATS = ("topology", "nccl-topology-xml")

_P2P_MARKERS = re.compile(
    r"P2P Connectivity Matrix|P2P=(Enabled|Disabled)|p2pBandwidthLatencyTest|Peer-to-Peer \(P2P\)"
    r"|^Device=\d+ CAN(NOT)? Access Peer Device=\d+|^Device: \d+, .*, pciBusID: ",
    re.M,
)
_NCCL_MARKERS = re.compile(
    r"#\s*nThread\s+\d|#\s*out-of-place|#\s*Avg bus bandwidth|_perf\b|#\s*Using devices"
    r"|#\s*size\s+count\s+type\s|#\s*Rank\s+\d+\s+(Group\s+\d+\s+)?Pid\s+\d|nccl-tests version"
    r"|\bTest (CUDA |NCCL )?failure\b"
)
_NVBANDWIDTH_MARKERS = re.compile(
    r"^nvbandwidth Version:|^SUM \w+_(ce|sm) [\d.]+|^Running \w+_(memcpy|latency)_\w*(ce|sm)\.$"
    r'|"nvbandwidth"\s*:\s*\{|^memcpy (CE|SM) (CPU|GPU)\(row\)',
    re.M,
)
_XML_START = re.compile(r"^\s*<(\?xml|system)\b")
_TOPO_MARKERS = re.compile(r"GPU0\s*(GPU1|mlx|NIC|CPU|X\b)|\bGPU0\s+X\b|Legend:\s*$", re.M)


def detect_format(text: str) -> str:
    """Which of FORMATS the text looks like; ParseError when it is none of them."""
    if not text.strip():
        raise ParseError("the input is empty", line=1)
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise ParseError("the input is binary, not text", line=line)
    if _XML_START.match(text[:4096]):
        return "nccl-topology-xml"
    if _NVBANDWIDTH_MARKERS.search(text):
        return "nvbandwidth"
    if _P2P_MARKERS.search(text):
        return "p2p-bandwidth-latency"
    if _NCCL_MARKERS.search(text):
        return "nccl-tests"
    if _TOPO_MARKERS.search(text):
        return "topology"
    raise ParseError(
        "not a recognised format: expected `nvidia-smi topo -m`, an NCCL topology XML, "
        "nccl-tests, p2pBandwidthLatencyTest or nvbandwidth output"
    )


def parse_text(text: str, expected: str | None = None) -> Parsed:
    """Parse any supported output; with `expected`, insist on that format."""
    kind = detect_format(text)
    if expected == "topology" and kind in TOPOLOGY_FORMATS:
        pass  # either source gives a Topology
    elif expected is not None and kind != expected:
        raise ParseError(f"expected {expected} output but this looks like {kind} output")
    readers: dict[str, Callable[[str], Parsed]] = {
        "topology": topo.parse,
        "nccl-tests": nccl.parse,
        "p2p-bandwidth-latency": p2p.parse,
        "nccl-topology-xml": ncclxml.parse,
        "nvbandwidth": nvbandwidth.parse,
    }
    return readers[kind](text)
