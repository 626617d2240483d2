"""Serving advice: how many GPUs a model replica takes (TP x PP), which ones, how many
replicas the server holds, what each GPU's memory holds (weights, KV cache, activations),
the largest context and concurrency that fit, and the time per output token and to the first
token from the GPU's memory bandwidth and FLOPs and the cost model's TP all-reduces.

The arithmetic, stated in every answer (SERVING_ASSUMPTIONS):
- weights: parameters x bytes per weight (bf16 2, fp8 1, int4 0.5), split over TP x PP;
- KV cache: 2 (K and V) x layers x KV heads x head dim x bytes per element per token (bf16;
  fp8 when the weights are fp8, as vLLM's fp8 KV cache), split over TP (KV heads) and PP
  (layers), for context x concurrent sequences;
- activations: one prefill chunk (PREFILL_CHUNK tokens at most) with the residual stream
  whole (2 hidden) and the attention and MLP buffers split over TP (12 hidden / TP), bf16,
  plus fp32 logits for one token of each sequence;
- decode (time per output token): every weight and the whole batch's KV cache read from HBM
  at HBM_ACHIEVED of the catalogue's bandwidth, or the batch's FLOPs at ACHIEVED_FRACTION of
  peak when slower; plus 2 TP all-reduces per layer of concurrency x hidden elements and the
  pipeline's sends, priced by the cost model;
- prefill (time to first token, one request alone): 2 x active parameters x context FLOPs
  plus causal attention (2 x layers x context^2 x hidden), at ACHIEVED_FRACTION of peak (fp8
  peak for fp8 weights where the GPU has it), plus 2 TP all-reduces per layer of context x
  hidden elements and the pipeline's sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topoweb.core.costs import CostModel, collective_cost, slowest_group_us
from topoweb.core.ledger import ModelShape
from topoweb.core.placement.objective import DEFAULT_SHAPE, hierarchy_order
from topoweb.core.placement.selection import best_group
from topoweb.core.steptime import (
    ACHIEVED_FRACTION,
    GpuSpec,
    active_params,
    gpu_spec,
    tensor_parallel_problem,
)

WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}
# The KV cache's element: fp8 with fp8 weights (vLLM's --kv-cache-dtype fp8), else bf16
# (int4 weight-only quantisation keeps a 16-bit cache).
KV_BYTES = {"bf16": 2, "fp8": 1, "int4": 2}
DTYPES = tuple(WEIGHT_BYTES)
# The CUDA compute capability each serving dtype needs in vLLM (docs.vllm.ai, GPU installation
# and quantization's "Supported Hardware"): the engine itself 7.0; bf16 8.0 (older parts run the
# same bytes as fp16); fp8 weights 7.5 (weight-only, FP8 Marlin; fp8 math from 8.9); int4
# weights 7.0 (GPTQ; AWQ from 7.5).
ENGINE_CAPABILITY = 7.0
DTYPE_CAPABILITY = {"bf16": 8.0, "fp8": 7.5, "int4": 7.0}
PREFILL_CHUNK = 8192  # tokens one prefill step takes at most (chunked prefill)
HBM_ACHIEVED = 0.8  # of the catalogue's HBM bandwidth a decode step's reads reach
DEFAULT_CONCURRENCY = 16  # sequences served at once when the question names none
ACTIVATION_BYTES = 2  # bf16 activations
LOGIT_BYTES = 4  # fp32 logits

SERVING_ASSUMPTIONS = (
    "weights at the asked dtype (bf16 2, fp8 1, int4 0.5 bytes) split over TP x PP; KV cache "
    "2 x layers x KV heads x head dim x bytes per token (fp8 with fp8 weights, else bf16) for "
    "context x concurrency; activations of one prefill chunk; decode reads every weight and "
    f"the batch's KV cache at {HBM_ACHIEVED:.0%} of HBM bandwidth (or its FLOPs at "
    f"{ACHIEVED_FRACTION:.0%} of peak when slower); prefill at {ACHIEVED_FRACTION:.0%} of "
    "peak; 2 TP all-reduces per layer priced by the cost model at decode and prefill sizes; "
    "at least 10 % of each GPU kept back (15 % of an assumed memory size)"
)


def kv_bytes_per_token(shape: ModelShape, dtype: str = "bf16") -> int:
    """2 x layers x KV heads x head dim x bytes: the K and V one token adds to the cache."""
    if not shape.heads:
        raise ValueError(f"{shape.name} names no attention heads: its KV cache is unknown")
    return 2 * shape.layers * shape.key_value_heads * shape.head_dim * KV_BYTES[dtype]


@dataclass(frozen=True)
class ServingMemory:
    """Bytes per GPU of one replica's GPUs."""

    weights: float
    kv_cache: float
    activations: float
    capacity: float  # usable (after the reserve)
    gpu_bytes: int

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def to_document(self) -> dict[str, Any]:
        gb = 1e9
        return {
            "weights_gb": round(self.weights / gb, 2),
            "kv_cache_gb": round(self.kv_cache / gb, 2),
            "activations_gb": round(self.activations / gb, 2),
            "total_gb": round(self.total / gb, 2),
            "usable_gb": round(self.capacity / gb, 2),
            "gpu_memory_gb": round(self.gpu_bytes / gb, 2),
            "left_gb": round((self.gpu_bytes - self.total) / gb, 2),
        }


