"""Training advice a practitioner could run: valid layouts only, the memory levers in their
order, smallest fits monotone in model size, and answers compared with published setups."""

from __future__ import annotations

import csv
import re
from functools import cache

import pytest

from tests.core.topo_fixtures import FIXTURES, TOPO_FILES
from topoweb.core.costs import CostModel, build_model
from topoweb.core.formats.topo import parse
from topoweb.core.ledger import PRESETS, Layout, ModelShape
from topoweb.core.placement import recommend
from topoweb.core.steptime import (
    GpuSpec,
    gpu_spec,
    layouts_for,
    lever_steps,
    memory_fit,
    smallest_fit,
    valid_layout_problem,
)

BY_SIZE = sorted(PRESETS, key=lambda k: PRESETS[k].params)


@cache
def fixture(name: str) -> tuple[CostModel, GpuSpec]:
    """A real capture's cost model and its GPU as INDEX.tsv names it (None where unstated)."""
    with (FIXTURES / "INDEX.tsv").open(encoding="utf-8") as f:
        named = {row["file"]: row["gpu_model"] for row in csv.DictReader(f, delimiter="\t")}
    # As the demo fleet names them (load_demo._gpu_model): notes dropped, a mixed rig by its
    # most common GPU.
    gpu = re.sub(r"\s*\(.*?\)", "", named.get(name, "")).strip()
    gpu = re.sub(r"^\d+x\s+([^+]+?)\s*\+.*$", r"\1", gpu)
    gpu_name = None if not gpu or gpu.startswith("not stated") else gpu
    model = build_model(parse((FIXTURES / name).read_text(encoding="utf-8")), gpu_name)
    return model, gpu_spec(gpu_name, model.hardware.generation.name)


@pytest.mark.parametrize("name", TOPO_FILES)
def test_every_layout_offered_on_a_fixture_is_one_that_can_run(name: str) -> None:
    model, spec = fixture(name)
    n = len(model.gpu_ids)
    for key, shape in PRESETS.items():
        for lay in layouts_for(shape, n):
            assert valid_layout_problem(shape, lay, n) is None, (key, lay)
            kv = shape.kv_heads or shape.heads
            assert shape.heads % lay.tp == 0 and kv % lay.tp == 0
            assert shape.layers % lay.pp == 0
        more = smallest_fit(shape, spec, n, server_gpus=n)
        if more.needed_layout is not None:
            # TP and EP stay inside one server; PP and DP span servers.
            lay = more.needed_layout
            assert valid_layout_problem(shape, lay, n) is None, (key, lay)
            assert n % (lay.tp * lay.ep) == 0


@pytest.mark.parametrize("name", TOPO_FILES)
def test_a_bigger_model_never_needs_fewer_gpus_on_the_same_server_kind(name: str) -> None:
    model, spec = fixture(name)
    n = len(model.gpu_ids)
    counts = []
    for key in BY_SIZE:
        layouts = layouts_for(PRESETS[key], n)
        fits_here = any(lever_steps(PRESETS[key])[-1].fit(lay, spec).fits for lay in layouts)
        need = n if fits_here else smallest_fit(PRESETS[key], spec, n).needed_gpus
        counts.append(need if need is not None else 10**9)
    assert counts == sorted(counts), dict(zip(BY_SIZE, counts, strict=True))


def test_the_gtx_rig_is_priced_as_its_gtx_1070s_and_needs_no_more_gpus_for_13b_than_70b() -> None:
    _model, spec = fixture("topo_04_gtx1070x6-1080-7gpu-pix-phb.txt")
    assert spec.name == "GTX 1070"  # 6x GeForce GTX 1070 + 1x GTX 1080: the header's GPU
    assert gpu_spec("NVIDIA GeForce GTX 1080").name == "GTX 1080"
    need = {k: smallest_fit(PRESETS[k], spec, 7).needed_gpus for k in ("llama-13b", "llama-70b")}
    assert need["llama-13b"] is not None and need["llama-70b"] is not None
    assert need["llama-13b"] <= need["llama-70b"]
    lay = smallest_fit(PRESETS["llama-70b"], spec, 7).needed_layout
    assert lay is not None and lay.tp == 1  # 7 GPUs a server: no TP of 64 heads fits whole


