"""Exports of a topology for the browser: Cytoscape.js elements of the recovered structure and
a device x device class matrix for the heatmap."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from typing import Any

from topoweb.core.catalogue import Hardware, resolve_hardware
from topoweb.core.graphstyle import nvlink_width
from topoweb.core.hierarchy import Hierarchy, recover_hierarchy
from topoweb.core.layout import (
    COLLAPSE_FROM,
    Drawing,
    cpu_id,
    draw,
    nic_groups,
    node_size,
    numa_order,
)
from topoweb.core.model import Topology, link_class_rank


def _edge(
    eid: str, a: str, b: str, link_class: str, bw: float, lat: float, **extra: Any
) -> dict[str, Any]:
    return {
        "group": "edges",
        "data": {
            "id": eid,
            "source": a,
            "target": b,
            "link_class": link_class,
            "bandwidth_gbps_per_direction": round(bw, 2),
            "latency_us": lat,
            **extra,
        },
    }


_SHORT = {"host_bridge": "Host bridge ", "switch_tree": "Switch tree ", "switch": "Switch "}


def _numa_labels(h: Hierarchy, order: list[str]) -> dict[str, str]:
    """The box titles, made unique: two boxes the matrix splits but whose devices claim the
    same NUMA node say which part they are."""
    labels = {n: h.node(n).label for n in order}
    for n in order:
        same = [m for m in order if labels[m] == h.node(n).label]
        if len(same) > 1:
            for i, m in enumerate(same, start=1):
                labels[m] = f"{h.node(n).label} (part {i} of {len(same)})"
    return labels


def _name_range(names: list[str]) -> str:
    """NIC0, NIC1, NIC2, NIC35 -> "NIC0–2, NIC35"."""
    out: list[str] = []
    run: list[tuple[str, int]] = []

    def flush() -> None:
        if run:
            first, last = run[0], run[-1]
            out.append(f"{first[0]}{first[1]}" + (f"–{last[1]}" if len(run) > 1 else ""))
            run.clear()

    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if m is None:
            flush()
            out.append(name)
            continue
        prefix, number = m.group(1), int(m.group(2))
        if run and (run[-1][0] != prefix or run[-1][1] + 1 != number):
            flush()
        run.append((prefix, number))
    flush()
    return ", ".join(out)


def _nic_label(topo: Topology, device_id: str) -> str:
    d = topo.device(device_id)
    return (d.nic_name or d.id) if d.kind == "nic" else d.id


def cytoscape_elements(
    topo: Topology,
    hierarchy: Hierarchy | None = None,
    hardware: Hardware | None = None,
    *,
    collapsed: bool | None = None,
) -> list[dict[str, Any]]:
    """Nodes: GPUs and NICs inside compound NUMA nodes, each box topped by its CPU, PCIe switch
    / host bridge nodes, one NVSwitch node per switched NVLink domain, NIC groups. Edges:
    NVLink (to the NVSwitch, or pair to pair with `nvlinks`), PCIe along the recovered tree,
    the socket link between CPUs. Bandwidths are effective, per direction.

    Every node has a `position` from `core.layout` (draw it with Cytoscape's preset layout)
    and `width`/`height` in its data; elements shown only with NIC groups collapsed (or only
    expanded) carry `mode`, and nodes placed differently in the other mode `alt_position`.
    `collapsed` None: groups start collapsed on servers with many NICs."""
    elements: list[dict[str, Any]] = graph_document(topo, hierarchy, hardware, collapsed=collapsed)[
        "elements"
    ]
    return elements


def graph_document(
    topo: Topology,
    hierarchy: Hierarchy | None = None,
    hardware: Hardware | None = None,
    *,
    collapsed: bool | None = None,
    gpu_model: str | None = None,
    pcie: tuple[int, int] | None = None,
    cpu_model: str | None = None,
) -> dict[str, Any]:
    """The graph the pages draw: `elements` (see cytoscape_elements), `paths` (per GPU, the
    elements on the real path to every other device, by its link class), `nic_groups`
    (whether there are groups, and whether they start collapsed) and `figures` (where the
    links' bandwidth and latency come from: the catalogue's generation and what was assumed).
    `gpu_model`: the name the server reported, read as the analysis reads it (without it the
    generation is guessed from the matrix); `pcie`: its links' generation and width as NVML
    reports them (core.costs.pcie_capability, as the health expectations read them), else the
    generation's usual ones, assumed; `cpu_model`: the host's CPU as the collector reads it,
    which names the socket link (as the health expectations read it)."""
    h = hierarchy or recover_hierarchy(topo)
    gen, width = pcie if pcie else (None, 16)
    hw = hardware or resolve_hardware(
        topo, gpu_model or None, pcie_gen=gen, pcie_width=width, cpu_model=cpu_model
    )
    groups = nic_groups(topo, h)
    if collapsed is None:
        collapsed = bool(groups) and len(topo.nics) >= COLLAPSE_FROM
    numas = numa_order(topo, h)
    box_label = _numa_labels(h, numas)
    labels: dict[str, tuple[str, str]] = {}
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def node(data: dict[str, Any]) -> None:
        nodes.append({"group": "nodes", "data": data})

    for n in numas:
        node({"id": n, "label": box_label[n], "kind": "numa"})
        # The box's full title stays in its data; on the CPU node the inference is one word.
        title = box_label[n].replace(" (inferred from the matrix)", "\n(inferred)")
        labels[cpu_id(n)] = ("cpu", f"CPU\n{title}")
        node({"id": cpu_id(n), "label": labels[cpu_id(n)][1], "kind": "cpu", "parent": n})
    for pn in h.nodes:
        if pn.kind != "numa":
            short = _SHORT[pn.kind] + pn.label.rsplit(" ", 1)[-1]
            labels[pn.id] = ("pcie", short)
            node(
                {
                    "id": pn.id,
                    "label": short,
                    "name": pn.label,
                    "kind": pn.kind,
                    "parent": h.numa_of(pn.devices[0]),
                }
            )
    group_of: dict[str, str] = {}
    for p, nics in groups.items():
        numa = h.numa_of(nics[0])
        names = _name_range([_nic_label(topo, n) for n in nics])
        label = f"{len(nics)} NICs\n{names}"
        labels[f"nicgroup:{p}"] = ("group", label)
        node(
            {
                "id": f"nicgroup:{p}",
                "label": label,
                "kind": "nic_group",
                "parent": numa,
                "mode": "collapsed",
                "members": nics,
            }
        )
        node(
            {
                "id": f"nicbox:{p}",
                "label": f"{len(nics)} NICs on {h.node(p).label}",
                "kind": "nic_box",
                "parent": numa,
                "mode": "expanded",
            }
        )
        for nic in nics:
            group_of[nic] = p
    for d in topo.devices:
        label = _nic_label(topo, d.id)
        labels[d.id] = (d.kind, label)
        data: dict[str, Any] = {
            "id": d.id,
            "label": label,
            "kind": d.kind,
            "numa": d.numa_affinity,
            "cpu_affinity": d.cpu_affinity,
            "nic_name": d.nic_name,
            "parent": h.numa_of(d.id),
        }
        if d.id in group_of:
            data["parent"] = f"nicbox:{group_of[d.id]}"
            data["mode"] = "expanded"
        node(data)

    def drawn(node_id: str) -> str:
        return cpu_id(node_id) if h.node(node_id).kind == "numa" else node_id

    pcie_lat = hw.latency("pcie")
    for item, up in sorted(h.parent.items()):
        extra: dict[str, Any] = {}
        if item in group_of:
            extra = {"in_group": True}
        edges.append(
            _edge(f"pcie:{item}", item, drawn(up), "PCIe", hw.pcie_gbps, pcie_lat, **extra)
        )
    for p in groups:
        for kind, mode in (("nicgroup", "collapsed"), ("nicbox", "expanded")):
            edges.append(
                _edge(
                    f"pcie:{kind}:{p}", f"{kind}:{p}", p, "PCIe", hw.pcie_gbps, pcie_lat, mode=mode
                )
            )
    for pn in h.nodes:
        if pn.parent is not None:
            edges.append(
                _edge(f"pcie:{pn.id}", pn.id, drawn(pn.parent), "PCIe", hw.pcie_gbps, pcie_lat)
            )
    # topo -m names no CPU: the socket link is then the GPU generation's usual platform, a
    # guess the drawing says is one.
    assumed = hw.socket_assumed
    link_name = f"{hw.socket_link} (assumed)" if assumed else hw.socket_link
    socket: dict[str, Any] = {"label": link_name}
    if assumed:
        socket["assumed"] = f"{hw.socket_link}: the usual platform of {hw.generation.name} GPUs"
    sys_edges: dict[frozenset[str], list[str]] = {}
    if len(numas) == 2:
        a, b = (cpu_id(n) for n in numas)
        edges.append(
            _edge(
                f"sys:{numas[0]}:{numas[1]}",
                a,
                b,
                "SYS",
                hw.socket_gbps,
                hw.latency("socket"),
                **socket,
                caption=f"SYS · {link_name}",
            )
        )
        sys_edges[frozenset(numas)] = [f"sys:{numas[0]}:{numas[1]}"]
    elif len(numas) > 2:
        labels["socket-link"] = ("interconnect", f"CPU interconnect · {link_name}")
        node(
            {
                "id": "socket-link",
                "label": labels["socket-link"][1],
                "kind": "interconnect",
                **({"assumed": socket["assumed"]} if assumed else {}),
            }
        )
        for n in numas:
            edges.append(
                _edge(
                    f"sys:{n}",
                    cpu_id(n),
                    "socket-link",
                    "SYS",
                    hw.socket_gbps,
                    hw.latency("socket"),
                    **socket,
                )
            )
        for i, a in enumerate(numas):
            for b in numas[i + 1 :]:
                sys_edges[frozenset((a, b))] = [f"sys:{a}", "socket-link", f"sys:{b}"]
    nv_lat = hw.latency("nvlink")
    nv_path: dict[frozenset[str], list[str]] = {}
    fabric_of: dict[str, str] = {}  # a GPU on an NVSwitch fabric -> the fabric's node
    for k, domain in enumerate(h.nvlink_domains):
        if domain.fabric == "nvswitch":
            sw = f"nvswitch{k}"
            labels[sw] = ("nvswitch", "NVSwitch fabric")
            # topo -m names no switch: the fabric is read from the bundles, and says how.
            known = domain.reason.startswith("NVML")
            inferred = {} if known else {"inferred": domain.reason}
            node({"id": sw, "label": "NVSwitch fabric", "kind": "nvswitch", **inferred})
            for g in domain.gpus:
                edges.append(
                    _edge(
                        f"nv:{g}:{sw}",
                        g,
                        sw,
                        f"NV{domain.port_links}",
                        domain.port_links * hw.nvlink_per_link_gbps,
                        nv_lat,
                        nvlinks=domain.port_links,
                        line_width=nvlink_width(domain.port_links),
                        fabric=True,
                    )
                )
            for g in domain.gpus:
                fabric_of[g] = sw
        else:
            for i, a in enumerate(domain.gpus):
                for b in domain.gpus[i + 1 :]:
                    lnk = topo.link(a, b)
                    if lnk.is_nvlink:
                        edges.append(
                            _edge(
                                f"nv:{a}:{b}",
                                a,
                                b,
                                lnk.link_class,
                                lnk.nvlinks * hw.nvlink_per_link_gbps,
                                nv_lat,
                                nvlinks=lnk.nvlinks,
                                line_width=nvlink_width(lnk.nvlinks),
                            )
                        )
                        nv_path[frozenset((a, b))] = [f"nv:{a}:{b}"]

    def layout(mode_collapsed: bool) -> Any:
        wanted = "collapsed" if mode_collapsed else "expanded"
        shown = {n["data"]["id"] for n in nodes if n["data"].get("mode", wanted) == wanted}
        names = {i: v for i, v in labels.items() if i in shown}
        routed = [
            (e["data"]["id"], e["data"]["source"], e["data"]["target"])
            for e in edges
            if e["data"].get("mode", wanted) == wanted and not e["data"].get("in_group")
        ]
        return draw(topo, h, names, routed, mode_collapsed)

    main = layout(collapsed)
    other = layout(not collapsed) if groups else None
    for el in nodes:
        nd: dict[str, Any] = el["data"]
        if nd["kind"] == "nic_box":  # a compound: Cytoscape sizes it round its NICs
            continue
        if nd["id"] in main.positions:
            x, y = main.positions[nd["id"]]
            el["position"] = {"x": x, "y": y}
        elif other is not None and nd["id"] in other.positions:
            x, y = other.positions[nd["id"]]
            el["position"] = {"x": x, "y": y}
        if nd["id"] in labels:
            kind = labels[nd["id"]][0]
            w, hh = main.sizes.get(nd["id"]) or node_size(kind, labels[nd["id"]][1])
            nd["width"], nd["height"] = w, hh
        if other is not None and nd["id"] in other.positions and "position" in el:
            x, y = other.positions[nd["id"]]
            if (x, y) != (el["position"]["x"], el["position"]["y"]):
                nd["alt_position"] = {"x": x, "y": y}
            alt_w = other.sizes.get(nd["id"], (nd.get("width"), 0.0))[0]
            if alt_w != nd.get("width"):
                nd["alt_width"] = alt_w
    here = "collapsed" if collapsed else "expanded"
    for e in edges:
        data = e["data"]
        drawing = main if data.get("mode", here) == here else other
        if drawing is None:
            continue
        _route(data, drawing, "")
        if data["id"] in drawing.source_labels:
            data["label_at_source"] = True
        if other is not None and drawing is main:
            _route(data, other, "alt_")
    paths = _paths(topo, h, numas, group_of, sys_edges, nv_path, fabric_of)
    return {
        "elements": nodes + edges,
        "paths": paths,
        "nic_groups": {"present": bool(groups), "collapsed": collapsed},
        "figures": {
            "generation": hw.generation.name,
            "basis": hw.assumption
            + (f"; PCIe Gen{gen} x{width} as NVML reports the GPUs' links" if pcie else ""),
        },
    }


def _route(data: dict[str, Any], drawing: Drawing, prefix: str) -> None:
    """An edge's route in a drawing: `route` (corner points), or `bend`; neither: straight."""
    eid = data["id"]
    if eid in drawing.routes:
        data[prefix + "route"] = [[x, y] for x, y in drawing.routes[eid]]
    elif eid in drawing.bends:
        data[prefix + "bend"] = drawing.bends[eid]
    elif prefix:
        data[prefix + "route"] = []


def _paths(
    topo: Topology,
    h: Hierarchy,
    numas: list[str],
    group_of: dict[str, str],
    sys_edges: dict[frozenset[str], list[str]],
    nv_path: dict[frozenset[str], list[str]],
    fabric_of: dict[str, str],
) -> dict[str, list[dict[str, Any]]]:
    """Per GPU, nearest first, for every other device: its link class and the drawn elements
    on the real path: the NVLink edge for an NV class, else up the PCIe tree to the nearest
    shared node and down, across the socket link for SYS. The peers on the GPU's NVSwitch
    fabric are one row, `{"class", "fabric"}`: every other GPU joined to the fabric node, each
    over GPU, nv:GPU:fabric, fabric, nv:peer:fabric, peer; where the fabric's pairs differ in
    class (NVML's fabric with a degraded link), one such row per class, naming its `peers`.
    (A row a peer made the document quadratic in GPUs: 43 MB for a 576-GPU domain.)"""

    # Each device's way up and each chain's nodes, worked out once: every pair reads them.
    ups: dict[str, list[str]] = {}
    above: dict[str, set[str]] = {}

    def up(device: str) -> list[str]:
        """Element ids from the device up to its CPU, edges and nodes alternating (not to be
        changed by the caller: one list per device)."""
        found = ups.get(device)
        if found is None:
            found = ups[device] = _up(device)
        return found

    def _up(device: str) -> list[str]:
        out = [device]
        if device in group_of:
            p = group_of[device]
            out += [f"nicgroup:{p}", f"pcie:nicgroup:{p}", f"nicbox:{p}", f"pcie:nicbox:{p}"]
        out.append(f"pcie:{device}")
        for node_id in h.chain(device):
            node = h.node(node_id)
            if node.kind == "numa":
                out.append(cpu_id(node_id))
            else:
                out += [node_id, f"pcie:{node_id}"]
        return out

    def shared(a: str, b: str) -> str | None:
        up_b = above.get(b)
        if up_b is None:
            up_b = above[b] = set(h.chain(b))
        for node_id in h.chain(a):
            if node_id in up_b:
                return cpu_id(node_id) if h.node(node_id).kind == "numa" else node_id
        return None

    def cut(chain: list[str], at: str) -> list[str]:
        return chain[: chain.index(at) + 1]

    # Per fabric: its GPUs in device order, the devices off it, and its pairs' classes (one
    # pass over the GPU pairs; one class on every pair is the rule).
    members: dict[str, list[str]] = {}
    for d in topo.devices:
        if d.id in fabric_of:
            members.setdefault(fabric_of[d.id], []).append(d.id)
    off = {sw: [d for d in topo.devices if fabric_of.get(d.id) != sw] for sw in members}
    classes: dict[str, set[str]] = {sw: set() for sw in members}
    if fabric_of:
        for lnk in topo.gpu_links():
            sw = fabric_of.get(lnk.a)
            if sw is not None and fabric_of.get(lnk.b) == sw:
                classes[sw].add(lnk.link_class)

    def fabric_rows(g: str, sw: str) -> list[dict[str, Any]]:
        if len(classes[sw]) == 1:  # every other GPU on the fabric, by the one class
            return [{"class": next(iter(classes[sw])), "fabric": sw}]
        peers: dict[str, list[str]] = {}
        for m in members[sw]:
            if m != g:
                peers.setdefault(topo.link_class(g, m), []).append(m)
        return [{"class": c, "fabric": sw, "peers": ps} for c, ps in peers.items()]

    out: dict[str, list[dict[str, Any]]] = {}
    for g in topo.gpus:
        rows = []
        sw = fabric_of.get(g.id)
        if sw is not None:
            rows += fabric_rows(g.id, sw)
        for d in topo.devices if sw is None else off[sw]:
            if d.id == g.id:
                continue
            cls = topo.link_class(g.id, d.id)
            key = frozenset((g.id, d.id))
            if key in nv_path:
                elements = [g.id, *nv_path[key], d.id]
            else:
                common = shared(g.id, d.id)
                if common is not None:
                    elements = cut(up(g.id), common) + cut(up(d.id), common)[:-1]
                else:
                    across = sys_edges.get(frozenset((h.numa_of(g.id), h.numa_of(d.id))), [])
                    elements = up(g.id) + across + up(d.id)
            rows.append({"peer": d.id, "class": cls, "elements": list(dict.fromkeys(elements))})
        out[g.id] = sorted(rows, key=lambda r: link_class_rank(r["class"]))
    return out


def matrix_view(topo: Topology) -> dict[str, Any]:
    """Device ids and the class of every ordered pair ("X" on the diagonal), for a heatmap."""
    ids = [d.id for d in topo.devices]
    return {"devices": ids, "classes": [[topo.link_class(a, b) for b in ids] for a in ids]}


_P2P_KEYS = {
    "uni": "unidirectional_p2p_enabled_gbps",
    "bi": "bidirectional_p2p_enabled_gbps",
}
GOOD_RATIO, FAIR_RATIO = 0.8, 0.5  # measured / expected: at least good, at least fair, else poor


def matrix_document(
    topo: Topology,
    p2p: dict[str, Any] | None = None,
    expected: Mapping[tuple[int, int], float] | None = None,
) -> dict[str, Any]:
    """Everything the matrix view shows, per ordered device pair: the link class, and per
    direction ("uni", "bi") that a p2pBandwidthLatencyTest document measured, the measured
    GB/s, the pair's expectation, their ratio and its grade (good >= 80 %, fair >= 50 %,
    else poor). `expected`: each ordered GPU pair's one expectation per direction (GB/s, by
    GPU index), as core.health.judged_pairs gives it; both directions together for "bi".
    Cells that are not a GPU pair are None."""
    ids = [d.id for d in topo.devices]
    labels = [_nic_label(topo, i) for i in ids]
    index = {d.id: d.index for d in topo.gpus}
    out: dict[str, Any] = {
        "devices": ids,
        "labels": labels,
        "classes": [[row[b] for b in ids] for row in map(topo.class_row, ids)],
        "directions": {},
    }
    matrices = (p2p or {}).get("matrices") or {}
    pairs = expected or {}
    for direction, measured_key in _P2P_KEYS.items():
        measured = matrices.get(measured_key)
        if not measured:
            continue

        def cell(grid: Any, a: str, b: str) -> float | None:
            i, j = index.get(a), index.get(b)
            if grid is None or i is None or j is None or a == b:
                return None
            if i >= len(grid) or j >= len(grid[i]) or grid[i][j] is None:
                return None
            return float(grid[i][j])

        def want(a: str, b: str, both: bool = direction == "bi") -> float | None:
            i, j = index.get(a), index.get(b)
            if i is None or j is None or a == b:
                return None
            there = pairs.get((i, j))
            if not both or there is None:
                return there
            back = pairs.get((j, i))
            return None if back is None else round(there + back, 4)

        got = [[cell(measured, a, b) for b in ids] for a in ids]
        wanted = [[want(a, b) for b in ids] for a in ids]
        ratio = [
            [round(g / w, 3) if g is not None and w else None for g, w in zip(gr, wr, strict=True)]
            for gr, wr in zip(got, wanted, strict=True)
        ]
        grade = [
            [
                None
                if r is None
                else "good"
                if r >= GOOD_RATIO
                else "fair"
                if r >= FAIR_RATIO
                else "poor"
                for r in row
            ]
            for row in ratio
        ]
        values = [v for row in got for v in row if v is not None]
        out["directions"][direction] = {
            "measured_gbps": got,
            "expected_gbps": wanted if pairs else None,
            "ratio": ratio if pairs else None,
            "grade": grade if pairs else None,
            "max_measured_gbps": max(values) if values else None,
        }
    return out


def matrix_csv(doc: dict[str, Any], mode: str = "class", direction: str = "uni") -> str:
    """One matrix of a matrix_document as CSV: link classes, or measured GB/s or the
    measured/expected ratio of one direction (empty where not measured)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    labels = doc["labels"]
    writer.writerow(["", *labels])
    grid: list[list[Any]] = doc["classes"]
    if mode != "class":
        found = doc["directions"].get(direction)
        key = "measured_gbps" if mode == "measured" else "ratio"
        grid = (found or {}).get(key) or [[None] * len(labels) for _ in labels]
    for label, row in zip(labels, grid, strict=True):
        writer.writerow([label, *("" if v is None else v for v in row)])
    return buf.getvalue()


def device_details(topo: Topology, affinity: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """What the selection panel shows for each device: rows of (name, value), and for a GPU
    its affinity warning and binding hint. The nearest NICs come from the affinity advice."""
    gpus = {g["gpu"]: (i, g) for i, g in enumerate((affinity or {}).get("gpus") or [])}
    hints = (affinity or {}).get("binding_hints") or []
    out: dict[str, dict[str, Any]] = {}
    gpu_ids = [g.id for g in topo.gpus]
    for d in topo.devices:
        rows: list[list[str]] = [["Device", _nic_label(topo, d.id)], ["Kind", d.kind]]
        found = gpus.get(d.index) if d.kind == "gpu" else None
        aff = found[1] if found else None
        rows.append(["NUMA node", str((aff or {}).get("numa_node") or d.numa_affinity or "–")])
        rows.append(["CPU list", str((aff or {}).get("cpu_list") or d.cpu_affinity or "–")])
        if d.gpu_numa_id:
            rows.append(["GPU NUMA ID", d.gpu_numa_id])
        entry: dict[str, Any] = {"rows": rows, "warning": None, "hint": None}
        if d.kind == "gpu":
            if aff is not None:
                nics = aff.get("nearest_nics") or []
                nearest = ", ".join(f"{n} ({aff.get('nic_class')})" for n in nics) or "none"
            else:
                nearest = "–"
            rows.append(["Nearest NIC", nearest])
            by_class: dict[str, int] = {}
            classes = topo.class_row(d.id)
            for other in gpu_ids:
                if other != d.id:
                    cls = classes[other]
                    by_class[cls] = by_class.get(cls, 0) + 1
            peers = sorted(by_class.items(), key=lambda kv: link_class_rank(kv[0]))
            rows.append(["GPU peers", " · ".join(f"{c}: {n}" for c, n in peers) or "–"])
            if aff is not None:
                entry["warning"] = aff.get("warning")
                i = found[0] if found else -1
                if 0 <= i < len(hints):
                    entry["hint"] = re.sub(r"^GPU\d+:\s*", "", hints[i])
        out[d.id] = entry
    return out
