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
2. Individualisation-refinement (the method of nauty/bliss) on the quotient: colour refinement
   to a stable partition, then for the first non-singleton cell each vertex is singled out in
   turn and refined again, down to discrete partitions (leaves). Every leaf orders the vertices;
   the certificate is the vertex colours and the upper triangle of classes in that order, and
   the canonical form is the least certificate over all leaves. The search is exhaustive; it
   only skips subtrees that an automorphism it has proved maps onto one already searched (twins
   in a cell, orbits of found automorphisms that fix the current path, and the subtree above a
   leaf equal to the first or best leaf), so the minimum is never missed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from topoweb.core.model import Link, Topology, link_class_rank, nvlink_count

FINGERPRINT_VERSION = 1
_MAX_GENERATORS = 64  # automorphisms kept for orbit pruning; more only prunes more

Certificate = tuple[int, ...]


def topology_fingerprint(topo: Topology) -> str:
    """sha256 hex of the canonical form: equal for renumbered copies, different otherwise."""
    form = canonical_form(topo)
    payload = json.dumps(form, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def wiring_sha256(document: Mapping[str, Any]) -> str:
    """sha256 hex of a topology document as numbered: its devices, links and details, not the
    reader's warnings. Equal for two servers wired and numbered alike whatever else their
    reports carried (serial numbers, kernels, warnings), so they can share one cost model;
    the fingerprint, which forgets the numbering, cannot stand in for it. Key order does not
    count (a database may give a stored document back reordered)."""
    wiring = {key: value for key, value in document.items() if key != "warnings"}
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
    order = _canonical_order(quotient, colours)
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
        topo.devices[m].id for i in _canonical_order(quotient, colours) for m in members[i]
    )


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
            if _are_twins(matrix, twin_class[0], v):
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


def _are_twins(matrix: list[list[int]], u: int, v: int) -> bool:
    row_u, row_v = list(matrix[u]), list(matrix[v])
    row_u[u] = row_u[v] = row_v[u] = row_v[v] = -1
    return row_u == row_v


# --- step 2: individualisation-refinement -------------------------------------------------

Cells = list[list[int]]  # an ordered partition of the vertices; cell lists are never mutated


def _refine(matrix: list[list[int]], cells: Cells, splitters: Cells, kinds: int) -> Cells:
    """Refine `cells` until equitable: every vertex of a cell sees each cell through the same
    classes the same number of times. A split cell is replaced, in place, by its fragments in
    the order of their count vectors, so the result commutes with renumbering. Only cells that
    changed are used as splitters, so refining after singling out one vertex is near linear.
    `splitters` must be cells of `cells` (the same list objects)."""
    n = len(matrix)
    queue = list(splitters)
    queued = {id(c) for c in queue}
    while queue and len(cells) < n:
        splitter = queue.pop(0)
        queued.discard(id(splitter))
        counts = [[0] * kinds for _ in range(n)]
        for s in splitter:
            row = matrix[s]
            for u in range(n):
                counts[u][row[u]] += 1
        refined: Cells = []
        for cell in cells:
            if len(cell) == 1:
                refined.append(cell)
                continue
            groups: dict[tuple[int, ...], list[int]] = {}
            for u in cell:
                groups.setdefault(tuple(counts[u]), []).append(u)
            if len(groups) == 1:
                refined.append(cell)
                continue
            fragments = [groups[key] for key in sorted(groups)]
            refined.extend(fragments)
            if id(cell) in queued:
                queued.discard(id(cell))
                queue = [q for q in queue if q is not cell]
            queue.extend(fragments)
            queued.update(id(f) for f in fragments)
        cells = refined
    return cells