def test_a_tp_that_does_not_divide_the_heads_is_never_offered() -> None:
    # A 3-GPU box and a 32-head model: only DP3 (and no PP3 of 32 layers).
    assert layouts_for(PRESETS["llama-7b"], 3) == [Layout(1, 1, 3)]
    # Llama 70B: 64 heads but 8 KV heads: TP 16 never, even on 16 GPUs of one domain.
    assert all(lay.tp <= 8 for lay in layouts_for(PRESETS["llama-70b"], 16))
    # Mixtral's 8 experts: EP divides them; over 24 GPUs in servers of 12, TP x EP divides a
    # server (no group straddles two), where on one server of 12 any TP x EP may.
    assert any(lay.tp * lay.ep == 8 for lay in layouts_for(PRESETS["mixtral-8x7b"], 16))
    for lay in layouts_for(PRESETS["mixtral-8x7b"], 24, domain=12):
        assert 8 % lay.ep == 0 and 12 % (lay.tp * lay.ep) == 0
    assert not any(lay.tp * lay.ep == 8 for lay in layouts_for(PRESETS["mixtral-8x7b"], 24, 12))
    assert "does not divide the 8 key/value heads" in (
        valid_layout_problem(PRESETS["llama-70b"], Layout(16, 1, 1), 16) or ""
    )


def test_a_tp_that_does_not_divide_the_mlp_is_never_offered_for_training_or_serving() -> None:
    # huggingface.co/meta-llama/Llama-2-13b-hf config.json: 40 heads, intermediate_size 13824
    # (2^9 x 27): TP 5 splits the heads but not the MLP (Megatron and vLLM refuse it).
    shape = PRESETS["llama-13b"]
    assert shape.ffn_hidden == 13824 and shape.heads % 5 == 0
    assert "TP 5 does not divide the MLP's 13824 hidden units" in (
        valid_layout_problem(shape, Layout(5, 1, 2), 10) or ""
    )
    assert {lay.tp for lay in layouts_for(shape, 10)} == {1, 2}
    from topoweb.core.placement.serving import serve

    model, spec = fixture("topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt")
    assert {o.tp for o in serve(model, shape, 4096, spec=spec).options} == {1, 2, 4, 8}


def test_levers_come_in_practitioners_order_and_each_lowers_the_memory() -> None:
    shape = PRESETS["gpt3-175b"]  # micro-batch 4
    steps = lever_steps(shape, zero=0, recompute="none")
    assert [s.levers[-1] for s in steps[1:]] == [
        "micro-batch 4 -> 1",
        "selective activation recomputation",
        "full activation recomputation",
        "ZeRO-1 (optimizer state sharded over DP)",
        "ZeRO-2 (gradients sharded too)",
        "ZeRO-3 / FSDP (weights sharded too)",
    ]
    lay = Layout(8, 8, 4)
    spec = gpu_spec("NVIDIA H100 80GB HBM3")
    totals = [s.fit(lay, spec).total for s in steps]
    assert all(b < a for a, b in zip(totals, totals[1:], strict=False)), totals


def test_memory_keeps_at_least_ten_percent_back_and_fifteen_of_an_assumed_size() -> None:
    named = gpu_spec("NVIDIA H100 80GB HBM3")
    fit = memory_fit(
        PRESETS["llama-7b"], Layout(1, 1, 8), named.memory_bytes, reserve=named.reserve
    )
    assert fit.capacity == pytest.approx(0.9 * named.memory_bytes)
    assert "10% of each GPU is never planned for" in fit.to_document()["kept_back"]
    guessed = gpu_spec(None, "Ampere")
    assert guessed.memory_assumed and guessed.reserve == pytest.approx(0.15)
    assert [a.split(":")[0] for a in guessed.assumed] == ["GPU model", "generation", "memory"]
    # NVML's total is no guess.
    assert not gpu_spec(None, "Ampere", 80 << 30).memory_assumed


