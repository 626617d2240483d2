"""Rank->GPU mapping search (exact vs brute force, large servers), k-GPU selection, affinity."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest

from tests.core import topologies as T
from tests.core.topo_fixtures import fixture_text, glued_h200
from topoweb.core.costs import (
    CostModel,
    build_model,
    chain_time_bound,
    slowest_group_us,
    solo_time_bound,
)
from topoweb.core.formats.topo import parse
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.placement import (
    StepCost,
    affinity,
    exact,
    large,
    objective,
    place,
    rank_groups,
    select_gpus,
    selection,
)
from topoweb.core.steptime import layouts_for


def test_megatron_order_puts_tp_fastest_then_dp_then_pp() -> None:
    groups = rank_groups(tuple(range(8)), Layout(2, 2, 2))
    assert groups["tp"] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert groups["dp"] == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert groups["pp"] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def _topo_12() -> object:
    return parse(fixture_text("topo_12"))  # a real DGX-1V capture


@pytest.mark.parametrize(
    ("build", "gpu", "layout", "shape"),
    [
        (T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(4, 2, 1), "llama-7b"),
        (T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(2, 2, 2), "llama-7b"),
        (T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(1, 2, 4, 2), "mixtral-8x7b"),
        (_topo_12, "Tesla V100-SXM2-32GB", Layout(2, 4, 1), "llama-13b"),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", Layout(2, 1, 4), "llama-7b"),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", Layout(2, 2, 2), "llama-13b"),
        (T.h200_nv18_12nic, "NVIDIA H200", Layout(2, 2, 2), "llama-7b"),
        (T.l40s_4gpu, "NVIDIA L40S", Layout(2, 1, 2), "llama-7b"),
        (T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", Layout(1, 4, 2), "llama-7b"),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", Layout(1, 4, 2), "llama-7b"),
        (lambda: _odd(8, 3), None, Layout(4, 2, 1), "llama-7b"),
        (lambda: _odd(8, 6), None, Layout(4, 1, 2), "llama-7b"),
    ],
    ids=[
        "dgx1-tp4-pp2", "dgx1-tp2-pp2-dp2", "dgx1-moe-pp2-dp4-ep2", "topo_12-tp2-pp4",
        "pcie8-tp2-dp4", "pcie8-tp2-pp2-dp2", "h200-tp2-pp2-dp2", "l40s-tp2-dp2",
        "dgx1-pp4-dp2", "pcie8-pp4-dp2", "odd8-3-tp4-pp2", "odd8-6-tp4-dp2",
    ],
)  # fmt: skip
def test_the_exact_search_matches_brute_force_over_every_mapping(
    build: object, gpu: str, layout: Layout, shape: str
) -> None:
    model = build_model(build(), gpu)  # type: ignore[operator]
    result = place(model, layout, shape=PRESETS[shape])
    # A model of its own: no group time the search memoised (under symmetries) is reused.
    cost = StepCost(build_model(build(), gpu), layout, PRESETS[shape])  # type: ignore[operator]
    brute = min(cost(p) for p in itertools.permutations(sorted(model.gpu_ids)))
    assert result.search.startswith("exact")
    assert result.step_us == pytest.approx(brute)
    assert cost(result.mapping) == pytest.approx(result.step_us)


def test_on_the_dgx1_mesh_a_pipeline_follows_the_nv2_cycle() -> None:
    model = build_model(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB")
    result = place(model, Layout(1, 8, 1))
    (chain,) = result.groups["pp"]
    hops = zip(chain, chain[1:], strict=False)
    classes = {model.topo.link_class(f"GPU{a}", f"GPU{b}") for a, b in hops}
    assert classes == {"NV2"}
    assert result.naive_step_comm_us > 2 * result.step_comm_us  # index order crosses NV1/PCIe
    assert result.naive_step_us > result.step_us
    assert not result.uniform


def test_tp_takes_the_nvlink_bridges_that_the_naive_order_splits() -> None:
    # Four PCIe cards on two sockets with NV4 bridges across slots 0-2 and 1-3: index order
    # would pair 0 with 1 and 2 with 3, both over PCIe.
    def cls(a: int, b: int) -> str:
        if {a, b} in ({0, 2}, {1, 3}):
            return "NV4"
        return "NODE" if a // 2 == b // 2 else "SYS"

    model = build_model(T.from_function(4, cls, lambda i: i // 2), "NVIDIA RTX A6000")
    result = place(model, Layout(2, 1, 2))
    assert sorted(map(sorted, result.groups["tp"])) == [[0, 2], [1, 3]]
    tp = next(d for d in result.per_dimension if d.dimension == "tp")
    assert tp.bottleneck_class == "nvlink"
    assert "NVLink NV4" in tp.bottleneck
    assert result.step_comm_us < 0.75 * result.naive_step_comm_us
    assert result.improvement > 0


def test_larger_servers_searched_on_any_budget_are_never_worse_than_naive() -> None:
    # A budget already spent (0 s) and the API's (0.3 s): the search stops where it is and
    # answers its best so far, never a worse mapping than the naive one. How long it takes
    # is bench/placement.py's figure, not a test's.
    for build, layout in (
        (T.pcie_nv4_pairs_16gpu, Layout(2, 2, 4)),
        (T.pcie_nv4_pairs_16gpu, Layout(4, 1, 4)),
        (T.nvl72, Layout(8, 9, 1)),
    ):
        model = build_model(build())
        for budget_s in (0.0, 0.3):
            result = place(model, layout, time_budget_s=budget_s)
            assert result.step_us <= result.naive_step_us


def test_each_nesting_of_the_dimensions_packs_its_groups_along_the_hierarchy() -> None:
    model = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe")
    gpus = sorted(model.gpu_ids)
    order = objective.hierarchy_order(model, gpus)
    layout = Layout(2, 2, 2)
    starts = large.nested_orders(model, gpus, layout)
    assert len(starts) == 6 and starts[0] == tuple(order)  # Megatron's order along it first
    innermost = set()
    for mapping in starts:
        assert sorted(mapping) == gpus
        groups = rank_groups(mapping, layout)
        for dim in ("tp", "dp", "pp"):
            spans = [sorted(order.index(g) for g in grp) for grp in groups[dim]]
            if all(s == list(range(s[0], s[0] + len(s))) for s in spans):
                innermost.add(dim)  # every group of it is a run of the hierarchy order
    assert innermost == {"tp", "dp", "pp"}


def test_a_72_gpu_pcie_tree_is_placed_exactly_from_the_fastest_nesting() -> None:
    # Two sockets of four 9-GPU switches, TP2 PP4 DP9: Megatron's order along the hierarchy
    # sends every pipeline across the sockets; a TP x PP block under each switch is faster.
    # No single swap lowers the slowest group of a dimension there, so only a start reaches
    # it, and the bound over what crosses the sockets proves nothing beats it.
    model = build_model(T.pcie_72gpu(), "NVIDIA L40S")
    layout = Layout(2, 4, 9)
    result = place(model, layout, time_budget_s=5)
    cost = StepCost(build_model(T.pcie_72gpu(), "NVIDIA L40S"), layout)
    starts = [cost(m) for m in large.nested_orders(model, sorted(model.gpu_ids), layout)]
    assert result.search.startswith("exact (no mapping can beat it")
    assert min(starts) < 0.95 * starts[0]
    assert result.step_us == pytest.approx(min(starts))
    assert cost(result.mapping) == pytest.approx(result.step_us)
    # TP4 PP2 DP9: the bound stays under the best start; the answer says it is not proven.
    other = place(model, Layout(4, 2, 9), time_budget_s=1)
    assert other.search.startswith("local search")


def _pcie_layouts() -> list[tuple[tuple[int, int, int], Layout]]:
    return [
        ((2, 2, 3), Layout(2, 2, 3)),
        ((2, 2, 3), Layout(2, 3, 2)),
        ((2, 2, 3), Layout(2, 1, 6)),
        ((2, 2, 4), Layout(2, 2, 4)),
        ((2, 2, 4), Layout(4, 2, 2)),
        ((2, 2, 4), Layout(2, 1, 8)),
    ]


@pytest.mark.parametrize(("tree", "layout"), _pcie_layouts())
def test_the_cut_bound_never_proves_a_step_time_some_mapping_beats(
    tree: tuple[int, int, int], layout: Layout
) -> None:
    # 2 sockets x 2 switches x 3-4 GPUs, where the branch and bound is exact: a time above the
    # optimum must never be proven unbeatable; at the optimum the bound is often tight.
    model = build_model(T.pcie_tree(*tree), "NVIDIA L40S")
    best = place(model, layout, time_budget_s=60)
    assert best.search == "exact"
    cost = StepCost(build_model(T.pcie_tree(*tree), "NVIDIA L40S"), layout)
    gpus = sorted(model.gpu_ids)
    assert not large.cut_bound_proves(cost, gpus, best.step_us * (1 + 1e-6), math.inf)
    tight = large.cut_bound_proves(cost, gpus, best.step_us, math.inf)
    assert tight == (layout not in (Layout(2, 3, 2), Layout(4, 2, 2)))


def test_the_cut_tables_are_kept_per_gpu_set() -> None:
    # Socket 0's GPUs of the second set all sit under switch 0: every path out of them also
    # takes that switch's uplink, which the first set's paths need not.
    model = build_model(T.pcie_tree(2, 2, 4), "NVIDIA L40S")
    one_switch = (0, 1, 2, 3, 8, 9, 12, 13)
    for gpus, layout in ((tuple(model.gpu_ids), Layout(2, 1, 8)), (one_switch, Layout(2, 1, 4))):
        cost = StepCost(model, layout)
        large.cut_bound_proves(cost, gpus, place(model, layout, gpus).step_us, math.inf)
    side = {g: g // 8 for g in one_switch}
    other = build_model(T.pcie_tree(2, 2, 4), "NVIDIA L40S")
    fresh = large.cut_tables(other, one_switch, side, math.inf)
    assert fresh is not None
    kept = cost.memo[("cut", one_switch)]
    assert (kept[0], sorted(kept[1])) == (fresh[0], sorted(fresh[1]))  # links in another order
    assert len(fresh[1]) > len(cost.memo[("cut", tuple(range(16)))][1])


@pytest.mark.parametrize("seed", range(6))
def test_on_random_two_socket_pcie_boxes_the_cut_bound_stays_under_the_optimum(seed: int) -> None:
    model = build_model(T.asymmetric_box(8, seed, nvlink_share=0.0), "NVIDIA L40S")
    gpus = sorted(model.gpu_ids)
    for layout in layouts_for(PRESETS["llama-7b"], 8):
        best = place(model, layout)
        assert best.search.startswith("exact")
        cost = StepCost(model, layout)
        assert not large.cut_bound_proves(cost, gpus, best.step_us * (1 + 1e-6), math.inf)


def test_an_impossible_job_is_refused_with_the_arithmetic() -> None:
    model = build_model(T.l40s_4gpu())
    with pytest.raises(ValueError, match=r"2 x 2 x 2 = 8 needs more than the 4 free GPUs"):
        place(model, Layout(2, 2, 2))
    with pytest.raises(ValueError, match="unknown GPU index 9"):
        place(model, Layout(2, 1, 1), free=[0, 9])


def test_k_gpu_selection_prefers_an_nv4_pair_and_leaves_the_other_pair_whole() -> None:
    model = build_model(T.pcie_nv4_pairs_16gpu())
    best = select_gpus({"node-a": (model, [0, 1, 2, 3])}, 2)
    assert best[0].gpus in ((0, 1), (2, 3))
    assert best[0].busbw_gbps == pytest.approx(80.0, rel=0.01)
    assert best[0].leftover_busbw_gbps == pytest.approx(80.0, rel=0.01)
    assert "NVLink NV4" in best[0].reason and "leaves GPUs" in best[0].reason


def test_k_gpu_selection_over_many_servers_ranks_the_nvswitch_box_first() -> None:
    servers = {
        "pcie": (build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe"), range(8)),
        "hgx": (build_model(T.h100_nv18_no_nic(), "NVIDIA H100 80GB HBM3"), [0, 3, 5, 6]),
    }
    best = select_gpus(servers, 4, top=3)
    assert best[0].server == "hgx"
    assert best[0].gpus == (0, 3, 5, 6)
    with pytest.raises(ValueError, match="no server has 9 free GPUs"):
        select_gpus(servers, 9)
    # No free list: all of the server's GPUs.
    pcie = servers["pcie"][0]
    assert select_gpus({"pcie": (pcie, None)}, 4) == select_gpus({"pcie": (pcie, range(8))}, 4)


def test_servers_sharing_a_model_get_the_choices_their_own_models_would_give() -> None:
    # A fleet's servers of one kind share a model, and with it each free set's choices: the
    # answer must be the one fresh models (nothing remembered) give, top list and order.
    rng = random.Random(7)
    kinds = (T.dgx1_v100_mesh(), T.pcie_only_8gpu(), T.pcie_nv4_pairs_16gpu())
    shared = [build_model(topo) for topo in kinds]
    wanted = [
        (f"node-{n:02d}", kind, sorted(rng.sample(range(8), rng.randint(2, 8))))
        for n, kind in enumerate(rng.choices(range(len(kinds)), k=24))
    ]
    for k in (1, 2, 3, 4):
        for top in (1, 5, 12):
            remembered = select_gpus(
                {name: (shared[kind], free) for name, kind, free in wanted if len(free) >= k},
                k,
                top,
            )
            fresh = select_gpus(
                {
                    name: (build_model(kinds[kind]), free)
                    for name, kind, free in wanted
                    if len(free) >= k
                },
                k,
                top,
            )
            assert remembered == fresh
            # Each server alone, every choice of it kept, merged: the same top list.
            alone = [
                s
                for name, kind, free in wanted
                if len(free) >= k
                for s in select_gpus({name: (shared[kind], free)}, k, top=10_000)
            ]
            alone.sort(
                key=lambda s: (
                    -round(s.busbw_gbps, 1),
                    -round(s.leftover_busbw_gbps, 1),
                    s.server,
                    s.gpus,
                )
            )
            assert [(s.server, s.gpus) for s in remembered] == [
                (s.server, s.gpus) for s in alone[:top]
            ]


def test_what_selection_remembers_is_bounded_over_all_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(selection, "_SELECTIONS_KEPT", 50)
    models = [build_model(T.pcie_only_8gpu()), build_model(T.dgx1_v100_mesh())]
    servers = {f"node-{n}": (model, range(8)) for n, model in enumerate(models)}
    first = select_gpus(servers, 3)
    assert sum(len(selection._SELECTIONS.get(m, {})) for m in models) <= 50
    assert select_gpus(servers, 3) == first  # forgotten, then priced again alike


def test_affinity_names_nearest_nics_numa_and_warns_where_no_nic_is_local() -> None:
    advice = affinity(build_model(T.h200_nv18_12nic()))
    gpu1 = advice.gpus[1]
    assert (gpu1.nearest_nics, gpu1.nic_class, gpu1.numa_node) == (
        ("mlx5_3",),
        "PXB",
        "NUMA node 0",
    )
    assert gpu1.cpu_list == "0-55,112-167"
    assert advice.binding_hints[1] == (
        "GPU1: numactl --cpunodebind=0 --membind=0; NCCL_IB_HCA=mlx5_3"
    )
    assert all(g.warning is None for g in advice.gpus)
    l40s = affinity(build_model(T.l40s_4gpu()))
    assert [g.gpu for g in l40s.gpus if g.warning] == [0, 1]
    assert "no NIC on its NUMA node (NUMA node 0)" in (l40s.gpus[0].warning or "")
    assert l40s.cuda_visible_devices == "0,1,2,3"


def test_binding_hints_never_name_a_nic_the_capture_does_not_name() -> None:
    # topo_29 has a NIC0 column but no NIC legend: no RDMA device name is known.
    advice = affinity(build_model(parse(fixture_text("topo_29"))))
    assert advice.gpus[4].nearest_nics == ("NIC0",)  # shown as the matrix names it
    assert not any("NCCL_IB_HCA" in hint for hint in advice.binding_hints)


def test_glued_affinity_capture_pins_to_the_repaired_numa_node() -> None:
    advice = affinity(build_model(parse(glued_h200())))
    assert advice.binding_hints[0].startswith("GPU0: numactl --cpunodebind=0 --membind=0")
    assert not any("1370" in hint for hint in advice.binding_hints)
    assert advice.gpus[0].cpu_list == "0-45,92-137"


def test_a_job_goes_to_one_server_when_one_can_hold_it() -> None:
    from topoweb.core.placement import ServerPool, select_job

    h200 = build_model(T.h200_nv18_12nic(), "NVIDIA H200")
    pcie = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe")
    servers = {
        "pcie": ServerPool(pcie, tuple(range(8)), "rail-a"),
        "hgx": ServerPool(h200, (0, 1, 2, 3, 4), "rail-a"),
    }
    (best, *_rest) = select_job(servers, k=4)
    assert [p.server for p in best.parts] == ["hgx"]
    assert best.inter_node_us == 0 and "one server" in best.reason
    # Each GPU's nearest NICs are named: the ones its traffic leaves through.
    assert set(best.parts[0].nics) <= {n.nic_name for n in h200.topo.nics}
    assert best.parts[0].nics


def test_a_job_no_server_can_hold_spans_the_fewest_servers_on_one_rail_group_first() -> None:
    from topoweb.core.placement import ServerPool, select_job

    h200 = build_model(T.h200_nv18_12nic(), "NVIDIA H200")
    servers = {
        "a": ServerPool(h200, (0, 1, 2, 3, 4, 5), "rail-1"),
        "b": ServerPool(h200, tuple(range(8)), "rail-2"),
        "c": ServerPool(h200, (2, 3, 4, 5, 6, 7), "rail-1"),
    }
    best, other = select_job(servers, k=12)[:2]
    assert sorted(p.server for p in best.parts) == ["a", "c"] and best.same_rails
    assert sum(len(p.gpus) for p in best.parts) == 12
    # Through the spine is never cheaper (here the NVLink tree, not the 12 NICs, bounds both).
    assert not other.same_rails and other.predicted_us >= best.predicted_us
    assert best.inter_node_us > 0
    # A TP x PP x DP job keeps each TP group inside one server.
    from topoweb.core.ledger import PRESETS

    (job, *_rest) = select_job(servers, layout=Layout(4, 1, 3), shape=PRESETS["llama-13b"])
    assert all(len(p.gpus) % 4 == 0 for p in job.parts)
    assert job.what == "step time" and job.inter_node_us > 0
    with pytest.raises(ValueError, match="the job needs 40"):
        select_job(servers, k=40)


@pytest.mark.parametrize(
    "layout", [Layout(2, 2, 4), Layout(2, 1, 8)], ids=["tp2-pp2-dp4", "tp2-dp8"]
)
def test_on_16_gpus_pruning_by_server_symmetry_finds_what_the_plain_search_finds(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    from topoweb.core import symmetry

    model = build_model(T.pcie_nv4_pairs_16gpu())
    result = place(model, layout, time_budget_s=30)
    assert result.search == "exact"
    # The same branch and bound told of no symmetry at all (only the identity), on a fresh
    # model: every mapping modulo the layout's own relabellings.
    plain = build_model(T.pcie_nv4_pairs_16gpu())
    gpus = tuple(sorted(plain.gpu_ids))
    none = symmetry.Symmetry(gpus, [tuple(range(len(gpus)))])
    monkeypatch.setattr(objective, "symmetry", lambda _model: none)
    best, best_us = exact.exact(StepCost(plain, layout), gpus)
    assert result.step_us == pytest.approx(best_us)
    assert StepCost(plain, layout)(result.mapping) == pytest.approx(best_us)


@pytest.mark.parametrize(
    ("build", "free", "layout"),
    [
        (T.pcie_only_8gpu, (1, 2, 5, 6), Layout(2, 1, 2)),
        (T.pcie_only_8gpu, (1, 2, 3, 4), Layout(1, 2, 2)),  # a pipeline read backwards differs
        (T.dgx1_v100_mesh, (1, 2, 3, 5, 6, 7), Layout(2, 1, 3)),
        (T.pcie_nv4_pairs_16gpu, (1, 2, 3, 9, 12, 13), Layout(2, 3, 1)),
    ],
    ids=["pcie8-4-of-8", "pcie8-pp2-over-sockets", "dgx1-6-of-8", "pcie16-6-of-16"],
)
def test_the_exact_search_on_some_free_gpus_matches_brute_force_over_them(
    build: object, free: tuple[int, ...], layout: Layout
) -> None:
    # The server's symmetries that move these GPUs out of the free set must not prune.
    result = place(build_model(build()), layout, free)  # type: ignore[operator]
    cost = StepCost(build_model(build()), layout)  # type: ignore[operator]
    brute = min(cost(p) for p in itertools.permutations(free))
    assert result.search.startswith("exact")
    assert result.step_us == pytest.approx(brute)


def _odd(n: int, seed: int) -> object:
    """An asymmetric box of this file's cases (T.asymmetric_box, NVLink on 0.3 of pairs)."""
    return T.asymmetric_box(n, seed, nvlink_share=0.3)