class _Search:
    def __init__(self, matrix: list[list[int]], colours: list[int]) -> None:
        self.matrix = matrix
        self.base = colours
        self.kinds = max(max(row) for row in matrix) + 1
        self.first: tuple[Certificate, list[int], list[int]] | None = None
        self.best: tuple[Certificate, list[int], list[int]] | None = None
        self.generators: list[list[int]] = []
        self.twin_of = self._twins(matrix, colours)

    @staticmethod
    def _twins(matrix: list[list[int]], colours: list[int]) -> list[int]:
        """Smallest twin of each vertex in the quotient (equal colour, same edges to others)."""
        n = len(colours)
        twin_of = list(range(n))
        for v in range(n):
            for u in range(v):
                if twin_of[u] == u and colours[u] == colours[v] and _are_twins(matrix, u, v):
                    twin_of[v] = u
                    break
        return twin_of

    def run(self) -> list[int]:
        by_colour: dict[int, list[int]] = {}
        for v, c in enumerate(self.base):
            by_colour.setdefault(c, []).append(v)
        cells = [by_colour[c] for c in sorted(by_colour)]
        self.node(_refine(self.matrix, cells, cells, self.kinds), [])
        assert self.best is not None
        return self.best[1]

    def node(self, cells: Cells, path: list[int]) -> int | None:
        """Search below an equitable partition; returns a level to jump back to when an
        automorphism shows that the rest of an ancestor's child repeats a searched one."""
        target_index = next((i for i, c in enumerate(cells) if len(c) > 1), None)
        if target_index is None:
            return self.leaf([c[0] for c in cells], path)
        target = cells[target_index]
        level = len(path)
        tried: list[int] = []
        for v in target:
            if any(self.twin_of[v] == self.twin_of[u] for u in tried):
                continue
            if tried and self._in_orbit(v, tried, path):
                continue
            single = [v]
            rest = [u for u in target if u != v]
            child = cells[:target_index] + [single, rest] + cells[target_index + 1 :]
            jump = self.node(_refine(self.matrix, child, [single], self.kinds), path + [v])
            if jump is not None and jump < level:
                return jump
            tried.append(v)
        return None

    def leaf(self, order: list[int], path: list[int]) -> int | None:
        cert = tuple(self.base[v] for v in order) + tuple(
            self.matrix[a][b] for i, a in enumerate(order) for b in order[i + 1 :]
        )
        if self.first is None:
            self.first = self.best = (cert, order, path)
            return None
        assert self.best is not None
        for known in (self.first, self.best):
            if cert == known[0]:
                return self._automorphism(known, order, path)
        if cert < self.best[0]:
            self.best = (cert, order, path)
        return None

    def _automorphism(
        self, known: tuple[Certificate, list[int], list[int]], order: list[int], path: list[int]
    ) -> int | None:
        """Record the automorphism taking a known leaf to this one; the level to jump to."""
        gamma = [0] * len(order)
        for a, b in zip(known[1], order, strict=True):
            gamma[a] = b
        if len(self.generators) < _MAX_GENERATORS:
            self.generators.append(gamma)
        other = known[2]
        level = 0
        while level < min(len(path), len(other)) and path[level] == other[level]:
            level += 1
        # gamma maps the known leaf's subtree at `level` onto ours only if it fixes the shared
        # prefix and sends the known path's next vertex to ours: checked, never assumed.
        if level < min(len(path), len(other)) and all(
            gamma[other[i]] == path[i] for i in range(level + 1)
        ):
            return level
        return None

    def _in_orbit(self, v: int, tried: list[int], path: list[int]) -> bool:
        """Whether an automorphism fixing the path pointwise maps a tried vertex to v."""
        usable = [g for g in self.generators if all(g[p] == p for p in path)]
        if not usable:
            return False
        orbit = set(tried)
        frontier = list(tried)
        while frontier:
            x = frontier.pop()
            for g in usable:
                y = g[x]
                if y not in orbit:
                    orbit.add(y)
                    frontier.append(y)
        return v in orbit


def _canonical_order(matrix: list[list[int]], colours: list[int]) -> list[int]:
    if not colours:
        return []
    if len(colours) == 1:
        return [0]
    return _Search(matrix, colours).run()
