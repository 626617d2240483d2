"""Step-time and memory-fit placement on real captures: the recommendation fits and is the
fastest fitting layout by brute force over every layout and every mapping."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from tests.core.topo_fixtures import fixture_text
from topoweb.core.costs import CostModel, build_model
from topoweb.core.formats import parse_text
from topoweb.core.ledger import PRESETS, Layout
from topoweb.core.model import Topology
from topoweb.core.numbering import canonical_gpus, to_canonical, to_server
from topoweb.core.placement import StepCost, place, rank_groups, recommend
from topoweb.core.steptime import (
    ADAM_STATE_BYTES,
    DP_EXPOSED_MIN,
    gpu_spec,
    layouts_for,
    lever_steps,
    memory_fit,
    micro_batches,
    step_plan,
)

CAPTURES = {
    "nvswitch-h200": ("topo_01", "NVIDIA H200"),
    "dgx1v-mesh": ("topo_12", "Tesla V100-SXM2-32GB"),
    "pcie-a100": ("topo_18", "NVIDIA A100 80GB PCIe"),
}


def capture(key: str) -> tuple[CostModel, str]:
    prefix, gpu = CAPTURES[key]
    topo = parse_text(fixture_text(prefix), expected="topology")
    assert isinstance(topo, Topology)
    return build_model(topo, gpu), gpu


_BRUTE: dict[tuple[tuple[int, ...], Layout], list[tuple[int, ...]]] = {}


def every_structure(gpus: tuple[int, ...], layout: Layout) -> list[tuple[int, ...]]:
    """One mapping per distinct set of groups, over every permutation of the GPUs."""
    if (gpus, layout) not in _BRUTE:
        seen: dict[Any, tuple[int, ...]] = {}
        for perm in itertools.permutations(gpus):
            g = rank_groups(perm, layout)
            key = (
                frozenset(frozenset(x) for x in g["tp"]),
                frozenset(frozenset(x) for x in g["dp"]),
                frozenset(frozenset(x) for x in g["ep"]),
                frozenset(min(x, x[::-1]) for x in g["pp"]),
            )
            seen.setdefault(key, perm)
        _BRUTE[(gpus, layout)] = list(seen.values())
    return _BRUTE[(gpus, layout)]


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("server", sorted(CAPTURES))
def test_the_recommendation_fits_and_is_the_fastest_fitting_layout_by_brute_force(
    server: str, preset: str
) -> None:
    model, gpu = capture(server)
    shape = PRESETS[preset]
    spec = gpu_spec(gpu)
    rec = recommend(model, shape, spec=spec)
    gpus = tuple(sorted(model.gpu_ids))
    # Under the settings the levers reached (the first of `lever_steps` where anything fits;
    # none of the earlier ones fits any layout).
    steps = lever_steps(shape)
    settings = rec.settings or steps[0]
    for earlier in steps[: steps.index(settings)]:
        assert not any(earlier.fit(lay, spec).fits for lay in layouts_for(shape, len(gpus)))
    brute = []
    for layout in layouts_for(shape, len(gpus)):
        if not settings.fit(layout, spec).fits:
            continue
        cost = StepCost(
            model, layout, settings.shape, spec, recompute=settings.recompute, zero=settings.zero
        )
        brute.append(min(cost(m) for m in every_structure(gpus, layout)))
    if not brute:
        assert rec.best is None and rec.no_fit is not None
        assert "fits no layout" in rec.to_document()["no_fit"]["message"]
        assert not any(p.memory.fits for p in rec.placements)
        return
    assert rec.best is not None and rec.best.memory.fits
    assert rec.best.step_us == pytest.approx(min(brute), rel=1e-9)


def test_a_7b_model_on_8_h100s_is_data_parallel_not_pipelined() -> None:
    topo = parse_text(fixture_text("topo_22"), expected="topology")
    assert isinstance(topo, Topology)
    gpu = "NVIDIA H100 80GB HBM3"
    rec = recommend(build_model(topo, gpu), PRESETS["llama-7b"], spec=gpu_spec(gpu))
    assert rec.best is not None
    assert rec.best.layout.pp == 1 and rec.best.layout.tp <= 2


def test_gpt3_175b_training_does_not_fit_one_8x_80gb_server_and_says_what_would() -> None:
    topo = parse_text(fixture_text("topo_22"), expected="topology")
    assert isinstance(topo, Topology)
    gpu = "NVIDIA H100 80GB HBM3"
    rec = recommend(build_model(topo, gpu), PRESETS["gpt3-175b"], spec=gpu_spec(gpu))
    doc = rec.to_document()
    assert rec.best is None and doc["recommended"] is None and doc["fits"] is False
    assert doc["no_fit"]["message"].startswith("fits no layout on 8x H100 SXM (86 GB)")
    # 175 B parameters x 16 bytes over 8 GPUs is 350 GB each before any activation.
    assert doc["no_fit"]["gb_per_gpu_needed_at_this_size"] > 350
    assert all(not p["fits"] for p in doc["layouts"])


def test_memory_counts_adam_state_and_zero_shards_it_over_dp() -> None:
    shape = PRESETS["llama-7b"]
    lay = Layout(1, 1, 8)
    plain, z1, z2 = (memory_fit(shape, lay, 80 << 30, zero) for zero in (0, 1, 2))
    assert plain.weights == pytest.approx(6.7e9 * 2)
    assert plain.optimizer == pytest.approx(6.7e9 * ADAM_STATE_BYTES)
    assert z1.optimizer == pytest.approx(6.7e9 * ADAM_STATE_BYTES / 8)
    assert z2.gradients == pytest.approx(6.7e9 * 2 / 8) and z1.gradients == plain.gradients
    assert z2.total < z1.total < plain.total
    assert not plain.fits and z1.fits
    # Experts are split over EP; their Adam state only over the DP / EP replicas.
    moe = PRESETS["mixtral-8x7b"]
    ep8 = memory_fit(moe, Layout(1, 1, 8, 8), 141 << 30)
    assert ep8.weights == pytest.approx((1.6e9 + 45.1e9 / 8) * 2)
    assert ep8.optimizer == pytest.approx((1.6e9 / 8 + 45.1e9 / 8) * ADAM_STATE_BYTES)


def test_the_step_is_compute_plus_exposed_comm_plus_a_1f1b_bubble() -> None:
    shape = replace(PRESETS["llama-7b"], global_batch=64)
    spec = gpu_spec("NVIDIA H100 80GB HBM3")
    plan = step_plan(shape, Layout(2, 4, 1), spec, achieved=0.5)
    assert micro_batches(shape, Layout(2, 4, 1)) == plan.micro_batches == 64
    # 6 x 6.7e9 + 12 x 32 x 4096 x 4096 FLOPs per token, 4096 tokens, over TP2 x PP4.
    flops = (6 * 6.7e9 + 12 * 32 * 4096 * 4096) * 4096 / 8
    assert plan.compute_mb_us == pytest.approx(flops / (989e12 * 0.5) * 1e6)
    step = plan.step({("tp", "all_reduce"): 100.0, ("pp", "sendrecv"): 50.0})
    slot = plan.compute_mb_us + 4 * 8 * 100.0 + 2 * 50.0
    assert step.bubble_us == pytest.approx(3 * slot)
    assert step.total_us == pytest.approx(67 * slot)
    # DP: hidden behind the last backward up to 2/3 of a micro-batch's compute.
    dp_plan = step_plan(shape, Layout(1, 1, 8), spec)
    small = dp_plan.step({("dp", "all_reduce"): 1000.0})
    assert small.exposed_us["dp"] == pytest.approx(1000.0 * DP_EXPOSED_MIN)
    big = 10 * dp_plan.compute_mb_us
    assert dp_plan.step({("dp", "all_reduce"): big}).exposed_us["dp"] == pytest.approx(
        big - 2 / 3 * dp_plan.compute_mb_us
    )


def test_a_job_smaller_than_the_free_set_takes_the_best_gpus_and_leaves_the_rest() -> None:
    model, gpu = capture("dgx1v-mesh")
    spec = gpu_spec(gpu)
    free = [0, 1, 2, 3, 4]
    layout = Layout(2, 1, 2)
    result = place(model, layout, free, spec=spec)
    best = min(
        place(model, layout, list(subset), spec=spec).step_us
        for subset in itertools.combinations(free, 4)
    )
    assert result.step_us == pytest.approx(best)
    assert len(result.gpus) == 4 and set(result.gpus) <= set(free)
    assert result.leftover == tuple(g for g in free if g not in result.gpus)
    assert "choices of 4 of the 5 free GPUs" in result.choice


def test_among_equal_choices_the_remaining_free_gpus_stay_best_connected() -> None:
    # 8 PCIe GPUs, two per switch: a 2-GPU job on free {0, 2, 3, 4, 5} must not break up
    # both switch pairs (2, 3) and (4, 5) when GPU0 is alone on its switch.
    from tests.core import topologies as T

    model = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe")
    result = place(model, Layout(1, 1, 2), [0, 2, 3, 4, 5], spec=gpu_spec("NVIDIA H100 PCIe"))
    assert result.gpus in ((2, 3), (4, 5))
    assert result.leftover_busbw_gbps > 0


def test_an_improvement_of_zero_says_whether_orders_differ() -> None:
    model, gpu = capture("nvswitch-h200")
    assert place(model, Layout(2, 2, 2), spec=gpu_spec(gpu)).uniform
    mesh, gpu = capture("dgx1v-mesh")
    assert not place(mesh, Layout(1, 1, 8), spec=gpu_spec(gpu)).uniform


def test_results_stored_canonically_come_back_in_each_servers_own_numbering() -> None:
    model, gpu = capture("dgx1v-mesh")
    topo = model.topo
    relabel = [5, 2, 7, 0, 3, 6, 1, 4]  # sibling GPU relabel[i] is the original GPU i
    sibling = relabelled(topo, relabel)
    layout = Layout(2, 1, 4)
    spec = gpu_spec(gpu)
    stored = to_canonical({"layouts": [place(model, layout, spec=spec).to_document()]}, topo)
    served = to_server(stored, sibling)["layouts"][0]
    sibling_model = build_model(sibling, gpu)
    own = place(sibling_model, layout, spec=spec)
    cost = StepCost(sibling_model, layout, spec=spec)
    assert cost(served["mapping"]) == pytest.approx(own.step_us)
    # Served without mapping, the first server's groups would cost the sibling more.
    assert cost(place(model, layout, spec=spec).mapping) > own.step_us
    assert sorted(canonical_gpus(sibling)) == list(range(8))


def relabelled(topo: Topology, relabel: list[int]) -> Topology:
    """The same server with GPU i renamed GPU relabel[i] (a sibling numbered differently)."""
    from topoweb.core.model import Link

    name = {f"GPU{i}": f"GPU{relabel[i]}" for i in range(len(relabel))}
    devices = [
        replace(d, id=name[d.id], index=relabel[d.index]) if d.kind == "gpu" else d
        for d in topo.devices
    ]
    devices.sort(key=lambda d: (d.kind != "gpu", d.index))
    links = tuple(
        Link(name.get(lnk.a, lnk.a), name.get(lnk.b, lnk.b), lnk.link_class) for lnk in topo.links
    )
    return Topology(tuple(devices), links)
