"""The structure behind a topo -m matrix: NUMA nodes, PCIe host bridges, switch trees and
switches (by clustering the nested classes SYS > NODE > PHB > PXB > PIX), NIC placement, and
the NVLink fabric (NVSwitch or point-to-point). Contradictions become findings."""

from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from topoweb.core.catalogue import infer_generation
from topoweb.core.model import LINK_CLASS_ORDER, Topology, link_class_rank, nvlink_count

# Not a health finding (core.health): a remark on how the matrix nests, kept with the structure.
NoteSeverity = Literal["info", "warning", "error"]
NodeKind = Literal["numa", "host_bridge", "switch_tree", "switch"]

# Cluster level -> the class two devices in one cluster of that level are nearer than.
_LEVELS: tuple[tuple[NodeKind, str], ...] = (
    ("numa", "SYS"),
    ("host_bridge", "NODE"),
    ("switch_tree", "PHB"),
    ("switch", "PXB"),
)
# The class implied by the finest level two devices share (none shared: SYS).
_IMPLIED = {"numa": "NODE", "host_bridge": "PHB", "switch_tree": "PXB", "switch": "PIX"}


@dataclass(frozen=True)
class StructureNote:
    kind: str  # nesting_violation, numa_affinity_conflict, nvlink_uneven, ...
    severity: NoteSeverity
    devices: tuple[str, ...]
    message: str

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "devices": list(self.devices),
            "message": self.message,
        }


@dataclass(frozen=True)
class PcieNode:
    id: str  # numa0, hb1, tree0, sw2
    kind: NodeKind
    parent: str | None
    devices: tuple[str, ...]  # every device below it
    label: str

    def to_document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "parent": self.parent,
            "devices": list(self.devices),
            "label": self.label,
        }


@dataclass(frozen=True)
class NvlinkDomain:
    """GPUs joined by NVLink. `nvswitch`: each GPU's bundle of `port_links` is shared by all
    its peers; otherwise every NV<k> pair is a dedicated point-to-point bundle."""

    gpus: tuple[str, ...]
    fabric: Literal["nvswitch", "point_to_point"]
    port_links: int  # NV<k> per GPU on NVSwitch; the largest pair bundle otherwise
    reason: str

    def to_document(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus),
            "fabric": self.fabric,
            "port_links": self.port_links,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Hierarchy:
    nodes: tuple[PcieNode, ...]
    parent: dict[str, str] = field(hash=False)  # device id -> the node it hangs off
    nvlink_domains: tuple[NvlinkDomain, ...]
    findings: tuple[StructureNote, ...]

    @functools.cached_property
    def _by_id(self) -> dict[str, PcieNode]:
        return {n.id: n for n in self.nodes}

    @functools.cached_property
    def _chains(self) -> dict[str, tuple[str, ...]]:
        return {}

    def node(self, node_id: str) -> PcieNode:
        return self._by_id[node_id]

    def chain(self, device: str) -> tuple[str, ...]:
        """Nodes from the device's parent up to its NUMA node (memoised: building a cost
        model asks it for every device pair)."""
        got = self._chains.get(device)
        if got is None:
            by_id = self._by_id
            out = [self.parent[device]]
            while (up := by_id[out[-1]].parent) is not None:
                out.append(up)
            got = self._chains[device] = tuple(out)
        return got

    def numa_of(self, device: str) -> str:
        return self.chain(device)[-1]

    def implied_class(self, a: str, b: str) -> str:
        if a == b:
            return "X"
        up_b = set(self.chain(b))
        for node_id in self.chain(a):
            if node_id in up_b:
                return _IMPLIED[self.node(node_id).kind]
        return "SYS"

    def domain_of(self, gpu: str) -> NvlinkDomain | None:
        for d in self.nvlink_domains:
            if gpu in d.gpus:
                return d
        return None

    def to_document(self) -> dict[str, Any]:
        return {
            "nodes": [n.to_document() for n in self.nodes],
            "parent": dict(sorted(self.parent.items())),
            "nvlink_domains": [d.to_document() for d in self.nvlink_domains],
            "findings": [f.to_document() for f in self.findings],
        }


class _Union:
    def __init__(self, items: list[str]) -> None:
        self.up = {i: i for i in items}

    def find(self, x: str) -> str:
        while self.up[x] != x:
            self.up[x] = self.up[self.up[x]]
            x = self.up[x]
        return x

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.up[ra] = rb

    def groups(self, order: list[str]) -> list[tuple[str, ...]]:
        seen: dict[str, list[str]] = {}
        for i in order:
            seen.setdefault(self.find(i), []).append(i)
        return [tuple(g) for g in seen.values()]


