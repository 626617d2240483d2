"""The graph document of core.export drawn as a standalone SVG: the same positions, sizes and
edge routes the page draws, so an exported picture matches the screen and is byte-identical
for the same topology."""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape, quoteattr

# Colour and dash of each link class, as the pages' legend shows them (frontend/src/graph.js).
CLASS_STYLE: dict[str, tuple[str, str]] = {
    "NV": ("#1b7f3b", ""),
    "PIX": ("#1f5fbf", ""),
    "PXB": ("#3fa7d6", "10 4"),
    "PHB": ("#7b4fb0", "4 4"),
    "NODE": ("#e08a00", "2 4"),
    "SYS": ("#c8322d", "1 6"),
    "PCIe": ("#4a5263", ""),
}
NODE_STYLE: dict[str, tuple[str, str, str]] = {  # fill, stroke, text
    "gpu": ("#cfe8d5", "#1b7f3b", "#1d2430"),
    "nic": ("#dbe7fb", "#1f5fbf", "#1d2430"),
    "nic_group": ("#dbe7fb", "#1f5fbf", "#1d2430"),
    "nvswitch": ("#1b7f3b", "#1b7f3b", "#ffffff"),
    "host_bridge": ("#efe7f7", "#7b4fb0", "#1d2430"),
    "cpu": ("#fdf1dd", "#e08a00", "#1d2430"),
    "interconnect": ("#fdf1dd", "#e08a00", "#1d2430"),
}
FONT = {"gpu": 17, "nvswitch": 15, "cpu": 13, "interconnect": 13, "nic": 13, "nic_group": 13}
PAD = {"numa": 12.0, "nic_box": 4.0}


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _class_key(link_class: str) -> str:
    return "NV" if link_class.startswith("NV") and link_class[2:].isdigit() else link_class


