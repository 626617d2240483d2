"""The graph's one style sheet: per link class its colour, line pattern, legend text and width,
per node kind its fill, stroke, ink and font size. core.svg draws the exported SVG from it and
the pages read the same document (rendered into every page that draws a graph), so a class
looks the same on screen, in the legend and in an exported file."""

from __future__ import annotations

import math
from typing import Any

# Each class has a colour AND a line pattern AND a text label, so colour never carries the
# meaning alone. Nearest to farthest, as nvidia-smi orders them; "PCIe" is one hop of the
# recovered PCIe tree (device-to-device classes are the paths through it).
LINK_CLASSES: tuple[dict[str, Any], ...] = (
    {"key": "NV", "label": "NV#", "name": "NVLink (width = link count)", "color": "#1b7f3b",
     "style": "solid", "dash": None},
    {"key": "PIX", "label": "PIX", "name": "one PCIe switch", "color": "#1f5fbf",
     "style": "solid", "dash": None},
    {"key": "PXB", "label": "PXB", "name": "several PCIe switches", "color": "#3fa7d6",
     "style": "dashed", "dash": [10, 4]},
    {"key": "PHB", "label": "PHB", "name": "through the host bridge (CPU)", "color": "#7b4fb0",
     "style": "dashed", "dash": [4, 4]},
    {"key": "NODE", "label": "NODE", "name": "between host bridges, same NUMA node",
     "color": "#e08a00", "style": "dotted", "dash": [2, 4]},
    {"key": "SYS", "label": "SYS", "name": "across the CPU socket interconnect",
     "color": "#c8322d", "style": "dotted", "dash": [1, 6]},
    {"key": "PCIe", "label": "PCIe", "name": "one hop of the recovered PCIe tree",
     "color": "#4a5263", "style": "solid", "dash": None},
)  # fmt: skip
BY_KEY = {c["key"]: c for c in LINK_CLASSES}
DEFAULT_EDGE = {"color": "#9aa3b2", "dash": None}
EDGE_WIDTH = 2.0
SYS_WIDTH = 3.0

# fill, stroke, ink (text), font size
NODE_KINDS: dict[str, dict[str, Any]] = {
    "gpu": {"fill": "#cfe8d5", "stroke": "#1b7f3b", "ink": "#1d2430", "font": 17},
    "nic": {"fill": "#dbe7fb", "stroke": "#1f5fbf", "ink": "#1d2430", "font": 13},
    "nic_group": {"fill": "#dbe7fb", "stroke": "#1f5fbf", "ink": "#1d2430", "font": 13},
    "nvswitch": {"fill": "#1b7f3b", "stroke": "#1b7f3b", "ink": "#ffffff", "font": 15},
    "switch": {"fill": "#eef1f5", "stroke": "#8a94a6", "ink": "#1d2430", "font": 11},
    "switch_tree": {"fill": "#eef1f5", "stroke": "#8a94a6", "ink": "#1d2430", "font": 11},
    "host_bridge": {"fill": "#efe7f7", "stroke": "#7b4fb0", "ink": "#1d2430", "font": 11},
    "cpu": {"fill": "#fdf1dd", "stroke": "#e08a00", "ink": "#1d2430", "font": 13},
    "interconnect": {"fill": "#fdf1dd", "stroke": "#e08a00", "ink": "#1d2430", "font": 13},
    "numa": {"fill": "#f6f7f9", "stroke": "#9aa3b2", "ink": "#4a5263", "font": 12},
    "nic_box": {"fill": "#eef3fc", "stroke": "#1f5fbf", "ink": "#4a5263", "font": 12},
}
DEFAULT_NODE = {"fill": "#eef1f5", "stroke": "#8a94a6", "ink": "#1d2430", "font": 11}
# Where a label is drawn near an edge's source end, its distance along the edge.
SOURCE_LABEL_OFFSET = {"fabric": 34, "crossing": 14}
# The socket link's caption ("SYS · Intel UPI (Sapphire Rapids) (assumed)") wraps to this width,
# the gap between two CPU boxes: on one line its ends hid under the boxes, "(assumed)" with them.
CAPTION_MAX_WIDTH = 120


def class_key(link_class: str) -> str:
    """NV1..NV18 share one style; every other class is its own key."""
    return "NV" if link_class.startswith("NV") and link_class[2:].isdigit() else link_class


def nvlink_width(links: int) -> float:
    """Line width of a bond of `links` NVLinks: each doubling adds 1.75 px, so NV1 and NV2 (a
    DGX-1's two kinds) are told apart at a glance and NV18 stays a line, not a bar."""
    return round(min(2.0 + 1.75 * math.log2(max(links, 1)), 9.5), 1)


def edge_width(link_class: str, nvlinks: int = 0) -> float:
    if nvlinks:
        return nvlink_width(nvlinks)
    return SYS_WIDTH if link_class == "SYS" else EDGE_WIDTH


def edge_style(link_class: str) -> dict[str, Any]:
    """Colour and dash pattern (None: solid) of a link class."""
    return BY_KEY.get(class_key(link_class), DEFAULT_EDGE)


def node_style(kind: str) -> dict[str, Any]:
    return NODE_KINDS.get(kind, DEFAULT_NODE)


def style_document() -> dict[str, Any]:
    """The style sheet as the pages read it (json_script on every page that draws a graph)."""
    return {
        "link_classes": [dict(c) for c in LINK_CLASSES],
        "nodes": {k: dict(v) for k, v in NODE_KINDS.items()},
        "edge_width": EDGE_WIDTH,
        "sys_width": SYS_WIDTH,
        "source_label_offset": dict(SOURCE_LABEL_OFFSET),
        "caption_max_width": CAPTION_MAX_WIDTH,
    }