def _numa_value(value: str | None) -> str | None:
    """A single NUMA node number, or None for N/A, ranges and lists."""
    if value is None or not value.strip().isdigit():
        return None
    return value.strip()


def recover_hierarchy(
    topo: Topology, gpu_model: str | None = None, nvswitch: bool | None = None
) -> Hierarchy:
    """Cluster the matrix into its PCIe/NUMA tree and NVLink fabric.

    NVLink cells hide the PCIe relation of a pair; such pairs are placed by the other
    evidence (shared NICs, NUMA affinity). `nvswitch` is NVML's word (remote device type
    SWITCH) where the collector had it; it overrides the inference from link counts."""
    ids = [d.id for d in topo.devices]
    known: list[tuple[str, str, int]] = []
    rank_of: dict[str, int] = {}  # a matrix repeats a handful of classes; -1 for NVLink
    for lnk in topo.links:
        rank = rank_of.get(lnk.link_class)
        if rank is None:
            c = lnk.link_class
            rank = rank_of[c] = -1 if nvlink_count(c) else link_class_rank(c)
        if rank >= 0:
            known.append((lnk.a, lnk.b, rank))
    findings: list[StructureNote] = []

    # The levels nest, so one union-find grows from the finest (PIX) to the NUMA level,
    # taking each level's clusters on the way: one pass over the links, not one per level.
    clusters: dict[NodeKind, list[tuple[str, ...]]] = {}
    roots: dict[NodeKind, dict[str, str]] = {}
    by_rank: dict[int, list[tuple[str, str, int]]] = {}
    for item in known:
        by_rank.setdefault(item[2], []).append(item)
    uf = _Union(ids)
    joined = -1  # every rank up to this one is joined
    for level_kind, bound in reversed(_LEVELS):
        limit = link_class_rank(bound)
        for rank in range(joined + 1, limit):
            for a, b, _ in by_rank.get(rank, ()):
                uf.join(a, b)
        joined = limit - 1
        if level_kind == "numa":
            _join_by_numa_affinity(topo, uf, known, findings)
        clusters[level_kind] = uf.groups(ids)
        roots[level_kind] = {d: uf.find(d) for d in ids}

    # A set that clusters at several levels (a PIX pair is also its own switch tree and host
    # bridge group) is one node, of the finest kind: the others add no shared resource.
    # NUMA nodes always stand on their own: they carry the socket link.
    finest_kind: dict[tuple[str, ...], NodeKind] = {}
    for level_kind, _bound in _LEVELS[1:]:
        for members in clusters[level_kind]:
            if len(members) >= 2:
                finest_kind[members] = level_kind
    nodes: list[PcieNode] = []
    numa_of = {d.id: d.numa_affinity for d in topo.devices}
    owner: dict[str, str] = {}  # device -> finest node created so far
    counters: dict[str, int] = {}
    prefixes = {"numa": "numa", "host_bridge": "hb", "switch_tree": "tree", "switch": "sw"}
    created: set[tuple[str, ...]] = set()
    for level, _bound in _LEVELS:
        for members in clusters[level]:
            if level != "numa" and (members in created or len(members) < 2):
                continue
            kind: NodeKind = "numa"
            if level != "numa":
                created.add(members)
                kind = finest_kind[members]
            n = counters.get(kind, 0)
            counters[kind] = n + 1
            node_id = f"{prefixes[kind]}{n}"
            up = owner.get(members[0]) if level != "numa" else None
            label = _label(topo, kind, n, members, numa_of)
            nodes.append(PcieNode(node_id, kind, up, members, label))
            for m in members:
                owner[m] = node_id
    parent = {d: owner[d] for d in ids}

    # The class two devices' finest shared cluster implies (as Hierarchy.implied_class
    # reads it from the nodes), against the class the matrix prints.
    sw, tree, hb, numa = (roots[k] for k in ("switch", "switch_tree", "host_bridge", "numa"))
    pix, pxb, phb, node, sys_rank = (
        link_class_rank(c) for c in ("PIX", "PXB", "PHB", "NODE", "SYS")
    )
    for a, b, rank in known:
        if sw[a] == sw[b]:
            implied_rank = pix
        elif tree[a] == tree[b]:
            implied_rank = pxb
        elif hb[a] == hb[b]:
            implied_rank = phb
        elif numa[a] == numa[b]:
            implied_rank = node
        else:
            implied_rank = sys_rank
        if implied_rank != rank:
            implied = LINK_CLASS_ORDER[implied_rank]
            actual = topo.link_class(a, b)
            findings.append(
                StructureNote(
                    "nesting_violation",
                    "warning",
                    (a, b),
                    f"{a}-{b} is {actual} but the other cells put them {implied} apart: "
                    "the classes do not nest (modelled as " + implied + ")",
                )
            )
    domains = _nvlink_domains(topo, gpu_model, nvswitch, findings)
    return Hierarchy(tuple(nodes), parent, domains, tuple(findings))