def test_a_capture_without_a_gpu_name_says_what_was_assumed_and_fills_at_most_85_percent() -> None:
    model, _spec = fixture("topo_34_4gpu-all-node-single-socket-no-nic-agent-log.txt")
    doc = recommend(model, PRESETS["llama-7b"]).to_document()
    assert any(a.startswith("GPU model:") for a in doc["assumed"])
    assert any(a.startswith("memory:") for a in doc["assumed"])
    for lay in doc["layouts"]:
        if lay["fits"]:
            assert lay["memory"]["total_gb"] <= 0.85 * lay["memory"]["gpu_memory_gb"] + 1e-9


H100 = "NVIDIA H100 80GB HBM3"


def _h100_answer(shape: ModelShape) -> tuple[int, Layout]:
    """The GPU count and layout recommended for `shape` on 8x H100 servers: the server itself
    when a layout fits there (levers pulled as needed), else the smallest fit over servers."""
    model, _ = fixture("topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt")
    spec = gpu_spec(H100)
    rec = recommend(model, shape, spec=spec, time_budget_s=0.05)
    if rec.best is not None:
        return 8, rec.best.layout
    assert rec.no_fit is not None and rec.no_fit.needed_gpus and rec.no_fit.needed_layout
    return rec.no_fit.needed_gpus, rec.no_fit.needed_layout


# Published training setups: the GPUs one copy of the model was trained on (a model-parallel
# group, or the whole run where it fit one node).
PUBLISHED = {
    # NVIDIA NeMo, nemo/collections/llm/recipes/llama2_7b.py: pretrain_recipe num_nodes=1,
    # num_gpus_per_node=8, TP2 PP1.
    "llama-7b": 8,
    # Narayanan et al. 2021 (arXiv 2104.04473), Table 1: the 18.4B GPT on TP8 PP1: 8 GPUs a
    # model copy (a 13B model sits between its 7.5B TP4 and 18.4B TP8 rows).
    "llama-13b": 8,
    # NeMo nemo/collections/llm/recipes/mixtral_8x7b.py: pretrain_recipe num_nodes=2 of 8.
    "mixtral-8x7b": 16,
    # NeMo nemo/collections/llm/recipes/llama3_70b.py: TP4 PP4 CP2 (32 GPUs a model copy),
    # full fine-tuning TP8 PP4 on at least 4 nodes of 8; Narayanan et al. 2021, Table 1:
    # 76.1B on TP8 PP4 (32).
    "llama-70b": 32,
    # Narayanan et al. 2021, Table 1: 145.6B on TP8 PP8 (64 GPUs a model copy), 310.1B on
    # TP8 PP16 (128): GPT-3 175B between them.
    "gpt3-175b": 64,
}


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_each_presets_answer_on_8x_h100_servers_is_within_a_factor_of_two_of_published_practice(
    key: str,
) -> None:
    count, lay = _h100_answer(PRESETS[key])
    assert PUBLISHED[key] / 2 <= count <= PUBLISHED[key] * 2, (count, lay)
    assert lay.tp <= 8 and 8 % (lay.tp * lay.ep) == 0  # TP and EP inside one server


def test_llama_70b_over_two_h100_servers_is_tp8_inside_each_server() -> None:
    count, lay = _h100_answer(PRESETS["llama-70b"])
    assert count == 16 and lay.tp == 8 and lay.pp * lay.dp == 2