def graph_svg(doc: dict[str, Any], *, collapsed: bool | None = None, title: str = "") -> str:
    """SVG text of a graph document; `collapsed` picks the NIC-group mode (default: the
    document's own)."""
    first = bool(doc.get("nic_groups", {}).get("collapsed"))
    mode = first if collapsed is None else collapsed
    alt = mode != first
    wanted = "collapsed" if mode else "expanded"
    nodes: dict[str, dict[str, Any]] = {}
    pos: dict[str, tuple[float, float]] = {}
    edges = []
    for e in doc["elements"]:
        d = e["data"]
        if d.get("mode", wanted) != wanted:
            continue
        if e["group"] == "nodes":
            nodes[d["id"]] = dict(d)
            p = d.get("alt_position") if alt and d.get("alt_position") else e.get("position")
            if p is not None:
                pos[d["id"]] = (float(p["x"]), float(p["y"]))
        elif not d.get("in_group"):
            edges.append(d)
    # Compound boxes: around their members, innermost first.
    boxes: dict[str, tuple[float, float, float, float]] = {}
    for d in nodes.values():
        if alt and "alt_width" in d:
            d["width"] = d["alt_width"]
    for i, (x, y) in pos.items():
        w, h = nodes[i]["width"], nodes[i]["height"]
        boxes[i] = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
    for kind in ("nic_box", "numa"):
        for i, d in nodes.items():
            if d["kind"] != kind:
                continue
            inside = [boxes[c] for c, cd in nodes.items() if cd.get("parent") == i and c in boxes]
            if inside:
                pad = PAD[kind]
                boxes[i] = (
                    min(b[0] for b in inside) - pad,
                    min(b[1] for b in inside) - pad,
                    max(b[2] for b in inside) + pad,
                    max(b[3] for b in inside) + pad,
                )
    if not boxes:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>\n'
    x1 = min(b[0] for b in boxes.values()) - 20
    y1 = min(b[1] for b in boxes.values()) - 20
    x2 = max(b[2] for b in boxes.values()) + 20
    y2 = max(b[3] for b in boxes.values()) + 20
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="{_f(x1)} {_f(y1)} {_f(x2 - x1)} {_f(y2 - y1)}" '
        f'width="{_f(x2 - x1)}" height="{_f(y2 - y1)}" font-family="system-ui, sans-serif">',
        f"<title>{escape(title or 'topology graph')}</title>",
        f'<rect x="{_f(x1)}" y="{_f(y1)}" width="{_f(x2 - x1)}" height="{_f(y2 - y1)}" '
        'fill="#ffffff"/>',
    ]
    for kind, fill, stroke in (("numa", "#f6f7f9", "#9aa3b2"), ("nic_box", "#eef3fc", "#1f5fbf")):
        for i, d in nodes.items():
            if d["kind"] == kind and i in boxes:
                b = boxes[i]
                dash = ' stroke-dasharray="6 4"' if kind == "numa" else ""
                out.append(
                    f'<rect class="box {kind}" x="{_f(b[0])}" y="{_f(b[1])}" '
                    f'width="{_f(b[2] - b[0])}" height="{_f(b[3] - b[1])}" rx="6" '
                    f'fill="{fill}" stroke="{stroke}"{dash}/>'
                )
                if kind == "nic_box":
                    out.append(_text((b[0] + b[2]) / 2, b[3] + 14, d["label"], 12, "#4a5263"))
    for d in edges:
        if d["source"] not in pos or d["target"] not in pos:
            continue
        (sx, sy), (tx, ty) = pos[d["source"]], pos[d["target"]]
        route = d.get("alt_route") if alt and "alt_route" in d else d.get("route")
        bend = d.get("alt_bend") if alt and "alt_bend" in d else d.get("bend")
        colour, dash = CLASS_STYLE.get(_class_key(d["link_class"]), ("#9aa3b2", ""))
        width = 2.0 + min(d.get("nvlinks", 0), 18) * 5 / 17 if d.get("nvlinks") else 2.0
        if d["link_class"] == "SYS":
            width = 3.0
        if route:
            pts = " ".join(f"{_f(x)},{_f(y)}" for x, y in [(sx, sy), *route, (tx, ty)])
            shape = f'<polyline points="{pts}" fill="none"'
        elif bend:
            length = ((tx - sx) ** 2 + (ty - sy) ** 2) ** 0.5 or 1.0
            cx = (sx + tx) / 2 - (ty - sy) / length * bend
            cy = (sy + ty) / 2 + (tx - sx) / length * bend
            shape = f'<path d="M{_f(sx)},{_f(sy)} Q{_f(cx)},{_f(cy)} {_f(tx)},{_f(ty)}" fill="none"'
        else:
            shape = f'<line x1="{_f(sx)}" y1="{_f(sy)}" x2="{_f(tx)}" y2="{_f(ty)}"'
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'{shape} class="edge" data-id={quoteattr(d["id"])} stroke="{colour}" '
            f'stroke-width="{_f(width)}"{dash_attr}/>'
        )
    for i, d in nodes.items():
        if d["kind"] in ("numa", "nic_box") or i not in pos:
            continue
        x, y = pos[i]
        w, h = d["width"], d["height"]
        fill, stroke, ink = NODE_STYLE.get(d["kind"], ("#eef1f5", "#8a94a6", "#1d2430"))
        out.append(
            f'<g class="node {d["kind"]}" data-id={quoteattr(i)}>'
            f'<rect x="{_f(x - w / 2)}" y="{_f(y - h / 2)}" width="{_f(w)}" height="{_f(h)}" '
            f'rx="5" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{2 if d["kind"] == "gpu" else 1}"/>'
            + _text(x, y, d["label"], FONT.get(d["kind"], 11), ink)
            + "</g>"
        )
    out.append("</svg>\n")
    return "\n".join(out)


def _text(x: float, y: float, label: str, size: float, ink: str) -> str:
    lines = label.split("\n")
    top = y - (len(lines) - 1) * size * 0.6
    spans = "".join(
        f'<tspan x="{_f(x)}" y="{_f(top + i * size * 1.2)}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return (
        f'<text text-anchor="middle" dominant-baseline="central" font-size="{_f(size)}" '
        f'fill="{ink}">{spans}</text>'
    )
