"""The one automorphism search (core.automorphism), used by the fingerprint and by the GPU
symmetries: checked against brute force on small random graphs."""

from __future__ import annotations

import itertools
import random

import pytest

from topoweb.core.automorphism import automorphism_generators, canonical_order


def _graph(rng: random.Random, n: int) -> tuple[list[list[int]], list[int]]:
    labels = rng.randint(1, 3)
    matrix = [[labels] * n for _ in range(n)]  # the diagonal: a label of its own
    for a, b in itertools.combinations(range(n), 2):
        matrix[a][b] = matrix[b][a] = rng.randrange(labels)
    return matrix, [rng.randrange(2) for _ in range(n)]


def _automorphisms(matrix: list[list[int]], colours: list[int]) -> set[tuple[int, ...]]:
    n = len(colours)
    return {
        p
        for p in itertools.permutations(range(n))
        if all(colours[p[v]] == colours[v] for v in range(n))
        and all(matrix[p[a]][p[b]] == matrix[a][b] for a in range(n) for b in range(n))
    }


def _closure(gens: list[tuple[int, ...]], n: int) -> set[tuple[int, ...]]:
    group = {tuple(range(n))}
    todo = list(group)
    while todo:
        x = todo.pop()
        for g in gens:
            y = tuple(g[x[k]] for k in range(n))
            if y not in group:
                group.add(y)
                todo.append(y)
    return group


@pytest.mark.parametrize("seed", range(40))
def test_the_generators_generate_exactly_the_automorphism_group(seed: int) -> None:
    rng = random.Random(seed)
    matrix, colours = _graph(rng, rng.randint(1, 6))
    gens, complete = automorphism_generators(matrix, colours)
    assert complete
    assert _closure(gens, len(colours)) == _automorphisms(matrix, colours)


@pytest.mark.parametrize("seed", range(40))
def test_the_canonical_order_is_the_same_for_every_renumbering(seed: int) -> None:
    rng = random.Random(seed)
    matrix, colours = _graph(rng, rng.randint(1, 6))
    n = len(colours)

    def certificate(m: list[list[int]], c: list[int]) -> tuple[int, ...]:
        order = canonical_order(m, c)
        return tuple(c[v] for v in order) + tuple(m[a][b] for a in order for b in order)

    relabel = list(range(n))
    rng.shuffle(relabel)  # vertex v becomes relabel[v]
    back = {new: old for old, new in enumerate(relabel)}
    other = [[matrix[back[a]][back[b]] for b in range(n)] for a in range(n)]
    assert certificate(other, [colours[back[v]] for v in range(n)]) == certificate(matrix, colours)