def test_the_smallest_fit_over_servers_says_its_memory_per_gpu_and_the_headroom_kept() -> None:
    model, _ = fixture("topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt")
    spec = gpu_spec(H100)
    rec = recommend(model, PRESETS["llama-70b"], spec=spec, time_budget_s=0.05)
    assert rec.no_fit is not None and rec.no_fit.memory is not None
    doc = rec.no_fit.to_document(spec, 8)
    mem = doc["memory"]
    # The layout it names, under the levers it names, as memory_fit prices it.
    lay = Layout(**doc["smallest_layout"])
    settings = next(s for s in lever_steps(PRESETS["llama-70b"]) if list(s.levers) == doc["levers"])
    assert mem["total_gb"] == round(settings.fit(lay, spec).total / 1e9, 2)
    assert mem["fits"] and mem["left_fraction"] >= 0.10 and "10% of each GPU" in mem["kept_back"]
    assert f"{mem['left_gb']:.1f} GB left; 10% kept back" in doc["message"]


def test_a_smallest_fit_of_one_whole_server_says_one_server() -> None:
    model, _ = fixture("topo_01_h200-8gpu-12nic-numaid.txt")
    spec = gpu_spec("NVIDIA H200", memory_bytes=143_771_000_832)
    rec = recommend(model, PRESETS["mixtral-8x7b"], [0, 1, 2, 3], spec=spec, time_budget_s=0.02)
    assert rec.no_fit is not None and rec.no_fit.needed_gpus == 8
    message = rec.to_document()["no_fit"]["message"]
    assert "needs at least 8x H200 (144 GB, 1 server), e.g." in message


def test_a_layout_job_on_one_server_pulls_the_levers_it_would_pull_over_servers() -> None:
    from tests.core import topologies as T
    from topoweb.core.placement import ServerPool, select_job

    h100 = build_model(T.h200_nv18_12nic(), H100)
    spec = gpu_spec(H100)
    shape, lay = PRESETS["llama-13b"], Layout(1, 1, 8)
    # 13B with ZeRO-1 needs more than 90 % of 80 GiB a GPU as asked; full recomputation
    # frees its activations.
    assert not memory_fit(shape, lay, spec.memory_bytes).fits
    one = {"a": ServerPool(h100, tuple(range(8)), "rail-1", spec)}
    halves = {n: ServerPool(h100, tuple(range(4)), "rail-1", spec) for n in ("a", "b")}
    for servers in (one, halves):
        (job, *_rest) = select_job(servers, layout=lay, shape=shape)
        doc = job.to_document()
        assert job.fits and doc["levers"] == ["full activation recomputation"], job.reason
        assert job.reason.endswith("(full activation recomputation)")
        assert doc["memory"]["recompute"] == "full" and doc["memory"]["left_gb"] > 0
        assert doc["memory"]["left_fraction"] >= 0.10


def test_a_placement_asked_to_pull_levers_names_those_its_layout_needs_to_fit() -> None:
    from topoweb.core.placement import place

    model, _ = fixture("topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt")
    spec = gpu_spec(H100)
    shape, lay = PRESETS["llama-13b"], Layout(1, 1, 8)
    as_asked = place(model, lay, shape=shape, spec=spec, time_budget_s=0.05)
    assert not as_asked.memory.fits and as_asked.to_document()["levers"] == []
    pulled = place(model, lay, shape=shape, spec=spec, time_budget_s=0.05, pull_levers=True)
    doc = pulled.to_document()
    assert doc["fits"] and doc["levers"] == ["full activation recomputation"]
    assert doc["memory"]["recompute"] == "full" and doc["memory"]["left_fraction"] >= 0.10
    # Full recomputation runs the forward pass again: the step takes longer than as asked.
    assert pulled.step_us > as_asked.step_us
    # ZeRO-0 asked on 141 GB H200s: full recomputation (pulled first) does not make room for
    # 12 bytes of Adam state a parameter, ZeRO-1 does, and then it alone is needed: the answer
    # keeps selective recomputation and names ZeRO-1 only.
    h200 = gpu_spec("NVIDIA H200", memory_bytes=143_771_000_832)
    assert not memory_fit(shape, lay, h200.memory_bytes, 0, recompute="full").fits
    zero0 = place(model, lay, shape=shape, spec=h200, zero=0, time_budget_s=0.05, pull_levers=True)
    assert zero0.levers == ("ZeRO-1 (optimizer state sharded over DP)",)
    assert zero0.memory.recompute == "selective" and zero0.memory.fits