def _true_step_us(model: CostModel, layout: Layout, shape: ModelShape) -> Callable[..., float]:
    """The objective priced from the groups themselves, memoised only by their exact form
    (sets as sets, chains in their direction): no key of the search's own."""
    plan = StepCost(model, layout, shape).plan
    memo: dict[object, float] = {}

    def step(mapping: tuple[int, ...]) -> float:
        groups = rank_groups(mapping, layout)
        times = {}
        for dim, coll, nbytes, _ in plan.collectives:
            gs = [g for g in groups[dim] if len(g) > 1]
            exact = frozenset(gs) if dim == "pp" else frozenset(map(frozenset, gs))
            key = (dim, coll, nbytes, exact)
            if key not in memo:
                memo[key] = slowest_group_us(model, coll, gs, nbytes, dim == "pp") if gs else 0.0
            times[(dim, coll)] = memo[key]
        return plan.step(times).total_us

    return step


def test_a_pipeline_read_backwards_is_a_different_cost() -> None:
    # A send across sockets is staged on one side: one chain reversed alone, or the whole
    # pipeline read backwards, loads other links. The memo keeps each chain's direction.
    model = build_model(_odd(6, 2))  # type: ignore[arg-type]
    same, mixed = [(0, 1), (2, 3), (4, 5)], [(0, 1), (3, 2), (4, 5)]
    assert slowest_group_us(model, "sendrecv", same, 1 << 25, True) != pytest.approx(
        slowest_group_us(model, "sendrecv", mixed, 1 << 25, True)
    )
    assert objective.groups_key("pp", same) != objective.groups_key("pp", mixed)
    pcie = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe")
    forward, backward = [(2, 1), (3, 4)], [(1, 2), (4, 3)]
    assert slowest_group_us(pcie, "sendrecv", forward, 1 << 25, True) != pytest.approx(
        slowest_group_us(pcie, "sendrecv", backward, 1 << 25, True)
    )
    assert objective.groups_key("pp", forward) != objective.groups_key("pp", backward)