def _label(
    topo: Topology,
    kind: NodeKind,
    n: int,
    members: tuple[str, ...],
    numa_of: dict[str, str | None] | None = None,
) -> str:
    if kind == "numa":
        if numa_of is None:
            numa_of = {d.id: d.numa_affinity for d in topo.devices}
        values = {_numa_value(numa_of[m]) for m in members} - {None}
        if len(values) == 1:
            return f"NUMA node {values.pop()}"
        return f"NUMA group {n} (inferred from the matrix)"
    names = {
        "host_bridge": "PCIe host bridge",
        "switch_tree": "PCIe switch tree",
        "switch": "PCIe switch",
    }
    return f"{names[kind]} {n}"


def _join_by_numa_affinity(
    topo: Topology, uf: _Union, known: list[tuple[str, str, int]], findings: list[StructureNote]
) -> None:
    """Devices the matrix leaves unplaced (all NVLink, no NIC) join by their NUMA column;
    where the column would put two devices the matrix holds SYS apart into one node, the
    matrix wins and the disagreement is a finding."""
    by_value: dict[str, list[str]] = {}
    for d in topo.devices:
        value = _numa_value(d.numa_affinity)
        if value is not None:
            by_value.setdefault(value, []).append(d.id)
    if all(len({uf.find(m) for m in members}) == 1 for members in by_value.values()):
        return  # the matrix already groups every NUMA value: nothing to join
    sys_rank = link_class_rank("SYS")
    sys_pairs = [(a, b) for a, b, r in known if r == sys_rank]
    # Which current clusters the matrix holds SYS apart, kept up to date as clusters join.
    apart: dict[str, set[str]] = {}
    root = {d.id: uf.find(d.id) for d in topo.devices}
    for a, b in sys_pairs:
        ra, rb = root[a], root[b]
        if ra != rb:
            apart.setdefault(ra, set()).add(rb)
            apart.setdefault(rb, set()).add(ra)
    # For naming a clash: each cluster's members and each device's SYS peers, so that the
    # first SYS pair (in matrix order) between two clusters costs the smaller one's peers,
    # not a scan of every SYS pair (a 576-GPU ring has 165,000 of them).
    order = {pair: k for k, pair in enumerate(sys_pairs)}
    sys_peers: dict[str, list[str]] = {}
    for a, b in sys_pairs:
        sys_peers.setdefault(a, []).append(b)
        sys_peers.setdefault(b, []).append(a)
    members_of: dict[str, list[str]] = {}
    for d in topo.devices:
        members_of.setdefault(root[d.id], []).append(d.id)

    def first_sys_pair(first: str, second: str) -> tuple[str, str]:
        small, large = sorted((first, second), key=lambda r: len(members_of[r]))
        pairs = (
            (a, b) if (a, b) in order else (b, a)
            for a in members_of[small]
            for b in sys_peers.get(a, ())
            if uf.find(b) == large
        )
        return min(pairs, key=order.__getitem__)

    for value, members in by_value.items():
        for i, other in enumerate(members[1:], start=1):
            for earlier in members[:i]:
                first, second = uf.find(earlier), uf.find(other)
                if first == second:
                    break
                if second not in apart.get(first, ()):
                    uf.join(earlier, other)
                    merged = uf.find(earlier)
                    members_of[merged] += members_of.pop(second if merged == first else first)
                    both = apart.pop(first, set()) | apart.pop(second, set())
                    for x in both:
                        peers = apart[x]
                        peers.discard(first)
                        peers.discard(second)
                        peers.add(merged)
                    if both:
                        apart[merged] = both
                    break
                if earlier == members[0]:
                    clash = first_sys_pair(first, second)
                    findings.append(
                        StructureNote(
                            "numa_affinity_conflict",
                            "warning",
                            (earlier, other),
                            f"{earlier} and {other} both report NUMA affinity {value} but the "
                            f"matrix puts them on different NUMA nodes ({clash[0]}-{clash[1]} "
                            "is SYS); the matrix is followed",
                        )
                    )


