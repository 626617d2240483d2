"""The graph document of core.export drawn as a standalone SVG: the same positions, sizes and
edge routes the page draws, so an exported picture matches the screen and is byte-identical
for the same topology."""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape, quoteattr

from topoweb.core.graphstyle import SOURCE_LABEL_OFFSET, edge_style, edge_width, node_style

PAD = {"numa": 12.0, "nic_box": 4.0}


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


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
    # A bent edge's curve (and the label at its middle) may run outside every box.
    reach = list(boxes.values())
    for d in edges:
        bend = d.get("alt_bend") if alt and "alt_bend" in d else d.get("bend")
        if bend and d["source"] in pos and d["target"] in pos:
            (sx, sy), (tx, ty) = pos[d["source"]], pos[d["target"]]
            length = ((tx - sx) ** 2 + (ty - sy) ** 2) ** 0.5 or 1.0
            mx = (sx + tx) / 2 - (ty - sy) / length * bend / 2
            my = (sy + ty) / 2 + (tx - sx) / length * bend / 2
            reach.append((mx - 10, my - 10, mx + 10, my + 10))
    x1 = min(b[0] for b in reach) - 20
    y1 = min(b[1] for b in reach) - 20
    x2 = max(b[2] for b in reach) + 20
    y2 = max(b[3] for b in reach) + 20
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="{_f(x1)} {_f(y1)} {_f(x2 - x1)} {_f(y2 - y1)}" '
        f'width="{_f(x2 - x1)}" height="{_f(y2 - y1)}" font-family="system-ui, sans-serif">',
        f"<title>{escape(title or 'topology graph')}</title>",
        f'<rect x="{_f(x1)}" y="{_f(y1)}" width="{_f(x2 - x1)}" height="{_f(y2 - y1)}" '
        'fill="#ffffff"/>',
    ]
    for kind in ("numa", "nic_box"):
        look = node_style(kind)
        for i, d in nodes.items():
            if d["kind"] == kind and i in boxes:
                b = boxes[i]
                dash = ' stroke-dasharray="6 4"' if kind == "numa" else ""
                out.append(
                    f'<rect class="box {kind}" x="{_f(b[0])}" y="{_f(b[1])}" '
                    f'width="{_f(b[2] - b[0])}" height="{_f(b[3] - b[1])}" rx="6" '
                    f'fill="{look["fill"]}" stroke="{look["stroke"]}"{dash}/>'
                )
                if kind == "nic_box":
                    out.append(_text((b[0] + b[2]) / 2, b[3] + 14, d["label"], 12, look["ink"]))
    labels: list[str] = []
    for d in edges:
        ends = [d["source"], d["target"]]
        if not all(e in pos or e in boxes for e in ends):
            continue
        # A compound (a NIC box) has no position of its own: its edge leaves the box's border.
        (sx, sy), (tx, ty) = (pos.get(e) or _centre(boxes[e]) for e in ends)
        route = d.get("alt_route") if alt and "alt_route" in d else d.get("route")
        bend = d.get("alt_bend") if alt and "alt_bend" in d else d.get("bend")
        look = edge_style(d["link_class"])
        width = edge_width(d["link_class"], int(d.get("nvlinks") or 0))
        points = [(sx, sy), *[(float(x), float(y)) for x, y in route or []], (tx, ty)]
        if d["source"] not in pos:
            points[0] = _leave(boxes[d["source"]], points[0], points[1])
        if d["target"] not in pos:
            points[-1] = _leave(boxes[d["target"]], points[-1], points[-2])
        if route:  # the last hop runs straight into its node's border, as on the page
            points[-1] = _onto(boxes[d["target"]], points[-2], points[-1])
        control = None
        if route:
            pts = " ".join(f"{_f(x)},{_f(y)}" for x, y in points)
            shape = f'<polyline points="{pts}" fill="none"'
        elif bend:
            length = ((tx - sx) ** 2 + (ty - sy) ** 2) ** 0.5 or 1.0
            control = (
                (sx + tx) / 2 - (ty - sy) / length * bend,
                (sy + ty) / 2 + (tx - sx) / length * bend,
            )
            shape = (
                f'<path d="M{_f(points[0][0])},{_f(points[0][1])} Q{_f(control[0])},'
                f'{_f(control[1])} {_f(points[-1][0])},{_f(points[-1][1])}" fill="none"'
            )
        else:
            (ax, ay), (bx, by) = points[0], points[-1]
            shape = f'<line x1="{_f(ax)}" y1="{_f(ay)}" x2="{_f(bx)}" y2="{_f(by)}"'
        dash_attr = (
            f' stroke-dasharray="{" ".join(str(v) for v in look["dash"])}"' if look["dash"] else ""
        )
        out.append(
            f'{shape} class="edge" data-id={quoteattr(d["id"])} stroke="{look["color"]}" '
            f'stroke-width="{_f(width)}"{dash_attr}/>'
        )
        if d.get("nvlinks") or d["link_class"] == "SYS":
            at = _label_at(d, points, control, nodes)
            labels.append(_edge_label(at, d.get("caption") or d["link_class"], d["id"]))
    for i, d in nodes.items():
        if d["kind"] in ("numa", "nic_box") or i not in pos:
            continue
        x, y = pos[i]
        w, h = d["width"], d["height"]
        look = node_style(d["kind"])
        out.append(
            f'<g class="node {d["kind"]}" data-id={quoteattr(i)}>'
            f'<rect x="{_f(x - w / 2)}" y="{_f(y - h / 2)}" width="{_f(w)}" height="{_f(h)}" '
            f'rx="5" fill="{look["fill"]}" stroke="{look["stroke"]}" '
            f'stroke-width="{2 if d["kind"] == "gpu" else 1}"/>'
            + _text(x, y, d["label"], look["font"], look["ink"])
            + "</g>"
        )
    # Labels last, on a white ground, as the page draws them over lines and boxes.
    out.extend(labels)
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


