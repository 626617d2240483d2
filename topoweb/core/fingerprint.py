"""Canonical topology hash, invariant to device renumbering; the hash of a topology as numbered
(`wiring_sha256`); and a one-line link summary.

A topology is a complete graph whose vertices are devices coloured by kind (gpu/nic) and whose
edges are coloured by link class. Two topologies get the same fingerprint exactly when such
graphs are isomorphic. Affinity strings, NIC names and device ids are left out: they describe
the host's numbering and cpusets, not its wiring.

The canonical form is found in two exact steps:
1. Twin reduction. Devices u, v of one kind are twins when every other device sees them through
   the same class; twins are interchangeable (swapping them is an automorphism) and the twin
   relation is an equivalence. Each twin class becomes one vertex coloured (kind, size, class
   between its members); the graph is rebuilt from that quotient, so the quotients are
   isomorphic iff the topologies are. An NVSwitch all-to-all collapses to one vertex here.
2. The canonical order of the quotient (`core.automorphism`, the one automorphism search:
   individualisation-refinement, as nauty and bliss do it); the certificate is the vertex
   colours and the upper triangle of classes in that order.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections import Counter
from collections.abc import Mapping
from typing import Any

import orjson

from topoweb.core import automorphism
from topoweb.core.model import Link, Topology, link_class_rank, nvlink_count

FINGERPRINT_VERSION = 1


def topology_fingerprint(topo: Topology) -> str:
    """sha256 hex of the canonical form: equal for renumbered copies, different otherwise."""
    form = canonical_form(topo)
    payload = json.dumps(form, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# A fleet reports the same few wirings over and over: each one's fingerprint is worked out once
# per process, kept by its wiring digest (which covers every device and link the fingerprint
# reads); a topology as the key would be hashed, all its links, on every report.
_FINGERPRINTS: dict[str, str] = {}
_FINGERPRINTS_KEPT = 1024


def fingerprint_of_wiring(topo: Topology, wiring: str) -> str:
    """topology_fingerprint(topo), where `wiring` is wiring_sha256 of topo's document."""
    found = _FINGERPRINTS.get(wiring)
    if found is None:
        found = topology_fingerprint(topo)
        if len(_FINGERPRINTS) < _FINGERPRINTS_KEPT:
            _FINGERPRINTS[wiring] = found
    return found


