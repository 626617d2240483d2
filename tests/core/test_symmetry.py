"""GPU symmetries the placement search prices groups under: each found relabelling really
leaves every group's cost unchanged (so memoising by the canonical key is exact)."""

from __future__ import annotations

import random

import pytest

from tests.core import topologies as T
from tests.core.topo_fixtures import fixture_text
from topoweb.core import placement
from topoweb.core.costs import build_model, slowest_group_us
from topoweb.core.formats.topo import parse
from topoweb.core.ledger import Layout
from topoweb.core.placement import objective
from topoweb.core.symmetry import symmetry


@pytest.mark.parametrize(
    "build",
    [
        T.dgx1_v100_mesh,
        T.pcie_only_8gpu,
        T.pcie_nv4_pairs_16gpu,
        T.gtx1070_7gpu,
        lambda: parse(fixture_text("topo_12")),
        lambda: parse(fixture_text("topo_03")),
        lambda: parse(fixture_text("topo_04")),
    ],
    ids=["dgx1", "pcie8", "pcie16-nv4", "gtx1070-7", "topo_12-dgx1", "topo_03-p40", "topo_04-gtx"],
)
def test_every_symmetry_found_leaves_group_costs_unchanged(build: object) -> None:
    model = build_model(build())  # type: ignore[operator]
    sym = symmetry(model)
    gpus = sym.gpus
    rng = random.Random(7)
    perms = rng.sample(sym.perms, min(12, sym.order))
    for _ in range(6):
        order = rng.sample(gpus, len(gpus))
        size = rng.choice([k for k in (2, 3, 4) if len(gpus) >= 2 * k])
        groups = [tuple(order[i : i + size]) for i in range(0, len(gpus) - size + 1, size)]
        for perm in perms:
            image = [tuple(gpus[perm[sym.position[g]]] for g in grp) for grp in groups]
            if sym.complete:  # else keys merge less, but only images of each other
                assert sym.sets_key(image) == sym.sets_key(groups)
            for collective, nbytes in (("all_reduce", 1 << 26), ("all_gather", 1 << 20)):
                assert slowest_group_us(model, collective, image, nbytes) == pytest.approx(
                    slowest_group_us(model, collective, groups, nbytes), rel=1e-9
                )
                assert slowest_group_us(model, collective, image[:1], nbytes) == pytest.approx(
                    slowest_group_us(model, collective, groups[:1], nbytes), rel=1e-9
                )
            assert slowest_group_us(model, "sendrecv", image, 1 << 24, True) == pytest.approx(
                slowest_group_us(model, "sendrecv", groups, 1 << 24, True), rel=1e-9
            )


def test_the_pcie_tree_has_its_obvious_symmetries_and_the_mesh_only_a_few() -> None:
    # 8 GPUs, two per switch, two switches per socket, two sockets: 2^4 * 2^2 * 2 = 128.
    assert symmetry(build_model(T.pcie_only_8gpu())).order == 128
    mesh = symmetry(build_model(T.dgx1_v100_mesh()))
    assert 1 < mesh.order < 128
    # Swapping GPUs that are not interchangeable changes a key: no false symmetry.
    assert all(perm == tuple(range(8)) or perm != (1, 0, 2, 3, 4, 5, 6, 7) for perm in mesh.perms)


def test_groups_mapped_onto_each_other_share_a_key_and_others_do_not() -> None:
    sym = symmetry(build_model(T.pcie_only_8gpu()))
    pix = [(0, 1), (2, 3), (4, 5), (6, 7)]  # same switch
    assert len({sym.set_key(g) for g in pix}) == 1
    assert sym.set_key((0, 1)) != sym.set_key((0, 2)) != sym.set_key((0, 4))


def test_pipeline_chains_are_priced_by_their_own_gpus_in_their_direction() -> None:
    # A chain costs a route per hop and no ring search: cheaper than a symmetry key, so the
    # search memoises chains as themselves (in order: a chain read backwards costs otherwise)
    # and keeps class keys for the groups whose rings are searched.
    model = build_model(T.pcie_nv4_pairs_16gpu())
    placement.place(model, Layout(2, 2, 4), time_budget_s=60)
    memo = objective._TIMES[model]
    assert any(k[0] == "~" and k[1] == "dp" for k in memo)
    assert not any(k[0] == "~" and k[1] == "pp" for k in memo)
    assert not any(k[0] == "~solo" and k[3] for k in memo)  # (.., chain, key)
    assert any(k[0] == "pp" and all(isinstance(c, tuple) for c in k[3]) for k in memo)