def test_tp8_pp2_on_two_free_h200_servers_keeps_tp_inside_and_sends_stages_over_the_network() -> (
    None
):
    from tests.core import topologies as T
    from topoweb.core.placement import ServerPool, select_job

    h200 = build_model(T.h200_nv18_12nic(), "NVIDIA H200")
    spec = gpu_spec("NVIDIA H200", memory_bytes=143_771_000_832)  # NVML's total of an H200
    servers = {
        "a": ServerPool(h200, tuple(range(8)), "rail-1", spec),
        "b": ServerPool(h200, tuple(range(8)), "rail-1", spec),
    }
    (job, *_rest) = select_job(servers, layout=Layout(8, 2, 1), shape=PRESETS["llama-70b"])
    doc = job.to_document()
    assert [(p["server"], p["gpus"]) for p in doc["servers"]] == [
        ("a", list(range(8))),
        ("b", list(range(8))),
    ]
    assert job.fits and "(" not in job.reason  # 141 GB a GPU: no lever needed
    # Only the pipeline crosses: 8 chains (one per TP rank, through its own nearest NIC),
    # each sending its 1/8 of the activation forward and its gradient back per micro-batch.
    (pp,) = doc["network"]
    shape = PRESETS["llama-70b"]
    activation = shape.micro_batch * shape.seq * shape.hidden * shape.bytes_per_elem
    micro_batches = shape.global_batch // shape.micro_batch
    assert pp["dimension"] == "pp" and pp["groups_crossing"] == 8
    assert pp["bytes_per_step"] == pytest.approx(8 * 2 * micro_batches * activation / 8)
    assert 0 < job.inter_node_us < job.predicted_us
    # DP over the two servers instead: the gradients cross.
    (dp_job, *_rest) = select_job(servers, layout=Layout(8, 1, 2), shape=shape)
    assert [d["dimension"] for d in dp_job.to_document()["network"]] == ["dp"]
    # On 80 GB GPUs the same job fits once full recomputation is on, and says so.
    h100 = gpu_spec(H100)
    small = {n: ServerPool(h200, tuple(range(8)), "rail-1", h100) for n in ("a", "b")}
    (tight, *_rest) = select_job(small, layout=Layout(8, 2, 1), shape=shape)
    assert tight.fits and tight.reason.endswith("(full activation recomputation)")
    # TP16 would straddle the servers: never offered, named as the blocks it needs.
    with pytest.raises(ValueError, match="whole TP x EP blocks of 16"):
        select_job(servers, layout=Layout(16, 1, 1), shape=PRESETS["gpt3-175b"])
    # Unless the caller allows it: then its all-reduces are what crosses, every layer.
    (wide, *_rest) = select_job(
        servers, layout=Layout(16, 1, 1), shape=PRESETS["gpt3-175b"], allow_tp_across_servers=True
    )
    assert "TP across servers (allowed by the caller)" in wide.reason
    assert [d["dimension"] for d in wide.to_document()["network"]] == ["tp"]


def test_a_job_over_servers_of_different_gpus_is_judged_by_the_smallest_and_slowest() -> None:
    from tests.core import topologies as T
    from topoweb.core.placement import ServerPool, select_job

    wiring = build_model(T.h200_nv18_12nic(), "NVIDIA H200")
    h200 = gpu_spec("NVIDIA H200", memory_bytes=143_771_000_832)
    h100 = gpu_spec(H100)
    shape, lay = PRESETS["llama-70b"], Layout(8, 2, 1)
    mixed = {
        "a-h200": ServerPool(wiring, tuple(range(8)), "rail-1", h200),
        "b-h100": ServerPool(wiring, tuple(range(8)), "rail-1", h100),
    }
    (job, *_rest) = select_job(mixed, layout=lay, shape=shape)
    # Every rank holds 1/16 of the model: the H100's 80 GiB needs full recomputation, as two
    # H100 servers do, whichever server the pipeline starts on.
    (both_h100, *_rest) = select_job(
        {n: ServerPool(wiring, tuple(range(8)), "rail-1", h100) for n in ("a", "b")},
        layout=lay, shape=shape,
    )  # fmt: skip
    assert job.levers == both_h100.levers == ("full activation recomputation",)
    assert job.memory is not None and job.memory.gpu_bytes == h100.memory_bytes
    # Compute at the H100's peak (the same as the H200's: only the memory differs here).
    assert job.predicted_us == pytest.approx(both_h100.predicted_us, rel=1e-6)


