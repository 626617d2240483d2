"""One topology from two sources of one server: `nvidia-smi topo -m` (the driver's classes) and
an NCCL topology XML (PCIe speeds, NIC ports, NVLink targets). The matrix keeps the final word
on devices and classes; the XML adds its details; where they disagree the merged topology
lists the contradiction, which health turns into a finding."""

from __future__ import annotations

from typing import Any

from topoweb.core.model import Device, Topology

# NCCL's XML has no host bridge: it cannot tell PHB from NODE, so they do not contradict.
_SAME = {frozenset(("PHB", "NODE"))}


def _match(matrix: Topology, xml: Topology) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """matrix id -> XML id: GPUs by position (both number them in PCI bus order), NICs by
    name. What matches nothing is a contradiction."""
    found: list[dict[str, Any]] = []
    pairs: dict[str, str] = {}
    mg, xg = sorted(matrix.gpus, key=lambda d: d.index), sorted(xml.gpus, key=lambda d: d.index)
    for a, b in zip(mg, xg, strict=False):
        pairs[a.id] = b.id
    if len(mg) != len(xg):
        found.append(
            _contradiction(
                [d.id for d in mg[len(xg) :]],
                f"topo -m shows {len(mg)} GPUs, the NCCL XML {len(xg)}",
                matrix=len(mg),
                xml=len(xg),
            )
        )
    by_name = {d.nic_name: d for d in xml.nics if d.nic_name}
    missing = []
    for n in matrix.nics:
        other = by_name.get(n.nic_name) if n.nic_name else None
        if other is None:
            missing.append(n)
        else:
            pairs[n.id] = other.id
    if missing:
        names = ", ".join(d.nic_name or d.id for d in missing)
        found.append(
            _contradiction(
                [d.id for d in missing],
                f"NIC(s) {names} in topo -m are not in the NCCL XML",
            )
        )
    return pairs, found


def _contradiction(devices: list[str], message: str, **evidence: Any) -> dict[str, Any]:
    return {"devices": devices, "message": message, **evidence}


def _numa(d: Device) -> str | None:
    return d.numa_affinity if d.numa_affinity and d.numa_affinity.isdigit() else None


def merge_sources(matrix: Topology, xml: Topology) -> Topology:
    """The matrix with the XML's details and, in `details["contradictions"]`, every device or
    pair the two sources describe differently."""
    pairs, found = _match(matrix, xml)
    for d in matrix.gpus:
        other = pairs.get(d.id)
        if other is None:
            continue
        a, b = _numa(d), _numa(xml.device(other))
        if a is not None and b is not None and a != b:
            found.append(
                _contradiction(
                    [d.id],
                    f"{d.id} is on NUMA node {a} in topo -m but {b} in the NCCL XML",
                    matrix=a,
                    xml=b,
                )
            )
    for link in matrix.links:
        xa, xb = pairs.get(link.a), pairs.get(link.b)
        if xa is None or xb is None:
            continue
        theirs = xml.link_class(xa, xb)
        if theirs != link.link_class and frozenset((theirs, link.link_class)) not in _SAME:
            found.append(
                _contradiction(
                    [link.a, link.b],
                    f"{link.a}-{link.b} is {link.link_class} in topo -m "
                    f"but {theirs} in the NCCL XML",
                    matrix=link.link_class,
                    xml=theirs,
                )
            )
    xml_devices = xml.details.get("devices", {}) if isinstance(xml.details, dict) else {}
    details = {
        **{k: v for k, v in xml.details.items() if k != "devices"},
        "source": "topo -m + nccl-topology-xml",
        "devices": {mid: xml_devices[xid] for mid, xid in pairs.items() if xid in xml_devices},
        "xml_ids": pairs,
        "contradictions": found,
    }
    warnings = matrix.warnings + tuple(f"NCCL XML: {w}" for w in xml.warnings)
    return Topology(matrix.devices, matrix.links, warnings, details)