@dataclass(frozen=True)
class ServingOption:
    tp: int
    pp: int
    replicas: int
    replica_gpus: tuple[tuple[int, ...], ...]  # the GPUs of each replica
    memory: ServingMemory
    max_concurrency: int  # at the asked context
    max_context: int  # at the asked concurrency, at most the model's context window
    tpot_ms: float  # time per output token (decode step of the whole batch)
    ttft_ms: float  # time to first token (one request's prefill, alone)
    tp_all_reduce_decode_us: float  # one all-reduce of a decode step
    tp_all_reduce_prefill_us: float  # one all-reduce of a prefill

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    def to_document(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "gpus": sorted(g for r in self.replica_gpus for g in r),
            "replica_gpus": [list(r) for r in self.replica_gpus],
            "fits": self.memory.fits,
            "memory_per_gpu": self.memory.to_document(),
            "max_concurrency": self.max_concurrency,
            "max_context": self.max_context,
            "time_per_output_token_ms": round(self.tpot_ms, 3),
            "time_to_first_token_ms": round(self.ttft_ms, 3),
            "tp_all_reduce_decode_us": round(self.tp_all_reduce_decode_us, 3),
            "tp_all_reduce_prefill_us": round(self.tp_all_reduce_prefill_us, 3),
        }


@dataclass(frozen=True)
class ServingAdvice:
    shape: ModelShape
    dtype: str
    context: int
    concurrency: int
    spec: GpuSpec
    options: tuple[ServingOption, ...]  # fitting ones first, fewest GPUs a replica first
    free: tuple[int, ...]

    @property
    def notes(self) -> tuple[str, ...]:
        """What the question asks beyond what the model or the GPU can do."""
        out = []
        window = self.shape.context_window
        if window and self.context > window:
            out.append(
                f"{self.context} tokens exceed {self.shape.name}'s {window}-token context "
                "window (its model card's max_position_embeddings): serving engines refuse "
                "such a context (vLLM's max_model_len) unless the model is extended (RoPE "
                "scaling); the memory and times are for the tokens asked"
            )
        gpu, capability = self.spec.name, self.spec.compute_capability
        if capability and capability < ENGINE_CAPABILITY:
            out.append(
                f"the {gpu} (compute capability {capability:.1f}) is older than vLLM supports "
                f"({ENGINE_CAPABILITY:.1f}+): serve it with an engine that still builds for it "
                "(llama.cpp)"
            )
        elif capability and capability < DTYPE_CAPABILITY[self.dtype]:
            if self.dtype == "bf16":
                out.append(
                    f"the {gpu} (compute capability {capability:.1f}) has no bf16: engines "
                    "serve the model as fp16, the same bytes (vLLM's --dtype half)"
                )
            else:
                out.append(
                    f"{self.dtype} weights need compute capability "
                    f"{DTYPE_CAPABILITY[self.dtype]:.1f}+ in vLLM; the {gpu} has {capability:.1f}"
                    + (": int4 or bf16/fp16 weights instead" if self.dtype == "fp8" else "")
                )
        return tuple(out)

    @property
    def best(self) -> ServingOption | None:
        return self.options[0] if self.options and self.options[0].memory.fits else None

    def to_document(self) -> dict[str, Any]:
        best = self.best
        message = None
        if best is None:
            message = (
                f"{self.shape.name} ({self.dtype}) with {self.concurrency} sequences of "
                f"{self.context} tokens fits no TP x PP of the {len(self.free)} free "
                f"{self.spec.name} GPUs: serve fewer or shorter sequences, a smaller dtype, "
                "or spread a replica's pipeline over servers"
            )
            # What does fit here, when the weights do: the most sequences of the asked context.
            most = max(self.options, key=lambda o: o.max_concurrency, default=None)
            if most is not None and most.max_concurrency >= 1:
                message += (
                    f"; here at most {most.max_concurrency} sequence"
                    f"{'s' if most.max_concurrency > 1 else ''} of {self.context} tokens fit "
                    f"(TP{most.tp}{f' PP{most.pp}' if most.pp > 1 else ''})"
                )
        return {
            "model": self.shape.to_document(),
            "dtype": self.dtype,
            "context_tokens": self.context,
            "concurrency": self.concurrency,
            "gpu": self.spec.to_document(),
            "assumed": list(self.spec.assumed),
            "notes": list(self.notes),
            "free": list(self.free),
            "kv_bytes_per_token": kv_bytes_per_token(self.shape, self.dtype),
            "kv_bytes_per_token_per_layer": kv_bytes_per_token(self.shape, self.dtype)
            // self.shape.layers,
            "fits": best is not None,
            "recommended": best.to_document() if best else None,
            "message": message,
            "options": [o.to_document() for o in self.options],
            "assumptions": SERVING_ASSUMPTIONS,
        }