def wiring_sha256(document: Mapping[str, Any]) -> str:
    """sha256 hex of a topology document as numbered: its devices, links and details, not the
    reader's warnings. Equal for two servers wired and numbered alike whatever else their
    reports carried (serial numbers, kernels, warnings), so they can share one cost model;
    the fingerprint, which forgets the numbering, cannot stand in for it. Key order does not
    count (a database may give a stored document back reordered)."""
    wiring = {key: value for key, value in document.items() if key != "warnings"}
    # orjson writes what json.dumps(separators=(",", ":"), sort_keys=True) writes for ASCII
    # text, integers, lists and plain decimals (a topology's links, most of the document) at a
    # fraction of the cost; other text is hashed as before (json.dumps escapes non-ASCII).
    try:
        fast = orjson.dumps(wiring, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # an integer past 64 bits: json.dumps takes it
        fast = "é".encode()
    if fast.isascii():
        return hashlib.sha256(fast).hexdigest()
    payload = json.dumps(wiring, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def nvlink_fabric(topo: Topology) -> Topology:
    """Only the GPUs, with every PCIe path called SYS: the NVLink wiring alone. Its
    fingerprint tells whether two servers have the same NVLink mesh up to GPU numbering."""
    links = tuple(
        Link(lnk.a, lnk.b, lnk.link_class if lnk.is_nvlink else "SYS") for lnk in topo.gpu_links()
    )
    return Topology(topo.gpus, links)


def canonical_form(topo: Topology) -> dict[str, object]:
    """The renumbering-invariant description the fingerprint hashes (readable, for debugging)."""
    classes, groups, quotient, colours, _ = _quotient(topo)
    order = automorphism.canonical_order(quotient, colours)
    return {
        "version": FINGERPRINT_VERSION,
        "groups": [list(groups[i]) for i in order],
        "links": [classes[quotient[a][b]] for n, a in enumerate(order) for b in order[n + 1 :]],
    }


def canonical_order(topo: Topology) -> tuple[str, ...]:
    """Device ids in canonical order: renumbered copies list corresponding devices alike
    (up to swapping twins, which are interchangeable)."""
    _, _, quotient, colours, members = _quotient(topo)
    return tuple(
        topo.devices[m].id
        for i in automorphism.canonical_order(quotient, colours)
        for m in members[i]
    )


def nvlink_summary(topology: Topology) -> str:
    """NVLink bundles between GPU pairs, e.g. "NV1 x8, NV2 x8"; empty without NVLink."""
    # Every class counted in C, then the NVLink ones kept: a 576-GPU domain has 165,600 pairs.
    counts = Counter(map(operator.attrgetter("link_class"), topology.gpu_links()))
    nvlink = [(cls, n) for cls, n in counts.items() if nvlink_count(cls)]
    return ", ".join(f"{cls} x{n}" for cls, n in sorted(nvlink, key=lambda kv: int(kv[0][2:])))


def describe_links(topo: Topology) -> str:
    """A short summary such as `8x GPU, NV18 all-to-all, 12 NICs (PXB/NODE/SYS)`."""
    gpus = topo.gpus
    parts = [f"{len(gpus)}x GPU"]
    gpu_classes = [lnk.link_class for lnk in topo.gpu_links()]
    if gpu_classes:
        distinct = _ordered(set(gpu_classes))
        nv = [c for c in distinct if nvlink_count(c)]
        if len(distinct) == 1:
            parts.append(f"{distinct[0]} all-to-all" if nv else f"PCIe {distinct[0]} only")
        elif not nv:
            parts.append("PCIe only (" + "/".join(distinct) + ")")
        else:
            nv_pairs = sum(1 for c in gpu_classes if nvlink_count(c))
            pcie = [c for c in distinct if not nvlink_count(c)]
            text = "/".join(nv) + f" NVLink on {nv_pairs} of {len(gpu_classes)} pairs"
            parts.append(text + (", rest " + "/".join(pcie) if pcie else ""))
    nics = topo.nics
    if nics:
        gpu_ids = {g.id for g in gpus}
        nic_ids = {n.id for n in nics}
        to_gpu = {
            lnk.link_class
            for lnk in topo.links
            if (lnk.a in gpu_ids and lnk.b in nic_ids) or (lnk.b in gpu_ids and lnk.a in nic_ids)
        }
        label = f"{len(nics)} NIC" + ("s" if len(nics) > 1 else "")
        parts.append(label + (" (" + "/".join(_ordered(to_gpu)) + ")" if to_gpu else ""))
    else:
        parts.append("no NICs")
    return ", ".join(parts)


def _ordered(classes: set[str]) -> list[str]:
    return sorted(classes, key=lambda c: (link_class_rank(c), -nvlink_count(c)))


# --- step 1: twin quotient --------------------------------------------------------------


_Group = tuple[str, int, str | None]  # kind, number of twins, class between them


def _quotient(
    topo: Topology,
) -> tuple[list[str], list[_Group], list[list[int]], list[int], list[list[int]]]:
    """Class names, twin groups, quotient matrix, vertex colours and members of each group."""
    devices = topo.devices
    n = len(devices)
    ids = [d.id for d in devices]
    classes = sorted({lnk.link_class for lnk in topo.links})
    code = {c: i for i, c in enumerate(classes)}
    diagonal = len(classes)
    matrix = [[diagonal] * n for _ in range(n)]
    position = {device_id: i for i, device_id in enumerate(ids)}
    for lnk in topo.links:
        a, b = position[lnk.a], position[lnk.b]
        matrix[a][b] = matrix[b][a] = code[lnk.link_class]

    # Twins have equal sorted rows, so only those are compared, one representative per class.
    by_signature: dict[tuple[str, tuple[int, ...]], list[list[int]]] = {}
    for v in range(n):
        key = (devices[v].kind, tuple(sorted(matrix[v])))
        classes_here = by_signature.setdefault(key, [])
        for twin_class in classes_here:
            if automorphism.are_twins(matrix, twin_class[0], v):
                twin_class.append(v)
                break
        else:
            classes_here.append([v])
    members = sorted((m for group in by_signature.values() for m in group), key=lambda g: g[0])

    groups: list[_Group] = []
    for group in members:
        inner = classes[matrix[group[0]][group[1]]] if len(group) > 1 else None
        groups.append((devices[group[0]].kind, len(group), inner))
    keys = sorted(set(groups), key=lambda k: (k[0], k[1], k[2] or ""))
    colour_of = {k: i for i, k in enumerate(keys)}
    colours = [colour_of[g] for g in groups]
    quotient = [[matrix[a[0]][b[0]] for b in members] for a in members]
    return classes, groups, quotient, colours, members
