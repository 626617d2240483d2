"""Exports of a topology for the browser: Cytoscape.js elements of the recovered structure and
a device x device class matrix for the heatmap."""

from __future__ import annotations

from typing import Any

from topoweb.core.catalogue import Hardware, resolve_hardware
from topoweb.core.hierarchy import Hierarchy, recover_hierarchy
from topoweb.core.model import Topology


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


def cytoscape_elements(
    topo: Topology, hierarchy: Hierarchy | None = None, hardware: Hardware | None = None
) -> list[dict[str, Any]]:
    """Nodes: GPUs and NICs inside compound NUMA nodes, PCIe switch / host bridge nodes, one
    NVSwitch node per switched NVLink domain. Edges: NVLink (to the NVSwitch, or pair to pair
    with `nvlinks`), and PCIe along the recovered tree. Bandwidths are effective, per
    direction."""
    h = hierarchy or recover_hierarchy(topo)
    hw = hardware or resolve_hardware(topo)
    out: list[dict[str, Any]] = []
    for node in h.nodes:
        data: dict[str, Any] = {"id": node.id, "label": node.label, "kind": node.kind}
        if node.kind == "numa":
            out.append({"group": "nodes", "data": data})
        else:
            out.append({"group": "nodes", "data": {**data, "parent": h.numa_of(node.devices[0])}})
    for d in topo.devices:
        out.append(
            {
                "group": "nodes",
                "data": {
                    "id": d.id,
                    "label": (d.nic_name or d.id) if d.kind == "nic" else d.id,
                    "kind": d.kind,
                    "numa": d.numa_affinity,
                    "cpu_affinity": d.cpu_affinity,
                    "nic_name": d.nic_name,
                    "parent": h.numa_of(d.id),
                },
            }
        )
    pcie_lat = hw.latency("pcie")
    for item, up in sorted(h.parent.items()):
        out.append(_edge(f"pcie:{item}", item, up, "PCIe", hw.pcie_gbps, pcie_lat))
    for node in h.nodes:
        if node.parent is not None:
            out.append(
                _edge(f"pcie:{node.id}", node.id, node.parent, "PCIe", hw.pcie_gbps, pcie_lat)
            )
    numa_ids = [n.id for n in h.nodes if n.kind == "numa"]
    for i, a in enumerate(numa_ids):
        for b in numa_ids[i + 1 :]:
            out.append(
                _edge(
                    f"sys:{a}:{b}",
                    a,
                    b,
                    "SYS",
                    hw.socket_gbps,
                    hw.latency("socket"),
                    label=hw.socket_link,
                )
            )
    nv_lat = hw.latency("nvlink")
    for k, domain in enumerate(h.nvlink_domains):
        if domain.fabric == "nvswitch":
            sw = f"nvswitch{k}"
            out.append(
                {
                    "group": "nodes",
                    "data": {"id": sw, "label": "NVSwitch fabric", "kind": "nvswitch"},
                }
            )
            for g in domain.gpus:
                out.append(
                    _edge(
                        f"nv:{g}:{sw}",
                        g,
                        sw,
                        f"NV{domain.port_links}",
                        domain.port_links * hw.nvlink_per_link_gbps,
                        nv_lat,
                        nvlinks=domain.port_links,
                    )
                )
        else:
            for i, a in enumerate(domain.gpus):
                for b in domain.gpus[i + 1 :]:
                    lnk = topo.link(a, b)
                    if lnk.is_nvlink:
                        out.append(
                            _edge(
                                f"nv:{a}:{b}",
                                a,
                                b,
                                lnk.link_class,
                                lnk.nvlinks * hw.nvlink_per_link_gbps,
                                nv_lat,
                                nvlinks=lnk.nvlinks,
                            )
                        )
    return out


def matrix_view(topo: Topology) -> dict[str, Any]:
    """Device ids and the class of every ordered pair ("X" on the diagonal), for a heatmap."""
    ids = [d.id for d in topo.devices]
    return {"devices": ids, "classes": [[topo.link_class(a, b) for b in ids] for a in ids]}
