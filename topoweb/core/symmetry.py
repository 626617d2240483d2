"""Symmetries of a server's GPUs as the cost model sees them: relabellings that keep every
GPU pair's link class (NVLink count, PCIe class), the PCIe tree above each GPU and its
NVLink domain. Two groups of GPUs that one such relabelling maps onto each other cost the
same, so the placement search prices one of them and reuses it for the other: groups are
memoised under a canonical key (the smallest image over the known symmetries). Pipeline
chains are not: pricing one (a route per hop, no ring search) costs less than its key.

The relabellings are the automorphisms of a complete graph on the GPUs (colour: the GPU's PCIe
chain and NVLink domain; label of a pair: its link class and how much of the PCIe tree the two
share), found by `core.automorphism`, the search the fingerprint uses too. Any subset of the
symmetries gives correct keys (equal keys are still images of each other); past
AUTOMORPHISM_LIMIT listed, the listing stops and keys merge a little less."""

from __future__ import annotations

import weakref
from collections.abc import Collection, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING

from topoweb.core.automorphism import automorphism_generators, orbit_of

if TYPE_CHECKING:
    from topoweb.core.costs import CostModel

AUTOMORPHISM_LIMIT = 256


class Symmetry:
    """GPU relabellings of one cost model, as bit tables over positions in sorted index
    order, with canonical keys of groups and of sets of concurrent groups."""

    def __init__(
        self,
        gpus: Sequence[int],
        perms: Sequence[tuple[int, ...]],
        least: Sequence[int] | None = None,
        complete: bool | None = None,
    ):
        self.gpus = tuple(gpus)
        self.position = {g: i for i, g in enumerate(self.gpus)}
        self.perms = tuple(perms)  # perm[p]: position of the image of position p
        # Every symmetry listed (a group): keys are then the same for a group and its images.
        self.complete = len(self.perms) < AUTOMORPHISM_LIMIT if complete is None else complete
        # Per position, the least position of its orbit under the whole group.
        self.least = tuple(least) if least is not None else tuple(range(len(self.gpus)))
        self._columns: dict[int, tuple[int, ...]] = {}
        self._masks: dict[frozenset[int], list[int]] = {}
        # Keys of concurrent groups: each group's image under a symmetry is an atom (a small
        # index given on first sight), and a set of disjoint groups is the sum of its atoms'
        # bits, so its image under every symmetry is a column sum, in C. Per group: its
        # atoms' bits under each symmetry.
        self._set_atoms: dict[int, int] = {}
        self._set_bits: dict[frozenset[int], list[int]] = {}

    @property
    def order(self) -> int:
        return len(self.perms)

    def _column(self, p: int) -> tuple[int, ...]:
        """The bit of position p's image under each symmetry (a group's images are the
        column sums, summed in C over every symmetry at once); built on first use."""
        got = self._columns.get(p)
        if got is None:
            got = self._columns[p] = tuple(map((1).__lshift__, map(itemgetter(p), self.perms)))
        return got

    def _images(self, group: Collection[int]) -> list[int]:
        """The group's bit mask under each symmetry (remembered: searches meet a group in
        many branches)."""
        key = frozenset(group)
        got = self._masks.get(key)
        if got is None:
            cols = [self._column(self.position[g]) for g in key]
            got = self._masks[key] = list(map(sum, zip(*cols, strict=True)))
        return got

    def set_key(self, group: Sequence[int]) -> int:
        """The same for two groups exactly when a known symmetry maps one onto the other:
        the smallest bit mask of the group's images."""
        return min(self._images(group))

    def sets_key(self, groups: Sequence[Sequence[int]]) -> int:
        """Canonical key of concurrent (disjoint) groups, one relabelling for all of them:
        the least, over the symmetries, sum of their images' atom bits (each group's bits
        computed on its first sight and kept)."""
        bits = []
        for key in map(frozenset, groups):
            got = self._set_bits.get(key)
            if got is None:
                got = self._set_bits[key] = _atom_bits(self._set_atoms, self._images(key))
            bits.append(got)
        return min(map(sum, zip(*bits, strict=True)))


def _atom_bits(atoms: dict[int, int], images: list[int]) -> list[int]:
    """1 << the atom of each image, numbering images not seen before (in increasing order:
    the numbering depends only on what was asked, never on set iteration). Distinct images
    get distinct atoms, so a sum of the bits of disjoint groups' images (distinct images
    under one symmetry) tells which images they were: equal sums, equal image sets."""
    for x in sorted(set(images).difference(atoms)):
        atoms[x] = len(atoms)
    return list(map((1).__lshift__, map(atoms.__getitem__, images)))


_CACHE: weakref.WeakKeyDictionary[CostModel, Symmetry] = weakref.WeakKeyDictionary()


def symmetry(model: CostModel) -> Symmetry:
    """The model's GPU symmetries (computed once per model)."""
    got = _CACHE.get(model)
    if got is None:
        got = _CACHE[model] = _find(model)
    return got


def _find(model: CostModel) -> Symmetry:
    gpus = sorted(model.gpu_ids)
    ids = [model.gpu_ids[g] for g in gpus]
    h, topo = model.hierarchy, model.topo
    n = len(gpus)
    chains = [h.chain(i) for i in ids]
    kinds = {node.id: node.kind for node in h.nodes}
    codes: dict[object, int] = {}

    def code(x: object) -> int:
        return codes.setdefault(x, len(codes))

    def domain(i: str) -> object:
        d = h.domain_of(i)
        return (d.fabric, len(d.gpus)) if d else None

    vertex = [
        code((tuple(kinds.get(x) for x in c), domain(i))) for c, i in zip(chains, ids, strict=True)
    ]
    above = [set(c) for c in chains]
    label = [[code("self")] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a != b:
                common = len(above[a] & above[b])
                label[a][b] = code((topo.link_class(ids[a], ids[b]), common))
    gens, generated = automorphism_generators(label, vertex)
    identity = tuple(range(n))
    # The group they generate, breadth first (the nearest products first), up to the limit.
    found = [identity]
    seen = {identity}
    i = 0
    while i < len(found) and len(found) < AUTOMORPHISM_LIMIT:
        x = found[i]
        i += 1
        for y in map(itemgetter(*x), gens):  # y[k] = g[x[k]], built in C
            if y not in seen:
                seen.add(y)
                found.append(y)
                if len(found) >= AUTOMORPHISM_LIMIT:
                    break
    complete = generated and i >= len(found) and len(found) < AUTOMORPHISM_LIMIT
    # Orbits of the whole group (from the generators: exact whatever the limit).
    least = list(range(n))
    for a in range(n):
        if least[a] == a:  # no smaller point's orbit holds a: a is the least of its own
            for b in orbit_of(a, gens):
                least[b] = a
    return Symmetry(gpus, found, tuple(least), complete)