_LINK_CLASS = operator.attrgetter("link_class")
_LINK_END_A = operator.attrgetter("a")


def _nvlink_components(topo: Topology, gpu_ids: list[str], nv_classes: set[str]) -> dict[str, str]:
    """Each GPU's NVLink-connected group, named by its first GPU: a walk over the class rows
    that stops once every GPU is placed (one row on an NVSwitch domain)."""
    gpus = set(gpu_ids)
    root_of: dict[str, str] = {}
    for first in gpu_ids:
        if first in root_of:
            continue
        root_of[first] = first
        stack = [first]
        while stack and len(root_of) < len(gpu_ids):
            here = stack.pop()
            for peer, cls in topo.class_row(here).items():
                if cls in nv_classes and peer not in root_of and peer in gpus:
                    root_of[peer] = first
                    stack.append(peer)
    return root_of


def _nvlink_domains(
    topo: Topology, gpu_model: str | None, nvswitch: bool | None, findings: list[StructureNote]
) -> tuple[NvlinkDomain, ...]:
    gpu_ids = [g.id for g in topo.gpus]
    gpu_links = tuple(topo.gpu_links())  # read three times below
    nv_classes = {c for c in set(map(_LINK_CLASS, gpu_links)) if nvlink_count(c)}
    root_of = _nvlink_components(topo, gpu_ids, nv_classes)
    links_per_gpu = infer_generation(topo, gpu_model).generation.links_per_gpu
    # Per domain (named by its root), its NVLink pairs and the bundle sizes among them, counted
    # in C: a 576-GPU domain has 165,600 of them.
    nv = [lnk for lnk in gpu_links if lnk.link_class in nv_classes]
    roots = list(map(root_of.__getitem__, map(_LINK_END_A, nv)))
    pairs = Counter(roots)
    bundles: dict[str, set[int]] = {}
    for root, cls in set(zip(roots, map(_LINK_CLASS, nv), strict=True)):
        bundles.setdefault(root, set()).add(nvlink_count(cls))
    groups: dict[str, list[str]] = {}
    for g in gpu_ids:
        groups.setdefault(root_of[g], []).append(g)
    domains = []
    for group in groups.values():
        members = tuple(group)
        if len(members) < 2:
            continue
        root = root_of[members[0]]
        m = len(members)
        # A pair of the domain without NVLink counts as NV0.
        counts = sorted(bundles[root] | ({0} if pairs[root] < m * (m - 1) // 2 else set()))
        complete = 0 not in counts
        k = counts[-1]
        if nvswitch is not None:
            fabric = "nvswitch" if nvswitch else "point_to_point"
            reason = "NVML reports the remote NVLink device type as " + (
                "SWITCH" if nvswitch else "GPU"
            )
        elif complete and len(counts) == 1 and k * (len(members) - 1) > max(links_per_gpu, 1):
            fabric = "nvswitch"
            reason = (
                f"every pair shows NV{k} and {k} x {len(members) - 1} peers exceeds the "
                f"{links_per_gpu} NVLinks one GPU has: the bundle is a switch port"
            )
        else:
            fabric = "point_to_point"
            reason = (
                "pairs differ (" + "/".join(f"NV{c}" for c in counts if c) + ")"
                if len(counts) > 1
                else f"NV{k} x {len(members) - 1} peers fits in {links_per_gpu} links per GPU"
            )
            reason += ": each NV<k> pair is a dedicated bundle"
        if fabric == "nvswitch" and len(counts) > 1:
            low = [
                f"{a}-{b}"
                for i, a in enumerate(members)
                for b in members[i + 1 :]
                if topo.link(a, b).nvlinks < k
            ]
            findings.append(
                StructureNote(
                    "nvlink_uneven",
                    "warning",
                    members,
                    f"NVSwitch domain with fewer than NV{k} on {', '.join(low)}",
                )
            )
        domains.append(NvlinkDomain(members, fabric, k, reason))  # type: ignore[arg-type]
    return tuple(domains)