def test_a_job_whose_tp_does_not_divide_the_kv_heads_is_refused_before_any_search() -> None:
    from tests.core import topologies as T
    from topoweb.core.placement import ServerPool, select_job

    h200 = build_model(T.h200_nv18_12nic(), "NVIDIA H200")
    servers = {n: ServerPool(h200, tuple(range(8)), "rail-1") for n in ("a", "b")}
    with pytest.raises(ValueError, match="TP 16 does not divide the 8 key/value heads"):
        select_job(
            servers, layout=Layout(16, 1, 1), shape=PRESETS["llama-70b"],
            allow_tp_across_servers=True,
        )  # fmt: skip


def _tray_facts(cluster: str, clique: int | None) -> dict[str, object]:
    """NVML facts of a 4-GPU tray as the collector sends them, with the fabric's clique."""
    fabric = {"cluster_uuid": cluster, "clique_id": clique} if clique is not None else None
    return {
        "available": True,
        "gpus": [
            {"index": i, "name": "NVIDIA H100 80GB HBM3", **({"fabric": fabric} if fabric else {})}
            for i in range(4)
        ],
    }


def test_tp8_spans_two_4_gpu_servers_of_one_nvlink_clique_and_only_of_one() -> None:
    from tests.core import topologies as T
    from topoweb.core.formats.nvml import nvlink_domain
    from topoweb.core.placement import ServerPool, select_job

    tray = build_model(T.from_function(4, lambda i, j: "NV18", lambda i: i // 2), H100)
    spec = gpu_spec(H100)
    cluster = "5d1f6b1e-8c4a-4c1b-9d6e-1a2b3c4d5e6f"

    def pools(*facts: dict[str, object]) -> dict[str, ServerPool]:
        return {
            f"tray{n}": ServerPool(tray, tuple(range(4)), "rail-1", spec, None, nvlink_domain(f))
            for n, f in enumerate(facts)
        }

    shape, tp8 = PRESETS["llama-7b"], Layout(8, 1, 1)
    one = pools(_tray_facts(cluster, 3), _tray_facts(cluster.upper(), 3))
    assert {p.nvlink_domain for p in one.values()} == {f"{cluster}/3"}
    (job, *_rest) = select_job(one, layout=tp8, shape=shape)
    assert [p.server for p in job.parts] == ["tray0", "tray1"]
    assert "TP inside one NVLink domain" in job.reason
    # Its all-reduces stay on NVLink: nothing crosses the network, and TP over the network
    # (what the flag allows between servers of no shared domain) costs more.
    assert job.network == () and job.inter_node_us == 0.0
    apart = pools(_tray_facts(cluster, 3), _tray_facts(cluster, 4))
    (wide, *_rest) = select_job(apart, layout=tp8, shape=shape, allow_tp_across_servers=True)
    assert [d["dimension"] for d in wide.network] == ["tp"]
    assert job.predicted_us < wide.predicted_us
    # Different cliques, no facts, or an all-zero cluster: TP stays inside a server, as before.
    zero = "00000000-0000-0000-0000-000000000000"
    for facts in (apart, pools({}, {}), pools(_tray_facts(zero, 0), _tray_facts(zero, 0))):
        with pytest.raises(ValueError, match="whole TP x EP blocks of 8"):
            select_job(facts, layout=tp8, shape=shape)
    assert {p.nvlink_domain for p in pools({}, _tray_facts(zero, 0)).values()} == {""}