@pytest.mark.parametrize(
    ("build", "shape"),
    [
        (lambda: _odd(6, 4), "llama-7b"),
        (lambda: _odd(6, 5), "llama-7b"),
        (lambda: _odd(6, 2), "mixtral-8x7b"),
        (T.gtx1070_7gpu, "llama-7b"),
        (
            lambda: T.from_function(
                6, lambda i, j: "SYS" if (i < 2) != (j < 2) else "PIX", lambda i: int(i >= 2)
            ),
            "llama-7b",
        ),  # fmt: skip
    ],
    ids=["odd6-4", "odd6-5", "odd6-2-moe", "gtx1070-7", "lopsided-2-4"],
)
def test_every_layout_placed_on_one_model_matches_brute_force(build: object, shape: str) -> None:
    # One model for every layout, as a recommendation prices them: group times memoised for
    # one layout (PP2 pairs, PP3 chains of the same bytes...) must never answer for another.
    model = build_model(build())  # type: ignore[operator]
    gpus = sorted(model.gpu_ids)
    for layout in layouts_for(PRESETS[shape], len(gpus)):
        result = place(model, layout, shape=PRESETS[shape])
        truth = _true_step_us(build_model(build()), layout, PRESETS[shape])  # type: ignore[operator]
        brute = min(truth(p) for p in itertools.permutations(gpus))
        assert result.search.startswith("exact"), layout
        assert result.step_us == pytest.approx(brute), layout


