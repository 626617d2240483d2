"""A deterministic drawing of a topology, computed from its recovered hierarchy: the same input
gives the same coordinates on every load and every machine (no random force layout).

lstopo's nesting: NUMA nodes side by side in their numeric order, each a box with its CPU on
top, the PCIe host bridges and switches as a tree under it and the GPUs and NICs as the leaves
on one row. An NVSwitch fabric is one node under all GPUs; a hybrid cube mesh is drawn as two
quads with the cross links between them; NICs on one PCIe switch are a group that collapses
into one node when there are many. Node sizes follow their labels, so no two boxes and no two
labels overlap; an edge that would run under an unrelated node bends around it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from topoweb.core.graphstyle import NODE_KINDS
from topoweb.core.grid import close_labels, file_under, labels_on_lines, span
from topoweb.core.hierarchy import Hierarchy, NvlinkDomain
from topoweb.core.model import Topology

ROW = 80.0  # from a CPU to the tops of its columns
GAP = 18.0  # between neighbouring boxes in a row
VGAP = 16.0  # between the rows of a column
INDENT = 16.0  # a child's left edge right of its parent's trunk
COLUMN_GAP = 26.0  # between the columns of a NUMA box
BOX_GAP = 50.0  # between NUMA boxes
MAX_COLUMNS = 3  # columns in one row of a NUMA box; more wrap
TRUNK_GUTTER = 18.0  # room for the trunk to wrapped rows, on the box's left  # between NUMA boxes
BLOCK_GAP = 64.0  # between the two rows of a quad
NIC_GROUP_MIN = 4  # NICs on one switch that make a collapsible group
COLLAPSE_FROM = 16  # NICs in the server from which groups start collapsed
NIC_GRID_COLUMNS = 3
MARGIN = 8.0  # clearance an edge keeps from an unrelated node
LANE = (
    14.0  # a quad's outer lanes, left and right of its GPUs, for the PCIe drops to its bottom row
)

# Font sizes from the style sheet the labels are drawn with; PCIe nodes are sized a point above
# their drawn font, for their boxes' padding.
FONT = {
    "gpu": float(NODE_KINDS["gpu"]["font"]),
    "nic": float(NODE_KINDS["nic"]["font"]),
    "cpu": float(NODE_KINDS["cpu"]["font"]),
    "pcie": float(NODE_KINDS["switch"]["font"]) + 1.0,
    "nvswitch": float(NODE_KINDS["nvswitch"]["font"]),
    "group": float(NODE_KINDS["nic_group"]["font"]),
}
HEIGHT = {"gpu": 38.0, "nic": 30.0, "cpu": 30.0, "pcie": 26.0, "nvswitch": 50.0, "group": 44.0}


def text_width(label: str, font: float) -> float:
    """Width of a label in a sans-serif font: about 0.6 em a character, widest line."""
    return max(len(line) for line in label.split("\n")) * font * 0.62


def node_size(kind: str, label: str) -> tuple[float, float]:
    key = kind if kind in FONT else "pcie"
    minimum = {"gpu": 64.0, "nic": 64.0, "cpu": 70.0, "nvswitch": 160.0, "group": 90.0}
    w = max(minimum.get(key, 60.0), text_width(label, FONT[key]) + 20.0)
    h = max(HEIGHT[key], (label.count("\n") + 1) * FONT[key] * 1.3 + 12.0)
    return round(w, 1), round(h, 1)


@dataclass
class _Tree:
    """One drawn item of a NUMA box's tree: a node with children, a leaf device, or a block of
    devices drawn together (a quad of the mesh, a grid of NICs)."""

    id: str
    w: float
    h: float
    key: tuple[float, ...]
    gpu: bool = False
    children: list[_Tree] = field(default_factory=list)
    block: list[tuple[str, float, float]] = field(default_factory=list)  # id, dx, dy from top-left


@dataclass(frozen=True)
class Drawing:
    """Centre coordinates of every drawn node and its box size; per edge its route: the corner
    points of an orthogonal route (PCIe tree, NVSwitch drops), or a bend (the signed distance
    of a quadratic control point from the midpoint) for an edge that would run under an
    unrelated node."""

    positions: dict[str, tuple[float, float]]
    sizes: dict[str, tuple[float, float]]
    routes: dict[str, list[tuple[float, float]]]
    bends: dict[str, float]
    source_labels: frozenset[str] = frozenset()  # labelled near the source: mid-labels clash


def numa_order(topo: Topology, h: Hierarchy) -> list[str]:
    """NUMA node ids in numeric order of their NUMA number; the matrix-only groups follow,
    in the order of their first device."""
    position = {d.id: i for i, d in enumerate(topo.devices)}

    def key(node_id: str) -> tuple[int, int, int]:
        node = h.node(node_id)
        values = {
            int(v)
            for m in node.devices
            if (v := (topo.device(m).numa_affinity or "").strip()).isdigit()
        }
        first = min(position[m] for m in node.devices)
        if len(values) == 1:
            return (0, values.pop(), first)
        return (1, 0, first)

    return sorted((n.id for n in h.nodes if n.kind == "numa"), key=key)


def cube_mesh_quads(topo: Topology, domain: NvlinkDomain) -> tuple[list[str], list[str]] | None:
    """A hybrid cube mesh (DGX-1): two fully linked quads and one link from each GPU of a quad
    to one of the other. Returns the quads as [top-left, top-right, bottom-left, bottom-right]
    arranged so that each cross link joins mirrored corners; None for any other mesh."""
    gpus = list(domain.gpus)
    if domain.fabric != "point_to_point" or len(gpus) != 8:
        return None
    linked = {g: {o for o in gpus if o != g and topo.link(g, o).is_nvlink} for g in gpus}
    first = gpus[0]
    for trio in _triples([g for g in linked[first]]):
        quad = {first, *trio}
        if all(b in linked[a] for a in quad for b in quad if a != b):
            rest = [g for g in gpus if g not in quad]
            if not all(b in linked[a] for a in rest for b in rest if a != b):
                continue
            partner = {}
            for g in quad:
                across = [o for o in linked[g] if o in rest]
                if len(across) != 1:
                    return None
                partner[g] = across[0]
            if len(set(partner.values())) != 4:
                return None
            a = sorted(quad, key=gpus.index)
            left = [a[0], a[1], a[3], a[2]]  # 0 1 / 3 2: round the square
            tl, tr, bl, br = left
            right = [partner[tr], partner[tl], partner[br], partner[bl]]
            return left, right
    return None


def _triples(items: list[str]) -> list[tuple[str, str, str]]:
    return [
        (items[i], items[j], items[k])
        for i in range(len(items))
        for j in range(i + 1, len(items))
        for k in range(j + 1, len(items))
    ]


def nic_groups(topo: Topology, h: Hierarchy) -> dict[str, list[str]]:
    """PCIe node -> its NICs, where one node carries at least NIC_GROUP_MIN of them."""
    by_parent: dict[str, list[str]] = {}
    for d in topo.nics:
        by_parent.setdefault(h.parent[d.id], []).append(d.id)
    return {p: nics for p, nics in by_parent.items() if len(nics) >= NIC_GROUP_MIN}


def cpu_id(numa_id: str) -> str:
    return f"{numa_id}-cpu"


def draw(
    topo: Topology,
    h: Hierarchy,
    labels: dict[str, tuple[str, str]],
    edges: list[tuple[str, str, str]],
    collapsed: bool,
) -> Drawing:
    """Lay out the nodes named in `labels` (id -> kind, label). `edges` are (id, source,
    target) of the drawn edges; a tree edge's id is "pcie:" + the child's id. `collapsed`:
    NIC groups are one node each, else a grid inside a box."""
    sizes = {i: node_size(kind, label) for i, (kind, label) in labels.items()}
    position = {d.id: i for i, d in enumerate(topo.devices)}
    groups = nic_groups(topo, h)
    in_group = {nic: p for p, nics in groups.items() for nic in nics}

    def first(devices: tuple[str, ...] | list[str]) -> tuple[float, ...]:
        return (float(min(position[m] for m in devices)),)

    # Quads of a cube mesh that stay inside one NUMA box are drawn as one 2x2 block, hung at
    # the lowest tree node above all four.
    blocks: dict[str, list[str]] = {}
    for domain in h.nvlink_domains:
        quads = cube_mesh_quads(topo, domain)
        if quads is None:
            continue
        if all(h.numa_of(g) == h.numa_of(q[0]) for q in quads for g in q):
            for i, q in enumerate(quads):
                blocks[f"quad{i}"] = q
    block_of = {g: b for b, q in blocks.items() for g in q}

    def lowest_common(devices: list[str]) -> str:
        chains = [h.chain(d) for d in devices]
        return next(n for n in chains[0] if all(n in c for c in chains[1:]))

    def drawn_parent(node_id: str | None) -> str:
        assert node_id is not None
        return cpu_id(node_id) if h.node(node_id).kind == "numa" else node_id

    children: dict[str, list[_Tree]] = {}

    def add(parent: str, item: _Tree) -> None:
        children.setdefault(parent, []).append(item)

    for node in h.nodes:
        if node.kind != "numa":
            w, hh = sizes[node.id]
            add(drawn_parent(node.parent), _Tree(node.id, w, hh, first(node.devices)))
    for b, members in blocks.items():
        cell_w = max(sizes[g][0] for g in members)
        cell_h = max(sizes[g][1] for g in members)
        pitch_x, pitch_y = cell_w + 2 * GAP, cell_h + BLOCK_GAP
        item = _Tree(b, cell_w + pitch_x + 2 * LANE, cell_h + pitch_y, first(members))
        corners = [(LANE, 0.0), (LANE + pitch_x, 0.0), (LANE, pitch_y), (LANE + pitch_x, pitch_y)]
        item.block = [
            (g, ox + cell_w / 2, oy + cell_h / 2)
            for g, (ox, oy) in zip(members, corners, strict=True)
        ]
        add(drawn_parent(lowest_common(members)), item)
    for p, nics in groups.items():
        if collapsed:
            gid = f"nicgroup:{p}"
            add(p, _Tree(gid, *sizes[gid], first(nics)))
            continue
        cell_w = max(sizes[n][0] for n in nics)
        cell_h = max(sizes[n][1] for n in nics)
        cols = min(NIC_GRID_COLUMNS, len(nics))
        rows = math.ceil(len(nics) / cols)
        pad = 10.0
        item = _Tree(
            f"nicbox:{p}",
            cols * (cell_w + GAP) - GAP + 2 * pad,
            rows * (cell_h + GAP) - GAP + 2 * pad,
            first(nics),
        )
        for i, n in enumerate(nics):
            ci, ri = i % cols, i // cols
            item.block.append(
                (
                    n,
                    pad + ci * (cell_w + GAP) + cell_w / 2,
                    pad + ri * (cell_h + GAP) + cell_h / 2,
                )
            )
        add(p, item)
    for d in topo.devices:
        if d.id in block_of or d.id in in_group:
            continue
        w, hh = sizes[d.id]
        add(drawn_parent(h.parent[d.id]), _Tree(d.id, w, hh, first([d.id]), gpu=d.kind == "gpu"))

    def build(item: _Tree) -> _Tree:
        if item.id in children and not item.block:
            item.children = sorted((build(c) for c in children[item.id]), key=lambda c: c.key)
        return item

    positions: dict[str, tuple[float, float]] = {}
    routes: dict[str, list[tuple[float, float]]] = {}

    def place_block(
        t: _Tree, left: float, top: float, trunk: tuple[float, float], hang: str
    ) -> None:
        """A block's members from its top-left corner; a quad's GPUs are reached over a bus
        above it, the bottom two from below, up the quad's outer lane on their side (down its
        middle they would cross the diagonals where their labels are, and run along the bottom
        NVLink). A GPU whose switch is not the node the quad hangs at climbs a lane just left
        of its switch, entering it from the side."""
        positions[t.id] = (left + t.w / 2, top + t.h / 2)
        tx, bus = trunk
        for member, ox, oy in t.block:
            x, y = left + ox, top + oy
            positions[member] = (x, y)
            if not t.id.startswith("quad"):
                continue
            if drawn_parent(h.parent[member]) == hang:  # others: see side_entries below
                tail = [(x, bus)] if oy < t.h / 2 else under_route(t, left, member, bus)
                routes[f"pcie:{member}"] = [(tx, bus), *tail]

    def under_route(t: _Tree, left: float, member: str, bus: float) -> list[tuple[float, float]]:
        """From the bus down the quad's outer lane on the member's side, under it, up into it."""
        ox, oy = next((ox, oy) for m, ox, oy in t.block if m == member)
        lane = left + LANE / 2 if ox < t.w / 2 else left + t.w - LANE / 2
        below = top_of(t, member) + sizes[member][1] + GAP / 2
        return [(lane, bus), (lane, below), (left + ox, below)]

    def top_of(t: _Tree, member: str) -> float:
        return positions[member][1] - sizes[member][1] / 2

    def place_column(t: _Tree, left: float, top: float) -> tuple[float, float]:
        """A file tree: the node, then its NICs and sub-trees indented under it, then its GPUs
        side by side. Returns the right and bottom edges."""
        px, py = left + t.w / 2, top + t.h / 2
        positions[t.id] = (px, py)
        right, cursor = left + t.w, top + t.h + VGAP
        gpus = [c for c in t.children if c.gpu or c.id.startswith("quad")]
        for c in t.children:
            if c in gpus:
                continue
            cl = px + INDENT
            if c.block:
                place_block(c, cl, cursor, (px, cursor - VGAP / 2), t.id)
                routes[f"pcie:{c.id}"] = [(px, cursor + c.h / 2)]
                right, cursor = max(right, cl + c.w), cursor + c.h + VGAP
            elif c.children:
                r, b = place_column(c, cl, cursor)
                routes[f"pcie:{c.id}"] = [(px, positions[c.id][1])]
                right, cursor = max(right, r), b + VGAP
            else:
                positions[c.id] = (cl + c.w / 2, cursor + c.h / 2)
                routes[f"pcie:{c.id}"] = [(px, cursor + c.h / 2)]
                right, cursor = max(right, cl + c.w), cursor + c.h + VGAP
        if gpus:
            x = left
            bus = cursor - VGAP / 2
            for g in gpus:
                if g.block:
                    place_block(g, x, cursor, (px, bus), t.id)
                    routes[f"pcie:{g.id}"] = [(px, bus), (x + g.w / 2, bus)]
                else:
                    positions[g.id] = (x + g.w / 2, cursor + g.h / 2)
                    routes[f"pcie:{g.id}"] = [(px, bus), (x + g.w / 2, bus)]
                x += g.w + GAP
            right = max(right, x - GAP)
            cursor += max(g.h for g in gpus) + VGAP
        return right, cursor - VGAP

    numas = numa_order(topo, h)
    left = 0.0
    cpu_xs = []
    bottom = 0.0
    trunks: list[tuple[float, float, float, float]] = []  # the wrapped rows' trunks, as boxes
    for numa_id in numas:
        c = cpu_id(numa_id)
        cw, ch = sizes[c]
        columns = sorted((build(i) for i in children.get(c, [])), key=lambda i: i.key)
        # Many columns wrap onto further rows, reached by a trunk down the box's left side.
        n_rows = max(1, math.ceil(len(columns) / MAX_COLUMNS))
        per_row = math.ceil(len(columns) / n_rows) if columns else 0
        gutter = TRUNK_GUTTER if n_rows > 1 else 0.0
        top = ROW
        spans: list[tuple[_Tree, float, float]] = []
        row_right = left
        for r in range(n_rows):
            x = left + gutter
            row_bottom = top
            for col in columns[r * per_row : (r + 1) * per_row]:
                if col.block:
                    place_block(col, x, top, (0.0, top - ROW / 2), c)
                    right, low = x + col.w, top + col.h
                else:
                    right, low = place_column(col, x, top)
                spans.append((col, top, right))
                row_bottom = max(row_bottom, low)
                x = right + COLUMN_GAP
            row_right = max(row_right, x - COLUMN_GAP)
            top = row_bottom + ROW * 0.75
        bottom = max(bottom, top - ROW * 0.75)
        used = row_right - left
        width = max(used, cw)
        shift = (width - used) / 2 if columns else 0.0
        if shift:
            moved = _ids(columns)
            for m in moved:
                if m in positions:
                    positions[m] = (positions[m][0] + shift, positions[m][1])
            for e in [e for e in routes if e[5:] in moved]:
                routes[e] = [(px + shift, py) for px, py in routes[e]]
        cpu_x = left + width / 2
        positions[c] = (cpu_x, 0.0)
        cpu_xs.append(cpu_x)
        trunk_x = left + shift + gutter / 2
        if n_rows > 1:
            trunk_bottom = max(t for _, t, _ in spans)
            trunks.append((trunk_x, (ROW / 2 + trunk_bottom) / 2, 2.0, trunk_bottom - ROW / 2))
        for col, col_top, _ in spans:
            bus = col_top - (ROW / 2 if col_top == ROW else ROW * 0.75 / 2)
            head = [(cpu_x, ROW / 2)]
            if col_top != ROW:
                head = [(cpu_x, ROW / 2), (trunk_x, ROW / 2), (trunk_x, bus)]
            if col.block:
                for member, _, _ in col.block:
                    if drawn_parent(h.parent[member]) == c:  # hung off the CPU's bus
                        pts = routes[f"pcie:{member}"]
                        routes[f"pcie:{member}"] = [*head, *pts[1:]]
            else:
                routes[f"pcie:{col.id}"] = [*head, (positions[col.id][0], bus)]
        left += width + BOX_GAP
    # A quad GPU whose switch is not the node the quad hangs at climbs a lane just left of its
    # switch (entering it from the side), then the bus just above the quad.
    for members in blocks.values():
        hang_id = drawn_parent(lowest_common(members))
        half = max(sizes[gid][1] for gid in members) / 2
        top_y = min(positions[gid][1] for gid in members)
        bus = top_y - half - VGAP / 2
        middle = sum(positions[gid][0] for gid in members) / 4
        width = max(sizes[gid][0] for gid in members) / 2
        for gid in members:
            up = drawn_parent(h.parent[gid])
            if up == hang_id:
                continue
            x, y = positions[gid]
            sx, sy = positions[up]
            lane = sx - sizes[up][0] / 2 - INDENT / 2
            if y == top_y:
                tail = [(x, bus)]
            else:  # the quad's outer lane on its side, then under it (see place_block)
                side = x - width - LANE / 2 if x < middle else x + width + LANE / 2
                below = y + sizes[gid][1] / 2 + GAP / 2
                tail = [(side, bus), (side, below), (x, below)]
            routes[f"pcie:{gid}"] = [(lane, sy), (lane, bus), *tail]
    for node_id, (kind, _) in labels.items():
        if kind == "interconnect":
            positions[node_id] = ((min(cpu_xs) + max(cpu_xs)) / 2, -ROW * 0.8)
    gpu_xs = [positions[g.id][0] for g in topo.gpus if g.id in positions]
    for node_id, (kind, _) in labels.items():
        if kind == "nvswitch" and gpu_xs:
            w = max(gpu_xs) - min(gpu_xs) + sizes[topo.gpus[0].id][0] + 40
            sizes[node_id] = (round(max(w, sizes[node_id][0]), 1), sizes[node_id][1])
            y = bottom + ROW * 0.8
            positions[node_id] = ((min(gpu_xs) + max(gpu_xs)) / 2, y)
            top_edge = y - sizes[node_id][1] / 2 - 1
            # What a drop must clear: every placed node but the bar, and the lanes taken.
            obstacles = _Obstacles()
            for placed, (px, py) in positions.items():
                if placed != node_id and not placed.startswith(("nicbox:", "quad")):
                    obstacles.add(placed, (px, py, *sizes[placed]))
            for k, lane_box in enumerate(trunks):
                obstacles.add(f"trunk{k}", lane_box)
            for g in topo.gpus:
                if g.id not in positions:
                    continue
                gx, gy = positions[g.id]
                route = _drop((gx, gy), sizes[g.id][1], top_edge, obstacles, (g.id, node_id))
                routes[f"nv:{g.id}:{node_id}"] = route
                # A lane taken is an obstacle for the next GPU's drop: no two drops share one.
                if route:
                    lx, ly = route[-2] if len(route) > 1 else (gx, gy)
                    trunks.append((lx, (ly + top_edge) / 2, 6.0, top_edge - ly))
                    obstacles.add(f"trunk{len(trunks) - 1}", trunks[-1])
    # Round so that the same input gives byte-identical output everywhere.
    positions = {i: (round(x, 1), round(y, 1)) for i, (x, y) in positions.items()}
    routes = {e: [(round(x, 1), round(y, 1)) for x, y in pts] for e, pts in routes.items()}
    boxes = {
        i: (x, y, sizes[i][0], sizes[i][1])
        for i, (x, y) in positions.items()
        if not i.startswith(("nicbox:", "quad"))
    }
    gpu_ys = [positions[g.id][1] for g in topo.gpus if g.id in positions]
    centre = (sum(gpu_xs) / len(gpu_xs), sum(gpu_ys) / len(gpu_ys)) if gpu_xs else (0.0, 0.0)
    # Each edge's bend is tested against the boxes near it (a mesh of 256 GPUs has 4,608
    # NVLink edges, each tried at up to 37 bends, and hundreds of boxes).
    to_bend = [
        (eid, a, b)
        for eid, a, b in edges
        if eid not in routes and a in positions and b in positions
    ]
    nodes = _Obstacles()
    for box_id, box in boxes.items() if to_bend else ():
        nodes.add(box_id, box)
    bends = {eid: _bend(positions[a], positions[b], nodes, a, b, centre) for eid, a, b in to_bend}
    # Tree routes were traced from the parent; every tree edge runs from the child.
    for eid, _, _ in edges:
        if eid.startswith("pcie:") and eid in routes:
            routes[eid] = routes[eid][::-1]
    kept = {e for e, _, _ in edges}
    # NVLink labels sit mid-edge; where two would meet (a quad's diagonals) both move to their
    # source end.
    mids: list[tuple[str, float, float]] = []
    for eid, a, b in edges:
        if eid.startswith("nv:") and eid not in routes and a in positions and b in positions:
            (x0, y0), (x2, y2) = positions[a], positions[b]
            length = math.hypot(x2 - x0, y2 - y0) or 1.0
            bend = bends.get(eid, 0.0) / 2
            mids.append(
                (
                    eid,
                    (x0 + x2) / 2 - (y2 - y0) / length * bend,
                    (y0 + y2) / 2 + (x2 - x0) / length * bend,
                )
            )
    clash = close_labels(mids, 40.0, 16.0)
    # A label mid-way along a bent edge that would sit on a routed line (the PCIe bus above a
    # mesh's top row) moves to its source end too.
    ends = {eid: (a, b) for eid, a, b in edges}
    lines = [
        (p, q)
        for eid, pts in routes.items()
        if eid in kept and all(n in positions for n in ends[eid])
        for full in [[positions[ends[eid][0]], *pts, positions[ends[eid][1]]]]
        for p, q in zip(full, full[1:], strict=False)
    ]
    clash |= labels_on_lines(mids, bends, lines, (20.0, 12.0))
    return Drawing(
        positions,
        sizes,
        {e: pts for e, pts in routes.items() if e in kept},
        {e: b for e, b in bends.items() if b},
        frozenset(clash),
    )


def _drop(
    gpu: tuple[float, float],
    gpu_h: float,
    bar_top: float,
    obstacles: _Obstacles,
    ends: tuple[str, str],
) -> list[tuple[float, float]]:
    """A GPU's route down to the NVSwitch bar: straight down, or, where something stands
    below it, along the gap under the GPU to the nearest free lane and down that."""
    gx, gy = gpu
    if not obstacles.hits((gx, gy), (gx, bar_top), 0.0, ends):
        return [(gx, bar_top)]
    under = gy + gpu_h / 2 + 12.0
    # Right first (the trunk is left); a side whose path under the GPU runs into something is
    # given up: every lane farther that way is behind the same obstacle.
    open_sides = [4.0, -4.0]
    for step in range(1, 120):
        for side in list(open_sides):
            lane = gx + side * step
            if obstacles.hits((gx, under), (lane, under), 0.0, ends):
                open_sides.remove(side)
            elif not obstacles.hits((lane, under), (lane, bar_top), 0.0, ends):
                return [(gx, under), (lane, under), (lane, bar_top)]
        if not open_sides:
            break
    return []


class _Obstacles:
    """Boxes (centre x, y, width, height) for `hits`' question, bent or straight, in work
    bounded by the boxes near each sample rather than by all of them: a 256-GPU NVLink mesh
    tries 4,608 edges at up to 37 bends among hundreds of boxes, and an NVSwitch drop is tested
    against every GPU placed and every lane taken before it. Same answers as `hits`, to the
    last bit: the same samples, computed by the same expressions."""

    CELL_W, CELL_H = 64.0, 128.0  # boxes by their extent, for straight lines
    POINT_W, POINT_H = 32.0, 32.0  # boxes by their margin, for the samples of a bent one

    def __init__(self) -> None:
        self.boxes: list[tuple[str, float, float, float, float]] = []
        self.cells: dict[tuple[int, int], list[int]] = {}
        # Filed on the first bent curve asked about (an NVSwitch drop asks only straight ones).
        self.points: dict[tuple[int, int], list[tuple[str, float, float, float, float]]] = {}
        self.filed = 0  # how many of `boxes` are in `points`

    def add(self, box_id: str, box: tuple[float, float, float, float]) -> None:
        bx, by, bw, bh = box
        self.boxes.append((box_id, bx, by, bw, bh))
        w, h = abs(bw) / 2, abs(bh) / 2
        extent = (bx - w, bx + w, by - h, by + h)
        file_under(self.cells, len(self.boxes) - 1, extent, self.CELL_W, self.CELL_H)

    def _file_points(self) -> None:
        for box_id, bx, by, bw, bh in self.boxes[self.filed :]:
            half_w, half_h = bw / 2 + MARGIN, bh / 2 + MARGIN
            w, h = abs(half_w), abs(half_h)
            entry = (box_id, bx, by, half_w, half_h)
            extent = (bx - w, bx + w, by - h, by + h)
            file_under(self.points, entry, extent, self.POINT_W, self.POINT_H)
        self.filed = len(self.boxes)

    def hits(
        self, p0: tuple[float, float], p2: tuple[float, float], bend: float, skip: tuple[str, str]
    ) -> bool:
        """hits(p0, p2, bend, boxes, skip) over these boxes: each sample tested against the
        boxes whose margin reaches its cell. A sample inside a box's margin lies inside the
        curve's bounding box (the curve stays in the triangle of its ends and control point),
        so the boxes `hits` keeps as near and finds it in are all among them."""
        if bend == 0.0:
            return self._straight(p0, p2, skip)
        if self.filed < len(self.boxes):
            self._file_points()
        (x0, y0), (x2, y2) = p0, p2
        length = math.hypot(x2 - x0, y2 - y0) or 1.0
        nx, ny = -(y2 - y0) / length, (x2 - x0) / length
        cx, cy = (x0 + x2) / 2 + nx * bend, (y0 + y2) / 2 + ny * bend
        steps = max(8, int(length / 12))
        cells, cell_w, cell_h = self.points, self.POINT_W, self.POINT_H
        for s in range(1, steps):
            t = s / steps
            x = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t * t * x2
            y = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y2
            for box_id, bx, by, half_w, half_h in cells.get(
                (math.floor(x / cell_w), math.floor(y / cell_h)), ()
            ):
                if abs(x - bx) < half_w and abs(y - by) < half_h and box_id not in skip:
                    return True
        return False

    def _straight(
        self,
        p0: tuple[float, float],
        p2: tuple[float, float],
        skip: tuple[str, str],
        margin: float = MARGIN,
    ) -> bool:
        """hits(p0, p2, 0.0, boxes, skip, margin) over these boxes: only the samples that can
        fall inside a box near the line are computed (`_inside`)."""
        (x0, y0), (x2, y2) = p0, p2
        length = math.hypot(x2 - x0, y2 - y0) or 1.0
        nx, ny = -(y2 - y0) / length, (x2 - x0) / length
        cx, cy = (x0 + x2) / 2 + nx * 0.0, (y0 + y2) / 2 + ny * 0.0
        left, right = min(x0, x2, cx) - 1.0, max(x0, x2, cx) + 1.0
        low, high = min(y0, y2, cy) - 1.0, max(y0, y2, cy) + 1.0
        steps = max(8, int(length / 12))
        seen: set[int] = set()
        x_span = span(left - margin, right + margin, self.CELL_W)
        for row in span(low - margin, high + margin, self.CELL_H):
            for col in x_span:
                for k in self.cells.get((col, row), ()):
                    if k in seen:
                        continue
                    seen.add(k)
                    i, bx, by, bw, bh = self.boxes[k]
                    if (
                        i in skip
                        or bx + bw / 2 + margin <= left
                        or bx - bw / 2 - margin >= right
                        or by + bh / 2 + margin <= low
                        or by - bh / 2 - margin >= high
                    ):
                        continue
                    if _inside(
                        x0, y0, x2, y2, cx, cy, steps, bx, by, bw / 2 + margin, bh / 2 + margin
                    ):
                        return True
        return False


def _inside(
    x0: float,
    y0: float,
    x2: float,
    y2: float,
    cx: float,
    cy: float,
    steps: int,
    bx: float,
    by: float,
    half_w: float,
    half_h: float,
) -> bool:
    """Whether a sample of hits' straight line (control point cx, cy) falls inside the box."""
    first, last = 1, steps - 1
    # The samples lie on the line p0 + t (p2 - p0) up to rounding (~1e-13 px): only those
    # within a sample of the box's slab on each axis can be inside it.
    for a0, a2, c, half in ((x0, x2, bx, half_w), (y0, y2, by, half_h)):
        d = a2 - a0
        if abs(d) < 1e-6:  # constant along this axis, up to 1e-6
            if abs(a0 - c) > half + 1e-5:
                return False
            continue
        s_low = (c - half - a0) / d * steps
        s_high = (c + half - a0) / d * steps
        if s_low > s_high:
            s_low, s_high = s_high, s_low
        first = max(first, math.floor(s_low) - 1)
        last = min(last, math.ceil(s_high) + 1)
    for s in range(first, last + 1):
        t = s / steps
        x = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t * t * x2
        y = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y2
        if abs(x - bx) < half_w and abs(y - by) < half_h:
            return True
    return False