LABEL_FONT = 11.0


def _centre(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)


def _leave(
    box: tuple[float, float, float, float], inside: tuple[float, float], toward: tuple[float, float]
) -> tuple[float, float]:
    """Where the segment from `inside` toward `toward` crosses the box's border."""
    (x, y), (qx, qy) = inside, toward
    dx, dy = qx - x, qy - y
    ts = [1.0]
    if dx:
        ts.append(((box[2] if dx > 0 else box[0]) - x) / dx)
    if dy:
        ts.append(((box[3] if dy > 0 else box[1]) - y) / dy)
    t = max(0.0, min(ts))
    return (x + dx * t, y + dy * t)


def _onto(
    box: tuple[float, float, float, float], corner: tuple[float, float], end: tuple[float, float]
) -> tuple[float, float]:
    """A route's end on its node: straight on from its last corner where the corner is above,
    below or beside the node (not aimed at the node's centre, which would draw a slanted
    stub), else the end as given."""
    (cx, cy), (x1, y1, x2, y2) = corner, box
    if x1 <= cx <= x2 and not y1 <= cy <= y2:
        return (cx, y1 if cy < y1 else y2)
    if y1 <= cy <= y2 and not x1 <= cx <= x2:
        return (x1 if cx < x1 else x2, cy)
    return end


def _label_at(
    d: dict[str, Any],
    points: list[tuple[float, float]],
    control: tuple[float, float] | None,
    nodes: dict[str, dict[str, Any]],
) -> tuple[float, float]:
    """Where the page puts an edge's class label: near the source for a drop to the NVSwitch
    bar and for crossing diagonals (`label_at_source`), else mid-edge."""
    (sx, sy), (nx, ny) = points[0], control or points[1]
    if d.get("fabric") or d.get("label_at_source"):
        offset = SOURCE_LABEL_OFFSET["fabric" if d.get("fabric") else "crossing"]
        length = ((nx - sx) ** 2 + (ny - sy) ** 2) ** 0.5 or 1.0
        ux, uy = (nx - sx) / length, (ny - sy) / length
        src = nodes[d["source"]]
        w, h = float(src.get("width", 0)), float(src.get("height", 0))
        edge_out = min(w / 2 / abs(ux) if ux else 1e9, h / 2 / abs(uy) if uy else 1e9)
        return (sx + ux * (edge_out + offset), sy + uy * (edge_out + offset))
    (ex, ey) = points[-1]
    if control is not None:
        return ((sx + 2 * control[0] + ex) / 4, (sy + 2 * control[1] + ey) / 4)
    if len(points) > 2:
        return points[len(points) // 2]
    return ((sx + ex) / 2, (sy + ey) / 2)


def _edge_label(at: tuple[float, float], text: str, edge_id: str) -> str:
    x, y = at
    w, h = len(text) * LABEL_FONT * 0.62 + 2, LABEL_FONT + 2
    return (
        f'<g class="edge-label" data-id={quoteattr(edge_id)}>'
        f'<rect x="{_f(x - w / 2)}" y="{_f(y - h / 2)}" width="{_f(w)}" height="{_f(h)}" '
        'fill="#ffffff" fill-opacity="0.9"/>' + _text(x, y, text, LABEL_FONT, "#1d2430") + "</g>"
    )
