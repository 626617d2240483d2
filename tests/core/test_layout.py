"""The server-side drawing: positions from the recovered hierarchy, the same every time, no
overlapping boxes, paths by link class, and the SVG export of the same picture."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from topoweb.core.export import graph_document
from topoweb.core.formats import parse_text
from topoweb.core.hierarchy import recover_hierarchy
from topoweb.core.layout import hits
from topoweb.core.model import Device, Link, Topology
from topoweb.core.svg import graph_svg

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DGX1 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"
H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
H20 = "topo_38_h20-8gpu-36nic-MANGLED-tab-expansion-merged-cells.txt"
DGX_A100 = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
A100_SPLIT = "topo_28_a100-8gpu-nv12-4nic-pxb-pix-numaid.txt"
V100_TWO_BOXES = "topo_31_v100-8gpu-alt-mesh-2mlx5-slurm-noise-lines.txt"
ALL_TOPOLOGIES = sorted(p.name for p in FIXTURES.glob("topo_*.txt"))


def topology(name: str) -> Topology:
    parsed = parse_text((FIXTURES / name).read_text(encoding="utf-8"))
    assert isinstance(parsed, Topology)
    return parsed


def nodes(doc: dict[str, Any], mode: str) -> dict[str, dict[str, Any]]:
    """Drawn leaf nodes of one NIC mode: id -> data with its position in that mode."""
    first = "collapsed" if doc["nic_groups"]["collapsed"] else "expanded"
    out = {}
    for e in doc["elements"]:
        d = e["data"]
        if e["group"] != "nodes" or d["kind"] in ("numa", "nic_box"):
            continue
        if d.get("mode", mode) != mode:
            continue
        pos = d["alt_position"] if mode != first and "alt_position" in d else e["position"]
        width = d["alt_width"] if mode != first and "alt_width" in d else d["width"]
        out[d["id"]] = {**d, "x": pos["x"], "y": pos["y"], "width": width}
    return out


def box(d: dict[str, Any]) -> tuple[float, float, float, float]:
    return (
        d["x"] - d["width"] / 2,
        d["y"] - d["height"] / 2,
        d["x"] + d["width"] / 2,
        d["y"] + d["height"] / 2,
    )


def overlapping(drawn: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for (a, da), (b, db) in combinations(drawn.items(), 2):
        p, q = box(da), box(db)
        if p[0] < q[2] and q[0] < p[2] and p[1] < q[3] and q[1] < p[3]:
            out.append((a, b))
    return out


def test_the_same_topology_gives_byte_identical_drawings() -> None:
    first = json.dumps(graph_document(topology(H200)), sort_keys=True)
    again = json.dumps(graph_document(topology(H200)), sort_keys=True)
    assert first == again


@pytest.mark.parametrize("name", ALL_TOPOLOGIES)
def test_no_two_node_boxes_overlap_in_either_nic_mode(name: str) -> None:
    doc = graph_document(topology(name))
    modes = ["collapsed", "expanded"] if doc["nic_groups"]["present"] else ["expanded"]
    for mode in modes:
        assert overlapping(nodes(doc, mode)) == []


@pytest.mark.parametrize("name", [DGX_A100, A100_SPLIT])
def test_numa_boxes_sit_side_by_side_in_numa_order_under_distinct_titles(name: str) -> None:
    doc = graph_document(topology(name))
    drawn = nodes(doc, "expanded")
    cpus = sorted((d for d in drawn.values() if d["kind"] == "cpu"), key=lambda d: d["x"])
    titles = [d["label"] for d in cpus]
    assert len(set(titles)) == len(titles)
    # Every device of a box lies between its CPU's neighbours: the boxes do not interleave.
    owner = {d["id"]: d["parent"] for d in drawn.values() if d["kind"] in ("gpu", "nic")}
    spans = {}
    for dev, numa in owner.items():
        x = drawn[dev]["x"]
        lo, hi = spans.get(numa, (x, x))
        spans[numa] = (min(lo, x), max(hi, x))
    ordered = sorted(spans.values())
    assert all(a[1] < b[0] for a, b in zip(ordered, ordered[1:], strict=False))


def test_the_dgx_a100_boxes_follow_the_numa_numbers_not_the_matrix_order() -> None:
    drawn = nodes(graph_document(topology(DGX_A100)), "expanded")
    cpus = sorted((d for d in drawn.values() if d["kind"] == "cpu"), key=lambda d: d["x"])
    assert [c["label"].split("\n")[1] for c in cpus[:4]] == [
        "NUMA node 1",
        "NUMA node 3",
        "NUMA node 5",
        "NUMA node 7",
    ]


def test_a_numa_node_the_matrix_splits_gets_two_distinct_titles() -> None:
    drawn = nodes(graph_document(topology(A100_SPLIT)), "expanded")
    titles = sorted(d["label"] for d in drawn.values() if d["kind"] == "cpu")
    assert titles == [
        "CPU\nNUMA node 0 (part 1 of 2)",
        "CPU\nNUMA node 0 (part 2 of 2)",
        "CPU\nNUMA node 1",
    ]


@pytest.mark.parametrize("name", [DGX1, V100_TWO_BOXES])
def test_a_hybrid_cube_mesh_is_two_quads_with_cross_links_between_mirrored_corners(
    name: str,
) -> None:
    topo = topology(name)
    drawn = nodes(graph_document(topo), "expanded")
    gpus = [g.id for g in topo.gpus]
    rows = sorted({drawn[g]["y"] for g in gpus})
    assert len(rows) == 2  # two rows of four
    left = sorted(gpus, key=lambda g: drawn[g]["x"])[:4]
    assert {topo.link(a, b).is_nvlink for a, b in combinations(left, 2)} == {True}
    for g in left:
        (partner,) = [o for o in gpus if o not in left and topo.link(g, o).is_nvlink]
        assert drawn[partner]["y"] == drawn[g]["y"]  # each cross link stays in its row


def test_an_nvswitch_box_hangs_every_gpu_off_one_fabric_node_below_them() -> None:
    doc = graph_document(topology(H200))
    drawn = nodes(doc, "expanded")
    fabric = [d for d in drawn.values() if d["kind"] == "nvswitch"]
    assert len(fabric) == 1
    assert all(fabric[0]["y"] > drawn[f"GPU{i}"]["y"] for i in range(8))


def test_the_36_nic_server_groups_nine_nics_per_switch_and_starts_collapsed() -> None:
    doc = graph_document(topology(H20))
    assert doc["nic_groups"] == {"present": True, "collapsed": True}
    collapsed = nodes(doc, "collapsed")
    groups = [d for d in collapsed.values() if d["kind"] == "nic_group"]
    assert len(groups) == 4
    assert {len(g["members"]) for g in groups} == {9}
    assert not [d for d in collapsed.values() if d["kind"] == "nic"]
    assert len([d for d in nodes(doc, "expanded").values() if d["kind"] == "nic"]) == 36


def paths_of(doc: dict[str, Any], gpu: str) -> dict[str, dict[str, Any]]:
    return {p["peer"]: p for p in doc["paths"][gpu]}


def test_a_node_peer_on_a_dgx1_is_reached_through_the_host_not_over_nvlink_hops() -> None:
    topo = topology(DGX1)
    doc = graph_document(topo)
    to = paths_of(doc, "GPU0")
    assert topo.link_class("GPU0", "GPU5") == "NODE"
    assert to["GPU5"]["class"] == "NODE"
    assert to["GPU5"]["elements"] == ["GPU0", "pcie:GPU0", "numa0-cpu", "GPU5", "pcie:GPU5"]
    assert to["GPU1"]["elements"] == ["GPU0", "nv:GPU0:GPU1", "GPU1"]


def test_paths_list_peers_nearest_first_and_cross_the_socket_link_for_sys() -> None:
    doc = graph_document(topology(H200))
    rows = doc["paths"]["GPU0"]
    # The NVSwitch peers are one row: every other GPU joined to the fabric node, each over
    # its edge to the fabric (the page expands it); then one row per NIC.
    assert rows[0] == {"class": "NV18", "fabric": "nvswitch0"}
    assert rows[-1]["class"] == "SYS"
    assert len(rows) == 1 + 12
    to = {p["peer"]: p for p in rows[1:]}
    assert "sys:numa0:numa1" in to["NIC6"]["elements"]
    every_id = {e["data"]["id"] for e in doc["elements"]}
    assert {f"nv:GPU{i}:nvswitch0" for i in range(8)} <= every_id
    assert all(
        set(p["elements"]) <= every_id
        for rows in doc["paths"].values()
        for p in rows
        if "fabric" not in p
    )


def test_a_fabric_whose_pairs_differ_in_class_names_the_peers_of_each_class() -> None:
    # NVML says NVSwitch; GPU0-GPU1 shows one bundle short (a degraded link).
    devices = tuple(Device(f"GPU{i}", "gpu", i) for i in range(4))
    links = tuple(
        Link(f"GPU{a}", f"GPU{b}", "NV12" if (a, b) == (0, 1) else "NV18")
        for a in range(4)
        for b in range(a + 1, 4)
    )
    topo = Topology(devices, links)
    doc = graph_document(topo, recover_hierarchy(topo, "NVIDIA H100 80GB HBM3", nvswitch=True))
    assert doc["paths"]["GPU0"] == [
        {"class": "NV12", "fabric": "nvswitch0", "peers": ["GPU1"]},
        {"class": "NV18", "fabric": "nvswitch0", "peers": ["GPU2", "GPU3"]},
    ]
    assert doc["paths"]["GPU2"] == [
        {"class": "NV18", "fabric": "nvswitch0", "peers": ["GPU0", "GPU1", "GPU3"]}
    ]


def test_tree_edges_carry_orthogonal_routes_from_the_child_to_its_parent() -> None:
    doc = graph_document(topology(H200))
    by_id = {e["data"]["id"]: e for e in doc["elements"]}
    route = by_id["pcie:GPU0"]["data"]["route"]
    gpu, switch = by_id["GPU0"]["position"], by_id["tree0"]["position"]
    assert route[0][1] < gpu["y"]  # leaves the GPU upwards
    assert route[-1][0] == switch["x"]  # and climbs the switch's trunk
    for (x1, y1), (x2, y2) in zip(route, route[1:], strict=False):
        assert x1 == x2 or y1 == y2


def test_the_svg_export_draws_the_same_nodes_at_the_same_places() -> None:
    doc = graph_document(topology(DGX1))
    svg = graph_svg(doc, title="dgx1")
    assert svg.startswith("<svg xmlns=")
    assert svg.count('class="node gpu"') == 8
    assert svg.count('class="edge"') == sum(1 for e in doc["elements"] if e["group"] == "edges")
    gpu0 = next(e for e in doc["elements"] if e["data"]["id"] == "GPU0")
    left = gpu0["position"]["x"] - gpu0["data"]["width"] / 2
    assert f'<rect x="{left:g}"' in svg
    assert graph_svg(doc, title="dgx1") == svg


def test_the_svg_of_the_36_nic_server_can_show_every_nic() -> None:
    doc = graph_document(topology(H20))
    assert graph_svg(doc).count('class="node nic"') == 0
    assert graph_svg(doc, collapsed=False).count('class="node nic"') == 36


@pytest.mark.parametrize("name", ALL_TOPOLOGIES)
def test_no_edge_runs_under_a_node_it_does_not_join(name: str) -> None:
    doc = graph_document(topology(name))
    first = "collapsed" if doc["nic_groups"]["collapsed"] else "expanded"
    modes = ["collapsed", "expanded"] if doc["nic_groups"]["present"] else [first]
    for mode in modes:
        other = mode != first
        drawn = nodes(doc, mode)
        boxes = {i: (d["x"], d["y"], d["width"], d["height"]) for i, d in drawn.items()}
        under = []
        for e in doc["elements"]:
            d = e["data"]
            if e["group"] != "edges" or d.get("mode", mode) != mode or d.get("in_group"):
                continue
            if d["source"] not in drawn or d["target"] not in drawn:
                continue  # an edge into a NIC group's box
            ends = (d["source"], d["target"])
            a = (drawn[ends[0]]["x"], drawn[ends[0]]["y"])
            b = (drawn[ends[1]]["x"], drawn[ends[1]]["y"])
            route = d.get("alt_route") if other and "alt_route" in d else d.get("route")
            bend = d.get("alt_bend") if other and "alt_bend" in d else d.get("bend", 0.0)
            if route:
                points = [a, *(tuple(p) for p in route), b]
                hit = any(
                    hits(p, q, 0.0, boxes, ends, margin=0.5)
                    for p, q in zip(points, points[1:], strict=False)
                )
            else:
                hit = hits(a, b, bend or 0.0, boxes, ends, margin=0.5)
            if hit:
                under.append(d["id"])
        assert under == [], mode
