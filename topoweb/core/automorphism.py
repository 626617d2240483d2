"""The one automorphism search of topoweb: individualisation-refinement (the method of nauty and
bliss) on a complete graph whose vertices carry a colour and whose vertex pairs carry a label
(`matrix[u][v]`, the diagonal a label of its own). Colour refinement to a stable partition, then
for the first non-singleton cell each vertex is singled out in turn and refined again, down to
discrete partitions (leaves). Every leaf orders the vertices; the certificate is the colours
and the upper triangle of labels in that order, and the canonical order is the least
certificate's leaf. Two leaves with one certificate give an automorphism.

The search is exhaustive; it skips only subtrees that an automorphism it holds maps onto one
already searched: swapping twins (vertices of one colour that every other vertex sees alike),
orbits of found automorphisms that fix the current path, and the subtree above a leaf equal to
the first or best leaf. The same refinement answers whether an automorphism takes given
vertices to given others (`automorphism_generators`: a stabiliser chain's generators).

Used by `core.fingerprint` (canonical order of a topology's twin quotient: the fingerprint) and
`core.symmetry` (the GPU relabellings the placement search prices groups under)."""

from __future__ import annotations

from collections.abc import Sequence

Certificate = tuple[int, ...]
Permutation = tuple[int, ...]

# Automorphisms a canonical-order search keeps for pruning; more only prunes more.
MAX_GENERATORS = 64


def canonical_order(matrix: list[list[int]], colours: list[int]) -> list[int]:
    """The vertices in canonical order: equal for two graphs exactly when they are isomorphic
    (as coloured, labelled graphs), read in each graph's own numbering."""
    if len(colours) <= 1:
        return list(range(len(colours)))
    return _Search(matrix, colours).run()


def automorphism_generators(
    matrix: list[list[int]], colours: list[int]
) -> tuple[list[Permutation], bool]:
    """Generators of the graph's automorphism group (`perm[v]`: the image of v), as a stabiliser
    chain gives them: for each vertex a in turn, with the vertices before it fixed, one
    automorphism taking a to each vertex of its orbit not reached yet (the group's products
    near the identity then move the last vertices first). Always the whole group: the second
    value says so (True)."""
    n = len(colours)
    if n <= 1:
        return [], True
    search = _Search(matrix, colours)
    gens: list[Permutation] = []
    identity = tuple(range(n))
    fixed = search.start()  # refined, with the vertices before a singled out
    for a in range(n):
        fixing = [g for g in gens if g[:a] == identity[:a]]
        orbit = orbit_of(a, fixing)
        # An automorphism fixing the vertices before a takes a into a's cell of `fixed`.
        cell = next(c for c in fixed if a in c)
        for b in sorted(cell):
            if b <= a or b in orbit:
                continue
            if search.twin_of[a] == search.twin_of[b]:
                # Twins: swapping them is an automorphism, fixing every other vertex.
                swap = list(identity)
                swap[a], swap[b] = b, a
                found: Permutation | None = tuple(swap)
            else:
                found = search.mapping(fixed, a, b)
            if found is not None:
                gens.append(found)
                fixing.append(found)
                orbit = orbit_of(a, fixing)
        fixed = search.individualise(fixed, a)
    return gens, True


def orbit_of(a: int, gens: Sequence[Permutation]) -> set[int]:
    """Where the permutations `gens` can carry point `a` (its orbit under the group they
    generate)."""
    orbit, todo = {a}, [a]
    while todo:
        x = todo.pop()
        for g in gens:
            if g[x] not in orbit:
                orbit.add(g[x])
                todo.append(g[x])
    return orbit


def are_twins(matrix: list[list[int]], u: int, v: int) -> bool:
    row_u, row_v = list(matrix[u]), list(matrix[v])
    row_u[u] = row_u[v] = row_v[u] = row_v[v] = -1
    return row_u == row_v


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
        # The source side of `mapping` for the last (partition, vertex) asked: callers vary b.
        self._source: tuple[tuple[int, int], list[Cells], list[int], Certificate] | None = None
        self.twin_of = self._twins(matrix, colours)

    @staticmethod
    def _twins(matrix: list[list[int]], colours: list[int]) -> list[int]:
        """Smallest twin of each vertex in the quotient (equal colour, same edges to others)."""
        n = len(colours)
        twin_of = list(range(n))
        for v in range(n):
            for u in range(v):
                if twin_of[u] == u and colours[u] == colours[v] and are_twins(matrix, u, v):
                    twin_of[v] = u
                    break
        return twin_of

    def start(self) -> Cells:
        """The equitable partition refined from the colours."""
        by_colour: dict[int, list[int]] = {}
        for v, c in enumerate(self.base):
            by_colour.setdefault(c, []).append(v)
        cells = [by_colour[c] for c in sorted(by_colour)]
        return _refine(self.matrix, cells, cells, self.kinds)

    def run(self) -> list[int]:
        self.node(self.start(), [])
        assert self.best is not None
        return self.best[1]

    def individualise(self, cells: Cells, v: int) -> Cells:
        """`cells` with v singled out of its cell and refined again."""
        at = next(i for i, c in enumerate(cells) if v in c)
        if len(cells[at]) == 1:
            return cells
        single = [v]
        child = cells[:at] + [single, [u for u in cells[at] if u != v]] + cells[at + 1 :]
        return _refine(self.matrix, child, [single], self.kinds)

    def certificate(self, order: list[int]) -> Certificate:
        return tuple(self.base[v] for v in order) + tuple(
            self.matrix[a][b] for i, a in enumerate(order) for b in order[i + 1 :]
        )

    def mapping(self, fixed: Cells, a: int, b: int) -> Permutation | None:
        """An automorphism taking a to b and fixing every singleton of `fixed` (an equitable
        partition, a and b in one cell of it), or None: a singled out and refined down one
        branch to a leaf, b singled out and searched for a leaf with the same certificate,
        each level's partition of the same shape."""
        if self._source is None or self._source[0] != (id(fixed), a):
            levels = [self.individualise(fixed, a)]
            while len(levels[-1]) < len(self.base):
                cells = levels[-1]
                first = next(c for c in cells if len(c) > 1)
                levels.append(self.individualise(cells, first[0]))
            src_order = [c[0] for c in levels[-1]]
            self._source = ((id(fixed), a), levels, src_order, self.certificate(src_order))
        _, levels, src_order, wanted = self._source
        dst = self.individualise(fixed, b)
        if [len(c) for c in dst] != [len(c) for c in levels[0]]:
            return None

        def down(cells: Cells, level: int) -> list[int] | None:
            if level == len(levels) - 1:
                order = [c[0] for c in cells]
                return order if self.certificate(order) == wanted else None
            at = next(i for i, c in enumerate(levels[level]) if len(c) > 1)
            shape = [len(c) for c in levels[level + 1]]
            for w in cells[at]:
                child = self.individualise(cells, w)
                if [len(c) for c in child] == shape:
                    found = down(child, level + 1)
                    if found is not None:
                        return found
            return None

        dst_order = down(dst, 0)
        if dst_order is None:
            return None
        image = [0] * len(self.base)
        for a, b in zip(src_order, dst_order, strict=True):
            image[a] = b
        return tuple(image)

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
        if len(self.generators) < MAX_GENERATORS:
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