@pytest.mark.parametrize("build", [lambda: _odd(8, 3), lambda: _odd(7, 9), T.pcie_only_8gpu])
def test_a_pipelines_first_stages_alone_never_cost_more_than_the_whole_chain(
    build: object,
) -> None:
    # The search bounds a chain by its first stages before the last one is placed: sound only
    # if every prefix of a chain is priced at most at the chain's own time.
    model = build_model(build())  # type: ignore[operator]
    rng = random.Random(1)
    gpus = sorted(model.gpu_ids)
    for _ in range(60):
        chain = rng.sample(gpus, rng.randrange(3, len(gpus) + 1))
        for nbytes in (1 << 12, 1 << 26):
            whole = slowest_group_us(model, "sendrecv", [chain], nbytes, True)
            for k in range(2, len(chain)):
                assert slowest_group_us(model, "sendrecv", [chain[:k]], nbytes, True) <= whole


@pytest.mark.parametrize(
    ("build", "gpu", "p2p"),
    [
        (T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", "auto"),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", "on"),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", "off"),
        (T.pcie_nv4_pairs_16gpu, None, "auto"),
        (T.h200_nv18_12nic, "NVIDIA H200", "auto"),
        (lambda: _odd(8, 3), None, "auto"),
        (lambda: _odd(7, 9), None, "auto"),
        (T.gtx1070_7gpu, None, "auto"),
    ],
    ids=["dgx1", "pcie8-p2p", "pcie8-no-p2p", "pcie16-nv4", "h200", "odd8", "odd7", "gtx1070"],
)
def test_the_bound_that_skips_a_ring_search_never_exceeds_the_priced_time(
    build: object, gpu: str | None, p2p: str
) -> None:
    # The search cuts a branch on solo_time_bound before pricing its groups: sound only if it
    # is never above the group's priced time alone (itself never above its time in company).
    model = build_model(build(), gpu, p2p=p2p)  # type: ignore[operator, arg-type]
    gpus = sorted(model.gpu_ids)
    rng = random.Random(7)
    groups = [c for k in (2, 3, 4) for c in itertools.combinations(gpus, k)]
    groups += [tuple(rng.sample(gpus, rng.randrange(5, len(gpus) + 1))) for _ in range(40)]
    if len(gpus) > 8:
        groups = rng.sample(groups, 300)
    tight = 0
    for group in groups:
        assert model.ring_rate_bound(group) >= model.solo_rate(
            model.group_load("all_reduce", group)
        ).gbps * (1 - 1e-12)
        for coll in ("all_reduce", "reduce_scatter", "all_gather"):
            for nbytes in (1 << 10, 1 << 20, 1 << 28):
                bound = solo_time_bound(model, coll, group, nbytes)
                priced = slowest_group_us(model, coll, [group], nbytes)
                assert 0 < bound <= priced, (group, coll, nbytes)
                tight += bound >= priced * (1 - 1e-6)
    assert tight  # the bound is not vacuous: somewhere it meets the priced time


