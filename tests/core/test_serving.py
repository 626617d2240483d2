"""Serving advice: GPUs per replica, replicas, memory per GPU (weights, KV cache,
activations), the largest context and concurrency, and latency from bandwidth and FLOPs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.core.topo_fixtures import FIXTURES
from topoweb.core.costs import CostModel, build_model
from topoweb.core.formats.topo import parse
from topoweb.core.ledger import PRESETS
from topoweb.core.placement.serving import kv_bytes_per_token, serve, serving_memory
from topoweb.core.steptime import gpu_spec

H100 = "NVIDIA H100 80GB HBM3"
H100_BOX = "topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"
ROOT = Path(__file__).resolve().parents[2]


def _model(name: str, gpu: str | None) -> CostModel:
    return build_model(parse((FIXTURES / name).read_text(encoding="utf-8")), gpu)


@pytest.mark.parametrize(
    ("key", "layers", "kv_heads", "head_dim"),
    [
        # huggingface.co/meta-llama/Llama-2-7b-hf config.json: 32 layers, 32 KV heads, 4096/32
        ("llama-7b", 32, 32, 128),
        # huggingface.co/meta-llama/Llama-2-70b-hf config.json: 80 layers, 8 KV heads, 8192/64
        ("llama-70b", 80, 8, 128),
        # huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, 8 KV heads, 4096/32
        ("mixtral-8x7b", 32, 8, 128),
        # Brown et al. 2020, Table 2.1: 96 layers, 96 heads of 128 (multi-head attention)
        ("gpt3-175b", 96, 96, 128),
    ],
)
def test_kv_cache_bytes_per_token_are_2_x_layers_x_kv_heads_x_head_dim_x_bytes(
    key: str, layers: int, kv_heads: int, head_dim: int
) -> None:
    shape = PRESETS[key]
    assert kv_bytes_per_token(shape, "bf16") == 2 * layers * kv_heads * head_dim * 2
    assert kv_bytes_per_token(shape, "fp8") == 2 * layers * kv_heads * head_dim * 1
    # And the memory a replica holds for it: context x concurrency, split over TP x PP.
    mem = serving_memory(shape, 2, 2, 8192, 4, "bf16", gpu_spec(H100))
    assert mem.kv_cache == pytest.approx(2 * layers * kv_heads * head_dim * 2 * 8192 * 4 / 4)


def test_llama_7b_on_8_h100s_is_tp1_with_a_replica_per_gpu() -> None:
    doc = serve(_model(H100_BOX, H100), PRESETS["llama-7b"], 4096, spec=gpu_spec(H100))
    best = doc.to_document()["recommended"]
    assert (best["tp"], best["pp"]) == (1, 1) and best["replicas"] == 8
    assert best["gpus"] == list(range(8)) and best["memory_per_gpu"]["weights_gb"] == 13.4


def test_llama_70b_bf16_at_8k_context_is_tp4_or_tp8_never_tp1_or_tp2() -> None:
    advice = serve(_model(H100_BOX, H100), PRESETS["llama-70b"], 8192, spec=gpu_spec(H100))
    best = advice.best
    assert best is not None and best.tp in (4, 8) and best.pp == 1
    assert all(not o.memory.fits for o in advice.options if o.tp * o.pp <= 2)
    # Two TP4 replicas on the 8 GPUs, each inside one server, never sharing a GPU.
    assert best.replicas == 8 // best.tp
    assert len({g for r in best.replica_gpus for g in r}) == best.replicas * best.tp


def test_the_largest_concurrency_and_context_are_the_last_that_fit() -> None:
    spec = gpu_spec(H100)
    # A 70B trained for long contexts (no window: the memory alone sets the largest context).
    shape = replace(PRESETS["llama-70b"], context_window=0)
    advice = serve(_model(H100_BOX, H100), shape, 8192, 8, spec=spec)
    best = advice.best
    assert best is not None
    at = lambda ctx, n: serving_memory(shape, best.tp, best.pp, ctx, n, "bf16", spec)  # noqa: E731
    assert at(8192, best.max_concurrency).fits and not at(8192, best.max_concurrency + 1).fits
    # (activations grow with the context up to a prefill chunk: past it only the KV cache)
    assert at(best.max_context, 8).fits and not at(best.max_context + 64, 8).fits


@pytest.mark.parametrize(
    ("key", "window"),
    [
        # huggingface.co/meta-llama/Llama-2-70b-hf config.json: max_position_embeddings 4096
        ("llama-70b", 4096),
        # huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: max_position_embeddings 32768
        ("mixtral-8x7b", 32768),
    ],
)
def test_no_answer_offers_a_context_past_the_models_window_and_asking_for_one_is_said(
    key: str, window: int
) -> None:
    model, spec = _model(H100_BOX, H100), gpu_spec(H100)
    within = serve(model, PRESETS[key], window, 1, "fp8", spec=spec)
    assert within.notes == ()
    # One sequence in fp8 leaves room for far more than the window: the window is the limit.
    assert all(o.max_context == window for o in within.options if o.memory.fits)
    past = serve(model, PRESETS[key], 2 * window, 1, "fp8", spec=spec).to_document()
    (note,) = past["notes"]
    assert f"{2 * window} tokens exceed" in note and f"{window}-token context window" in note
    assert past["recommended"]["max_context"] == window


@pytest.mark.parametrize(
    ("gpu", "dtype", "said"),
    [
        # docs.vllm.ai, quantization's Supported Hardware: FP8 Marlin (weight-only) from
        # Turing (7.5), fp8 math from Ada (8.9); GPTQ int4 from Volta (7.0); bf16 from 8.0.
        ("Tesla V100-SXM2-32GB", "fp8", "fp8 weights need compute capability 7.5+"),
        ("Tesla V100-SXM2-32GB", "bf16", "has no bf16: engines serve the model as fp16"),
        ("Tesla T4", "bf16", "has no bf16"),
        ("NVIDIA GeForce GTX 1070", "int4", "older than vLLM supports (7.0+)"),
        ("Tesla V100-SXM2-32GB", "int4", None),
        ("Tesla T4", "fp8", None),
        ("NVIDIA A100-SXM4-80GB", "fp8", None),
        (H100, "bf16", None),
    ],
)
def test_a_dtype_the_gpu_cannot_serve_is_said_beside_the_answer(
    gpu: str, dtype: str, said: str | None
) -> None:
    model = _model("topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt", gpu)
    notes = serve(model, PRESETS["llama-7b"], 4096, 8, dtype, spec=gpu_spec(gpu)).notes
    if said is None:
        assert notes == ()
    else:
        (note,) = notes
        assert said in note


def test_fp8_and_int4_weights_shrink_memory_and_fp8_prefills_at_the_fp8_peak() -> None:
    model = _model(H100_BOX, H100)
    spec = gpu_spec(H100)
    bf16, fp8, int4 = (
        serve(model, PRESETS["llama-70b"], 8192, 16, dtype, spec=spec).options
        for dtype in ("bf16", "fp8", "int4")
    )
    pick = lambda opts: next(o for o in opts if (o.tp, o.pp) == (8, 1))  # noqa: E731
    assert pick(fp8).memory.weights == pytest.approx(pick(bf16).memory.weights / 2)
    assert pick(int4).memory.weights == pytest.approx(pick(bf16).memory.weights / 4)
    assert pick(fp8).ttft_ms < pick(bf16).ttft_ms
    # Decode is memory-bound: fewer bytes read, less time per token.
    assert pick(int4).tpot_ms < pick(bf16).tpot_ms


def test_latency_counts_the_tp_all_reduces_at_decode_and_prefill_sizes() -> None:
    advice = serve(_model(H100_BOX, H100), PRESETS["llama-70b"], 8192, 16, spec=gpu_spec(H100))
    tp8 = next(o for o in advice.options if (o.tp, o.pp) == (8, 1))
    tp4 = next(o for o in advice.options if (o.tp, o.pp) == (4, 1))
    assert 0 < tp8.tp_all_reduce_decode_us < tp8.tp_all_reduce_prefill_us
    assert tp8.tpot_ms < tp4.tpot_ms  # twice the HBM bandwidth behind each token
    tp1 = next(o for o in advice.options if (o.tp, o.pp) == (1, 1))
    assert tp1.tp_all_reduce_decode_us == 0.0


def test_a_capture_without_a_gpu_name_says_what_it_assumed_and_plans_85_percent() -> None:
    model = _model("topo_34_4gpu-all-node-single-socket-no-nic-agent-log.txt", None)
    doc = serve(model, PRESETS["llama-7b"], 4096).to_document()
    assert [a.split(":")[0] for a in doc["assumed"]] == ["GPU model", "generation", "memory"]
    for option in doc["options"]:
        mem = option["memory_per_gpu"]
        assert mem["usable_gb"] == pytest.approx(0.85 * mem["gpu_memory_gb"], abs=0.02)
        if option["fits"]:
            assert mem["total_gb"] <= 0.85 * mem["gpu_memory_gb"] + 0.01


def test_a_model_that_fits_no_replica_says_so() -> None:
    doc = serve(
        _model("topo_17_rtx3090-2gpu-nv4-bridge-numaid-trailing-prompt.txt", "RTX 3090"),
        PRESETS["gpt3-175b"],
        2048,
    ).to_document()
    assert doc["recommended"] is None and "fits no TP x PP" in doc["message"]


def test_a_question_too_big_for_the_server_is_told_the_most_sequences_that_do_fit() -> None:
    model = _model("topo_17_rtx3090-2gpu-nv4-bridge-numaid-trailing-prompt.txt", "RTX 3090")
    shape = PRESETS["llama-7b"]
    doc = serve(model, shape, 4096, 64).to_document()
    assert doc["recommended"] is None
    found = re.search(r"at most (\d+) sequences of 4096 tokens fit \(TP(\d+)\)", doc["message"])
    assert found is not None, doc["message"]
    most, tp = int(found.group(1)), int(found.group(2))
    # Exactly that many: one more and the same replica no longer fits.
    assert serve(model, shape, 4096, most).best is not None
    fits = serve(model, shape, 4096, most + 1).options
    assert not next(o for o in fits if (o.tp, o.pp) == (tp, 1)).memory.fits


def test_the_cli_prints_the_recommended_replica_as_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", "serve", str(FIXTURES / H100_BOX),
         "--model", "llama-70b", "--context", "8192", "--concurrency", "16",
         "--dtype", "fp8", "--gpu-model", H100],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)["recommended"]
    assert {"tp", "pp", "replicas", "gpus", "memory_per_gpu"} <= set(best)
    assert best["tp"] in (2, 4, 8) and best["memory_per_gpu"]["weights_gb"] == 70 / best["tp"]
    bad = subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", "serve", str(FIXTURES / H100_BOX),
         "--model", "llama-70b", "--context", "8192", "--dtype", "fp4"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "fp4" in bad.stderr