def serving_layouts(shape: ModelShape, gpus: int) -> list[tuple[int, int]]:
    """(TP, PP) of one replica on at most `gpus` GPUs: TP divides the attention and KV heads
    and the MLP's hidden units (`tensor_parallel_problem`), PP the layers."""
    out = []
    for tp in range(1, gpus + 1):
        if tensor_parallel_problem(shape, tp):
            continue
        for pp in range(1, gpus // tp + 1):
            if shape.layers % pp == 0:
                out.append((tp, pp))
    return out


def serving_memory(
    shape: ModelShape,
    tp: int,
    pp: int,
    context: int,
    concurrency: int,
    dtype: str,
    spec: GpuSpec,
) -> ServingMemory:
    shard = tp * pp
    weights = shape.params * WEIGHT_BYTES[dtype] / shard
    kv = kv_bytes_per_token(shape, dtype) * context * concurrency / shard
    chunk = min(context, PREFILL_CHUNK)
    acts = chunk * shape.hidden * ACTIVATION_BYTES * (2 + 12 / tp)
    acts += concurrency * shape.vocab * LOGIT_BYTES / tp
    capacity = spec.memory_bytes * (1 - spec.reserve)
    return ServingMemory(weights, kv, acts, capacity, spec.memory_bytes)


def serve(
    model: CostModel,
    shape: ModelShape | None = None,
    context: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    dtype: str = "bf16",
    *,
    spec: GpuSpec | None = None,
    free: Sequence[int] | None = None,
) -> ServingAdvice:
    """Every TP x PP replica of `shape` on the server's free GPUs, with its memory per GPU,
    limits and latency; the recommendation is the fitting replica without a pipeline if any,
    of fewest GPUs (most replicas), then the shortest time per output token."""
    shape = shape or DEFAULT_SHAPE
    if dtype not in WEIGHT_BYTES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    context = context or shape.seq
    if context < 1 or concurrency < 1:
        raise ValueError("context and concurrency must be at least 1")
    kv_bytes_per_token(shape, dtype)  # names the problem when the shape has no heads
    spec = spec or gpu_spec(None, model.hardware.generation.name)
    pool = tuple(sorted(model.check_gpus(free if free is not None else sorted(model.gpu_ids))))
    options = [
        _option(model, shape, tp, pp, context, concurrency, dtype, spec, pool)
        for tp, pp in serving_layouts(shape, len(pool))
    ]
    # Inside a server TP first (a pipeline's stages wait on each other at every token): a
    # replica pipelines only when no TP alone fits.
    options.sort(key=lambda o: (not o.memory.fits, o.pp, o.tp, o.tpot_ms))
    return ServingAdvice(shape, dtype, context, concurrency, spec, tuple(options), pool)


def _option(
    model: CostModel,
    shape: ModelShape,
    tp: int,
    pp: int,
    context: int,
    concurrency: int,
    dtype: str,
    spec: GpuSpec,
    pool: tuple[int, ...],
) -> ServingOption:
    memory = serving_memory(shape, tp, pp, context, concurrency, dtype, spec)
    replicas = _replicas(model, tp * pp, pool)
    first = hierarchy_order(model, list(replicas[0]))
    tp_group = tuple(first[:tp])
    stages = [first[i * tp] for i in range(pp)]  # one GPU of each stage, in pipeline order
    room = memory.capacity - memory.weights - memory.activations
    per_token = kv_bytes_per_token(shape, dtype) / (tp * pp)
    max_concurrency = max(0, int(room // (per_token * context)))
    max_context = max(0, int(room // (per_token * concurrency)))
    if shape.context_window:  # no engine serves more than the model was trained for
        max_context = min(max_context, shape.context_window)
    elem = ACTIVATION_BYTES * shape.hidden
    decode_ar = _all_reduce_us(model, tp_group, concurrency * elem)
    prefill_ar = _all_reduce_us(model, tp_group, context * elem)
    decode_send = _sends_us(model, stages, concurrency * elem)
    prefill_send = _sends_us(model, stages, context * elem)
    peak = (spec.fp8_tflops if dtype == "fp8" and spec.fp8_tflops else spec.peak_tflops) * 1e12
    flops_rate = peak * ACHIEVED_FRACTION * tp
    # Decode: one step of the whole batch reads every weight and the batch's KV cache, stage
    # after stage (so all of the replica's weights over TP's bandwidth).
    read = shape.params * WEIGHT_BYTES[dtype] + kv_bytes_per_token(shape, dtype) * (
        context * concurrency
    )
    memory_s = read / (tp * spec.hbm_gbps * 1e9 * HBM_ACHIEVED) if spec.hbm_gbps else 0.0
    compute_s = 2 * active_params(shape) * concurrency / flops_rate
    comm_us = 2 * shape.layers * decode_ar + decode_send
    tpot_ms = max(memory_s, compute_s) * 1e3 + comm_us / 1e3
    prefill_flops = 2 * active_params(shape) * context + 2 * shape.layers * context**2 * (
        shape.hidden
    )
    ttft_ms = (prefill_flops / flops_rate) * 1e3 + (
        2 * shape.layers * prefill_ar + prefill_send
    ) / 1e3
    return ServingOption(
        tp,
        pp,
        len(replicas),
        replicas,
        memory,
        max_concurrency,
        max_context,
        tpot_ms,
        ttft_ms,
        decode_ar,
        prefill_ar,
    )


def _replicas(model: CostModel, k: int, pool: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Replicas of k GPUs taken one after another, each the best-connected k of the GPUs
    left (all-reduce bus bandwidth)."""
    left = list(pool)
    out = []
    while len(left) >= k:
        group = best_group(model, k, left) if k > 1 else (left[0],)
        out.append(tuple(group))
        left = [g for g in left if g not in group]
    return tuple(out)


def _all_reduce_us(model: CostModel, group: tuple[int, ...], nbytes: int) -> float:
    if len(group) < 2:
        return 0.0
    return collective_cost(model, "all_reduce", group, max(1, nbytes)).time_us


def _sends_us(model: CostModel, stages: list[int], nbytes: int) -> float:
    """One activation passed down the pipeline: each hop in turn."""
    if len(stages) < 2:
        return 0.0
    return sum(
        slowest_group_us(model, "sendrecv", [(a, b)], max(1, nbytes), True)
        for a, b in zip(stages, stages[1:], strict=False)
    )
