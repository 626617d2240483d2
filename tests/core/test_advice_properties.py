"""Properties of every answer the advice gives, over every real capture in tests/fixtures and
every model preset: recommended and ranked training layouts, their smallest fit over more
servers, jobs over two such servers and serving replicas can all run (TP divides the heads, KV
heads and the MLP's hidden units, PP the layers, EP the experts, TP and EP inside one server),
keep the memory headroom they promise, name no lever they do not need, and need no fewer GPUs
when asked for more. Two 16-GPU servers join them (no capture here has more than 8 GPUs, and
only past 8 does a TP divide the heads but not the KV heads of Llama 70B and Mixtral): a
DGX-2-style NVSwitch box of V100 32GB and a PCIe box of NV4-bridged pairs."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from tests.core import topologies as T
from tests.core.test_advice import fixture
from tests.core.topo_fixtures import TOPO_FILES
from topoweb.core.costs import CostModel, build_model
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.placement import ServerPool, recommend, select_job
from topoweb.core.placement.serving import serve
from topoweb.core.steptime import GpuSpec, Settings, gpu_spec, layouts_for, valid_layout_problem

SIXTEEN = {
    "dgx2-16gpu-nvswitch": (T.nvswitch_16gpu, "Tesla V100-SXM3-32GB"),
    "pcie-16gpu-nv4-pairs": (T.pcie_nv4_pairs_16gpu, "NVIDIA RTX A6000"),
}
CASES = [*TOPO_FILES, *SIXTEEN]


@cache
def case(name: str) -> tuple[CostModel, GpuSpec]:
    if name not in SIXTEEN:
        return fixture(name)
    topology, gpu = SIXTEEN[name]
    model = build_model(topology(), gpu)
    return model, gpu_spec(gpu, model.hardware.generation.name)


def _runs(shape: ModelShape, lay: Layout, server: int) -> None:
    """The rules a layout over servers of `server` GPUs must keep, checked from the shape."""
    kv = shape.kv_heads or shape.heads
    assert shape.heads % lay.tp == 0 and kv % lay.tp == 0, (shape.name, lay)
    assert shape.ffn_hidden % lay.tp == 0, (shape.name, lay)  # the MLP splits over TP too
    assert shape.layers % lay.pp == 0, (shape.name, lay)
    if lay.ep > 1:
        assert shape.experts % lay.ep == 0, (shape.name, lay)
    if lay.size > server:  # over servers: TP and TP x EP groups never straddle two
        assert server % (lay.tp * lay.ep) == 0, (shape.name, lay, server)
    assert valid_layout_problem(shape, lay, server) is None


def _headroom(spec: GpuSpec) -> float:
    return 0.15 if spec.memory_assumed else 0.10


@pytest.mark.parametrize("name", CASES)
def test_every_training_answer_on_a_fixture_can_run_and_keeps_its_headroom(name: str) -> None:
    model, spec = case(name)
    n = len(model.gpu_ids)
    for key, shape in PRESETS.items():
        rec = recommend(model, shape, spec=spec, time_budget_s=0.02)
        for placed in rec.placements:
            _runs(shape, placed.layout, n)
            assert len(set(placed.mapping)) == placed.layout.size <= n
        doc = rec.to_document()
        if rec.best is not None:
            mem = doc["recommended"]["memory"]
            assert mem["left_fraction"] >= _headroom(spec) - 1e-3, (key, mem)
            _each_lever_needed(rec.settings, [p.layout for p in rec.placements], spec)
        else:
            assert rec.no_fit is not None
            lay = rec.no_fit.needed_layout
            if lay is not None:
                assert rec.no_fit.needed_gpus == lay.size and lay.size % n == 0
                _runs(shape, lay, n)
                mem = doc["no_fit"]["memory"]
                assert mem["fits"] and mem["left_fraction"] >= _headroom(spec) - 1e-3, key
                _each_lever_needed(
                    Settings(
                        replace(shape, micro_batch=1) if any(
                            lv.startswith("micro-batch") for lv in rec.no_fit.levers
                        ) else shape,
                        mem["zero"], mem["recompute"], rec.no_fit.levers,
                    ),
                    layouts_for(shape, lay.size, n), spec,
                )  # fmt: skip


def _each_lever_needed(settings: Settings | None, layouts: list[Layout], spec: GpuSpec) -> None:
    """No answer keeps full recomputation (the costliest lever) that its layouts fit without."""
    if settings is None or settings.recompute != "full" or not layouts:
        return
    lighter = replace(settings, recompute="selective")
    assert not any(lighter.fit(lay, spec).fits for lay in layouts), settings.levers


@pytest.mark.parametrize("name", CASES)
def test_every_serving_replica_on_a_fixture_can_run_inside_the_server(name: str) -> None:
    model, spec = case(name)
    gpus = set(model.gpu_ids)
    for key, shape in PRESETS.items():
        advice = serve(model, shape, 4096, spec=spec)
        for option in advice.options:
            _runs(shape, Layout(option.tp, option.pp, 1), len(gpus))
            taken = [g for replica in option.replica_gpus for g in replica]
            assert all(len(r) == option.tp * option.pp for r in option.replica_gpus)
            assert len(taken) == len(set(taken)) and set(taken) <= gpus, (key, option)
            assert option.replicas == len(gpus) // (option.tp * option.pp)
        best = advice.best
        if best is not None:
            mem = best.memory
            assert mem.total <= mem.gpu_bytes * (1 - _headroom(spec)) + 1, (key, mem)
            assert best.max_concurrency >= advice.concurrency
            # The context asked fits, up to the model's own window (never past it).
            window = shape.context_window or 10**9
            assert min(4096, window) <= best.max_context <= window


@pytest.mark.parametrize("name", CASES)
def test_serving_more_context_or_more_sequences_never_needs_fewer_gpus_a_replica(
    name: str,
) -> None:
    model, spec = case(name)
    big = 10**9
    for key, shape in PRESETS.items():
        for dtype in ("bf16", "fp8"):
            by_context = [
                (b.tp * b.pp if (b := serve(model, shape, c, 8, dtype, spec=spec).best) else big)
                for c in (1024, 4096, 16384, 65536)
            ]
            assert by_context == sorted(by_context), (key, dtype, by_context)
            by_sequences = [
                (b.tp * b.pp if (b := serve(model, shape, 4096, s, dtype, spec=spec).best) else big)
                for s in (1, 8, 64, 512)
            ]
            assert by_sequences == sorted(by_sequences), (key, dtype, by_sequences)


@pytest.mark.parametrize("name", CASES)
def test_a_job_over_such_servers_keeps_every_tp_and_ep_group_inside_one(name: str) -> None:
    model, spec = case(name)
    gpus = tuple(sorted(model.gpu_ids))
    n = len(gpus)
    whole = {s: ServerPool(model, gpus, "rail-1", spec) for s in "ab"}
    # Servers with a GPU taken each: their free GPUs are no whole number of wide groups.
    taken = {s: ServerPool(model, gpus[:-1], "rail-1", spec) for s in "abc"} if n > 1 else {}
    for key, shape in PRESETS.items():
        layouts = layouts_for(shape, 2 * n, n)
        widest = max(lay.tp * lay.ep for lay in layouts)
        # The layouts with the widest TP x EP groups: those most likely to straddle a server.
        for lay in [lay for lay in layouts if lay.tp * lay.ep == widest]:
            _runs(shape, lay, n)
            for pools in (whole, taken) if taken else (whole,):
                try:
                    (job, *_rest) = select_job(pools, layout=lay, shape=shape)
                except ValueError as refused:  # too few whole groups free: said, not split
                    assert pools is taken and "whole TP x EP blocks" in str(refused)
                    continue
                crossing = {d["dimension"] for d in job.network}
                assert not crossing & {"tp", "ep"}, (key, lay, crossing)
                assert all(len(p.gpus) % (lay.tp * lay.ep) == 0 for p in job.parts), (key, lay)
                assert sum(len(p.gpus) for p in job.parts) == lay.size