@pytest.mark.parametrize(
    ("build", "gpu", "p2p", "shared"),
    [
        (T.dgx1_v100_mesh, "Tesla V100-SXM2-32GB", "auto", False),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", "on", True),
        (T.pcie_only_8gpu, "NVIDIA H100 PCIe", "off", True),
        (T.pcie_nv4_pairs_16gpu, None, "auto", True),
        (lambda: _odd(8, 3), None, "auto", True),
        (lambda: _odd(7, 9), None, "auto", True),
        (T.gtx1070_7gpu, None, "auto", True),
        (T.h200_nv18_12nic, "NVIDIA H200", "auto", False),
    ],
    ids=["dgx1", "pcie8-p2p", "pcie8-no-p2p", "pcie16-nv4", "odd8", "odd7", "gtx1070", "h200"],
)
def test_the_bound_from_some_chains_load_never_exceeds_the_contended_time_of_all(
    build: object, gpu: str | None, p2p: str, shared: bool
) -> None:
    # The search cuts a branch on chain_time_bound over the pipeline chains placed so far:
    # sound only if, at the rate those chains' summed load leaves (what other chains may
    # share: `private` resources left out), it is never above the contended time of the whole
    # pipeline, whatever the chains not yet placed.
    model = build_model(build(), gpu, p2p=p2p)  # type: ignore[operator, arg-type]
    gpus = sorted(model.gpu_ids)
    rng = random.Random(3)
    cut_more = 0
    for _ in range(40):
        size = rng.choice([k for k in (2, 3, 4) if len(gpus) >= 2 * k])
        order = rng.sample(gpus, len(gpus))
        chains = [tuple(order[i : i + size]) for i in range(0, len(gpus) - size + 1, size)]
        for nbytes in (1 << 12, 1 << 22, 1 << 28):
            f = chain_time_bound(model, nbytes)
            assert f is not None
            whole = slowest_group_us(model, "sendrecv", chains, nbytes, True)
            solo = max(slowest_group_us(model, "sendrecv", [c], nbytes, True) for c in chains)
            total: dict[int, float] = {}
            for k, c in enumerate(chains, 1):
                load = model.load(((c[i], c[i + 1]), 1.0) for i in range(len(c) - 1))
                for r, w in load.items():
                    if not model.private(r):
                        total[r] = total.get(r, 0.0) + w
                if not total:
                    continue
                rate = min(model.resources[r].capacity_gbps / w for r, w in total.items())
                bound = f(rate)
                assert 0 < bound <= whole, (chains[:k], nbytes)
                cut_more += bound > solo
    # Where chains share PCIe switches and sockets it cuts what their solo times cannot.
    assert cut_more or not shared