def _ids(columns: list[_Tree]) -> set[str]:
    out = set()
    for col in columns:
        for item in _walk(col):
            out.add(item.id)
            out.update(m for m, _, _ in item.block)
    return out


def _walk(t: _Tree) -> list[_Tree]:
    out = [t]
    for c in t.children:
        out.extend(_walk(c))
    return out


def hits(
    p0: tuple[float, float],
    p2: tuple[float, float],
    bend: float,
    boxes: dict[str, tuple[float, float, float, float]],
    skip: tuple[str, str],
    margin: float = MARGIN,
) -> bool:
    """Whether the quadratic curve (straight when bend is 0) runs under a node other than
    its ends, or within `margin` of one."""
    (x0, y0), (x2, y2) = p0, p2
    length = math.hypot(x2 - x0, y2 - y0) or 1.0
    nx, ny = -(y2 - y0) / length, (x2 - x0) / length
    cx, cy = (x0 + x2) / 2 + nx * bend, (y0 + y2) / 2 + ny * bend
    # The curve stays inside the triangle of its ends and control point: only boxes near that
    # triangle's bounding box can be hit (bounded work on racks of many GPUs).
    # (widened by a pixel: rounding puts samples of a straight line a hair outside its ends)
    left, right = min(x0, x2, cx) - 1.0, max(x0, x2, cx) + 1.0
    low, high = min(y0, y2, cy) - 1.0, max(y0, y2, cy) + 1.0
    near = [
        (bx, by, bw / 2 + margin, bh / 2 + margin)
        for i, (bx, by, bw, bh) in boxes.items()
        if i not in skip
        and bx + bw / 2 + margin > left
        and bx - bw / 2 - margin < right
        and by + bh / 2 + margin > low
        and by - bh / 2 - margin < high
    ]
    if not near:
        return False
    steps = max(8, int(length / 12))
    for s in range(1, steps):
        t = s / steps
        x = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t * t * x2
        y = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y2
        for bx, by, half_w, half_h in near:
            if abs(x - bx) < half_w and abs(y - by) < half_h:
                return True
    return False


def _bend(
    a: tuple[float, float],
    b: tuple[float, float],
    boxes: _Obstacles,
    ida: str,
    idb: str,
    centre: tuple[float, float],
) -> float:
    """0 for a straight edge that clears every other node; otherwise the smallest bend that
    does, away from the GPUs' centre first; the straight line when none does."""
    if not boxes.hits(a, b, 0.0, (ida, idb)):
        return 0.0
    (x0, y0), (x2, y2) = a, b
    length = math.hypot(x2 - x0, y2 - y0) or 1.0
    nx, ny = -(y2 - y0) / length, (x2 - x0) / length
    mx, my = (x0 + x2) / 2 - centre[0], (y0 + y2) / 2 - centre[1]
    away = 1 if nx * mx + ny * my >= 0 else -1
    for size in range(40, 400, 20):
        for sign in (away, -away):
            if not boxes.hits(a, b, sign * size, (ida, idb)):
                return float(sign * size)
    return 0.0
