"""Predicted training step time and per-GPU memory of a TP x PP x DP (x EP) layout.

The step of one data-parallel replica under 1F1B with m micro-batches (m = global batch /
(micro-batch x DP)) is, per pipeline stage and micro-batch, its compute plus the collectives
on its critical path; the pipeline adds (PP - 1) such micro-batch slots of bubble, and the
gradient reduction adds what does not hide behind the last backward pass:

    step = m x (compute + TP + EP + PP sends)        (every micro-batch, every stage)
         + (PP - 1) x (compute + TP + EP + PP sends)  (1F1B bubble: fill and drain)
         + exposed DP gradient reduction

Figures and assumptions (stated in every answer):
- compute: 6 x active parameters + 12 x layers x hidden x seq FLOPs per token (forward and
  backward, attention scores included), at ACHIEVED_FRACTION of the GPU's dense bf16 peak.
- TP: Megatron's 2 forward + 2 backward AllReduces per layer are not overlapped.
- EP: the MoE dispatch and combine AlltoAlls (forward and backward) are not overlapped.
- DP: the gradient AllReduce (ZeRO: ReduceScatter + AllGather, the same bytes) overlaps with
  the backward pass of the last micro-batch (two thirds of its compute); at least
  DP_EXPOSED_MIN of it (the last bucket) is always exposed.
- memory: bf16 weights and gradients, fp32 master weights + Adam moments (12 bytes a
  parameter), ZeRO-1 shards the optimizer state over DP, ZeRO-2 the gradients too; activations
  with flash attention (Korthikanti et al. 2022, 10 + 24/TP bytes per token per hidden unit
  and layer, 34/TP with sequence parallelism) for the micro-batches 1F1B keeps in flight on
  the first stage (min(PP, m)), plus the fp32 logits; MEMORY_RESERVE of each GPU is kept for
  the CUDA context, NCCL buffers and allocator fragmentation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from topoweb.core.gpunames import models_text
from topoweb.core.ledger import Layout, ModelShape, ledger

# A real H200 (tests/fixtures/device_01_h200-1gpu-firecracker-vm-torch-copy-gemm.json) ran bf16
# GEMMs at 542-803 TFLOP/s of 989 dense peak (0.55-0.81); a whole training step also runs
# attention, norms and the optimizer, and well-tuned Megatron runs report 0.4-0.55 of peak.
ACHIEVED_FRACTION = 0.5
BACKWARD_SHARE = 2 / 3  # backward is two of the three matmul passes
DP_EXPOSED_MIN = 0.1  # the last gradient bucket cannot overlap anything
# Of each GPU's memory, never planned for: the CUDA context, NCCL buffers and allocator
# fragmentation (at least 10 %, as practitioners keep); more when the size is a guess.
MEMORY_RESERVE = 0.10
ASSUMED_MEMORY_RESERVE = 0.15
ADAM_STATE_BYTES = 12  # fp32 master weights, momentum and variance per parameter
GIB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_tflops: float  # dense bf16 (fp16 before Ampere; fp32 without tensor cores) throughput
    memory_bytes: int
    source: str  # where the figures come from
    hbm_gbps: float = 0.0  # memory bandwidth, GB/s (serving's decode reads every weight)
    fp8_tflops: float = 0.0  # dense fp8 tensor throughput; 0: no fp8 tensor cores
    # What was guessed rather than read (GPU model, generation, memory), said in every answer.
    assumed: tuple[str, ...] = ()
    memory_assumed: bool = False  # the memory size is a catalogue guess: keep more back
    compute_capability: float = 0.0  # CUDA's (7.0 Volta ... 9.0 Hopper); 0: unknown

    @property
    def reserve(self) -> float:
        """The share of memory never planned for: MEMORY_RESERVE, ASSUMED_MEMORY_RESERVE when
        the size itself is a guess."""
        return ASSUMED_MEMORY_RESERVE if self.memory_assumed else MEMORY_RESERVE

    def to_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "peak_tflops": self.peak_tflops,
            "fp8_tflops": self.fp8_tflops,
            "hbm_gbps": self.hbm_gbps,
            "memory_gb": round(self.memory_bytes / 1e9, 1),
            "usable_fraction": round(1 - self.reserve, 2),
            "compute_capability": self.compute_capability,
            "source": self.source,
            "assumed": list(self.assumed),
        }


# (name pattern, label, dense bf16/fp16 tensor TFLOP/s, memory GB, HBM GB/s, dense fp8 TFLOP/s,
# CUDA compute capability); first match wins. From NVIDIA's datasheets (dense figures: the
# sparse ones are twice these): H100/H200 (nvidia.com/en-us/data-center/h100, /h200), B200/GB200
# (DGX B200 and GB200 NVL72 datasheets, per GPU), A100 (A100 datasheet: 1,555 GB/s for 40 GB,
# 2,039 for 80 GB SXM), L40S/L40 (L40S and L40 datasheets), RTX and GeForce parts from their
# product pages (memory bandwidth), consumer parts without tensor cores (GTX 10x0) at their fp32
# rate; compute capabilities from NVIDIA's list (developer.nvidia.com/cuda-gpus).
_GPU_TABLE: tuple[tuple[str, str, float, float, float, float, float], ...] = (
    (r"GB200", "GB200", 2500, 186, 8000, 5000, 10.0),
    (r"B200", "B200", 2250, 180, 8000, 4500, 10.0),
    (r"H200", "H200", 989, 141, 4800, 1979, 9.0),
    (r"H100.*PCIe|H100 PCIE", "H100 PCIe", 756, 80, 2000, 1513, 9.0),
    (r"H100.*NVL", "H100 NVL", 835, 94, 3900, 1671, 9.0),
    (r"H100|H800", "H100 SXM", 989, 80, 3350, 1979, 9.0),
    (r"H20\b", "H20", 148, 96, 4000, 296, 9.0),
    (r"A100.*40GB|A100-SXM4-40GB|A100-PCIE-40GB", "A100 40GB", 312, 40, 1555, 0, 8.0),
    (r"A100|A800", "A100 80GB", 312, 80, 2039, 0, 8.0),
    (r"L40S", "L40S", 362, 48, 864, 733, 8.9),
    (r"L40\b", "L40", 181, 48, 864, 362, 8.9),
    (r"RTX 6000 Ada|Ada Generation", "RTX 6000 Ada", 364, 48, 960, 728, 8.9),
    (r"RTX 5090", "RTX 5090", 209, 32, 1792, 419, 12.0),
    (r"RTX 4090", "RTX 4090", 165, 24, 1008, 330, 8.9),
    (r"RTX A6000|A40\b", "RTX A6000", 155, 48, 768, 0, 8.6),
    (r"RTX 3090", "RTX 3090", 71, 24, 936, 0, 8.6),
    (r"V100.*32GB", "V100 32GB", 125, 32, 900, 0, 7.0),
    (r"V100", "V100 16GB", 125, 16, 900, 0, 7.0),
    (r"RTX 2080 Ti", "RTX 2080 Ti", 57, 11, 616, 0, 7.5),
    (r"T4\b", "T4", 65, 16, 320, 0, 7.5),
    (r"P100", "P100", 21, 16, 732, 0, 6.0),
    (r"P40", "P40", 12, 24, 346, 0, 6.1),
    (r"GTX 1080 Ti", "GTX 1080 Ti", 11.3, 11, 484, 0, 6.1),
    (r"GTX 1080", "GTX 1080", 8.9, 8, 320, 0, 6.1),
    (r"GTX 1070", "GTX 1070", 6.5, 8, 256, 0, 6.1),
    (r"M60", "M60", 5, 8, 160, 0, 5.2),
    (r"K80", "K80", 4, 12, 240, 0, 3.7),
)
# By generation when the name is unknown (the cost model's inference from the matrix): the
# label of the generation's usual part in _GPU_TABLE.
_GENERATION_DEFAULT: dict[str, str] = {
    "Blackwell": "B200",
    "Hopper": "H100 SXM",
    "Hopper-H800": "H100 SXM",
    "Ampere": "A100 80GB",
    "Ampere-A800": "A100 80GB",
    "Ampere-sm86": "RTX A6000",
    "Ada": "L40S",
    "Blackwell-consumer": "RTX 5090",
    "Volta": "V100 32GB",
    "Volta-PCIe": "V100 16GB",
    "Turing": "T4",
    "Pascal-NVLink": "P100",
    "Pascal": "P40",
    "Maxwell": "M60",
    "Kepler": "K80",
}
_BY_LABEL = {row[1]: row for row in _GPU_TABLE}


def gpu_spec(
    gpu_model: str | None, generation: str | None = None, memory_bytes: int | None = None
) -> GpuSpec:
    """Peak, memory and bandwidth of a GPU from its NVML name (a "80GB" in the name wins for
    memory), else its generation's usual part; `memory_bytes` (NVML's total) overrides the
    memory. What had to be guessed is listed in `assumed`."""
    row = _catalogue_row(gpu_model)
    assumed: list[str] = []
    if row is not None:
        source = f"catalogue ({gpu_model!r} is {row[1]})"
    else:
        row = _BY_LABEL[_GENERATION_DEFAULT.get(generation or "", "L40S")]
        source = f"catalogue (assumed {row[1]} from the {generation or 'default'} generation)"
        why = f"{gpu_model!r} is not in the catalogue" if gpu_model else "the capture names no GPU"
        assumed.append(f"GPU model: {row[1]} ({why}; the usual {generation or 'default'} part)")
        if not gpu_model:
            assumed.append(f"generation: {generation or 'unknown'} (read from the link matrix)")
    _pattern, label, tflops, gb, hbm, fp8, capability = row
    memory = int(gb * 1e9)
    memory_assumed = True
    named = re.search(r"(\d+)\s*GB", gpu_model or "", re.IGNORECASE)
    if named:
        memory, memory_assumed = int(named.group(1)) * GIB, False
    if memory_bytes:
        memory, memory_assumed = int(memory_bytes), False
        source += "; memory from NVML"
    if memory_assumed:
        assumed.append(
            f"memory: {gb:g} GB per GPU (the catalogue's {label}; no NVML total): at most "
            f"{1 - ASSUMED_MEMORY_RESERVE:.0%} of it is planned for"
        )
    return GpuSpec(
        label, tflops, memory, source, hbm, fp8, tuple(assumed), memory_assumed, capability
    )


def _catalogue_row(
    gpu_model: str | None,
) -> tuple[str, str, float, float, float, float, float] | None:
    if gpu_model:
        for candidate in _GPU_TABLE:
            if re.search(candidate[0], gpu_model, re.IGNORECASE):
                return candidate
    return None


def priced_model(names: Sequence[str]) -> str:
    """Of the GPU models one server carries, the one its jobs are priced on: the least memory,
    then the lowest peak (every rank holds the same share of the model and a synchronous step
    waits for the slowest GPU). A name the catalogue does not know cannot be ranked: it is
    the one priced, and gpu_spec says what it assumed for it."""

    def strength(name: str) -> tuple[int, float, float]:
        row = _catalogue_row(name)
        return (0, 0.0, 0.0) if row is None else (1, row[3], row[2])

    return min(names, key=strength)


def mixed_models_note(models: Sequence[tuple[str, int]], priced: str) -> str:
    """What the advice says of a server whose GPUs differ (the `assumed` list's words)."""
    return (
        f"GPU model: {priced} for every GPU, the smallest-memory, slowest part of "
        f"{models_text(models)} (each rank holds the same share of the model and a synchronous "
        "step waits for the slowest GPU)"
    )


# --- the model shape's arithmetic ---------------------------------------------------------


def active_params(shape: ModelShape) -> float:
    """Parameters one token passes through: dense ones, plus top-k of the experts."""
    if not shape.experts:
        return shape.params
    dense = shape.params - shape.expert_params
    return dense + shape.expert_params * shape.top_k / shape.experts


def flops_per_token(shape: ModelShape) -> float:
    """Forward + backward: 6 per active parameter, plus 12 L h s for attention scores."""
    return 6 * active_params(shape) + 12 * shape.layers * shape.hidden * shape.seq


def global_batch(shape: ModelShape) -> int:
    """Sequences per step: the shape's global batch, or micro-batch x micro-batches."""
    return shape.global_batch or shape.micro_batch * shape.micro_batches


def micro_batches(shape: ModelShape, layout: Layout) -> int:
    """m of 1F1B: the global batch split over DP replicas and micro-batches (rounded up: a
    batch that does not split evenly runs a few sequences more)."""
    return max(1, -(-global_batch(shape) // (shape.micro_batch * layout.dp)))


# --- memory -------------------------------------------------------------------------------

# Activation recomputation, least first: "none" keeps every activation, attention scores
# included; "selective" drops the attention scores (recomputed in the backward pass, as flash
# attention does: the default); "full" keeps only each layer's input and recomputes the layer.
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
FULL_RECOMPUTE_COST = 4 / 3  # one more forward pass: forward + backward is three of them


@dataclass(frozen=True)
class MemoryFit:
    weights: float  # bytes per GPU
    gradients: float
    optimizer: float
    activations: float
    capacity: float  # usable bytes (after the reserve)
    gpu_bytes: int
    zero: int
    recompute: str = "selective"

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def summary(self) -> str:
        """Memory per GPU in words: what is planned, what is left, what is kept back."""
        gb = 1e9
        return (
            f"{self.total / gb:.1f} of {self.capacity / gb:.1f} GB usable a GPU, "
            f"{(self.gpu_bytes - self.total) / gb:.1f} GB left; "
            f"{1 - self.capacity / self.gpu_bytes:.0%} kept back"
        )

    def to_document(self) -> dict[str, Any]:
        gb = 1e9
        return {
            "fits": self.fits,
            "zero": self.zero,
            "recompute": self.recompute,
            "weights_gb": round(self.weights / gb, 2),
            "gradients_gb": round(self.gradients / gb, 2),
            "optimizer_gb": round(self.optimizer / gb, 2),
            "activations_gb": round(self.activations / gb, 2),
            "total_gb": round(self.total / gb, 2),
            "usable_gb": round(self.capacity / gb, 2),
            "gpu_memory_gb": round(self.gpu_bytes / gb, 2),
            "left_gb": round((self.gpu_bytes - self.total) / gb, 2),
            "left_fraction": round(1 - self.total / self.gpu_bytes, 3),
            "kept_back": (
                f"{1 - self.capacity / self.gpu_bytes:.0%} of each GPU is never planned for "
                "(CUDA context, allocator fragmentation, NCCL buffers)"
            ),
        }


def memory_fit(
    shape: ModelShape,
    layout: Layout,
    gpu_bytes: int,
    zero: int = 1,
    *,
    recompute: str = "selective",
    reserve: float = MEMORY_RESERVE,
) -> MemoryFit:
    """Bytes per GPU of the fullest (first) pipeline stage; see the module notes. ZeRO-3
    (FSDP) shards the weights over DP too, holding two layers gathered at a time (the one
    computing and the one prefetched). Activations per layer after Korthikanti et al. 2022,
    Table 2 (sbh bytes: 10 + 24/TP, or 34/TP with sequence parallelism, plus 5as/(h TP) for
    the attention scores without recomputation; 2 sbh, /TP with sequence parallelism, of a
    layer's input under full recomputation, plus one layer's worth while it is recomputed)."""
    if zero not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    e = shape.bytes_per_elem
    shard = layout.tp * layout.pp
    dense = (shape.params - shape.expert_params) / shard
    experts = shape.expert_params / (shard * layout.ep)
    expert_dp = layout.dp // layout.ep  # replicas of each expert shard
    sharded = dense / layout.dp + experts / expert_dp  # one DP rank's share of its stage
    weights = (dense + experts) * e
    grads = (dense + experts) * e
    optimizer = (dense + experts) * ADAM_STATE_BYTES
    if zero >= 1:
        optimizer = sharded * ADAM_STATE_BYTES
    if zero >= 2:
        grads = sharded * e
    if zero >= 3:
        layers_here = -(-shape.layers // layout.pp)
        weights = sharded * e + 2 * (dense + experts) / layers_here * e
    m = micro_batches(shape, layout)
    sbh = shape.seq * shape.micro_batch * shape.hidden
    tp = layout.tp
    kept = sbh * (34 / tp if shape.sequence_parallel else 10 + 24 / tp)
    heads = shape.heads or max(1, shape.hidden // 128)
    per_layer = kept
    if recompute == "none":
        per_layer = kept + sbh * 5 * heads * shape.seq / (shape.hidden * tp)
    elif recompute == "full":
        per_layer = 2 * sbh / (tp if shape.sequence_parallel else 1)
    layers_here = -(-shape.layers // layout.pp)
    acts = per_layer * layers_here * min(layout.pp, m)
    if recompute == "full":
        acts += kept  # the layer being recomputed
    acts += shape.seq * shape.micro_batch * shape.vocab * 4 / tp  # fp32 logits
    capacity = gpu_bytes * (1 - reserve)
    return MemoryFit(weights, grads, optimizer, acts, capacity, gpu_bytes, zero, recompute)


@dataclass(frozen=True)
class Settings:
    """What a training run's memory depends on besides its layout, and the levers pulled to
    reach it from what was asked."""

    shape: ModelShape  # with the micro-batch in force
    zero: int
    recompute: str
    levers: tuple[str, ...] = ()

    def fit(self, layout: Layout, spec: GpuSpec) -> MemoryFit:
        return memory_fit(
            self.shape,
            layout,
            spec.memory_bytes,
            self.zero,
            recompute=self.recompute,
            reserve=spec.reserve,
        )


ZERO_LEVERS = {
    1: "ZeRO-1 (optimizer state sharded over DP)",
    2: "ZeRO-2 (gradients sharded too)",
    3: "ZeRO-3 / FSDP (weights sharded too)",
}


def lever_steps(shape: ModelShape, zero: int = 1, recompute: str = "selective") -> list[Settings]:
    """The settings to try, in the order practitioners pull the levers: the micro-batch down to
    1, selective then full activation recomputation, ZeRO-1, 2 then 3; each step keeps the
    levers before it. More GPUs come after all of them."""
    if zero not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    steps = [Settings(shape, zero, recompute)]
    levers: list[str] = []
    if shape.micro_batch > 1:
        levers.append(f"micro-batch {shape.micro_batch} -> 1")
        shape = replace(shape, micro_batch=1)
        steps.append(Settings(shape, zero, recompute, tuple(levers)))
    for level in RECOMPUTE[RECOMPUTE.index(recompute) + 1 :]:
        levers.append(f"{level} activation recomputation")
        recompute = level
        steps.append(Settings(shape, zero, recompute, tuple(levers)))
    for stage in range(zero + 1, 4):
        levers.append(ZERO_LEVERS[stage])
        zero = stage
        steps.append(Settings(shape, zero, recompute, tuple(levers)))
    return steps


def first_fit(
    steps: list[Settings], layouts: list[Layout], spec: GpuSpec
) -> tuple[Settings, list[Layout]] | None:
    """The first settings under which some layout fits, with the layouts that do; of the
    levers pulled to get there, only those still needed once the later ones are on (ZeRO-1
    alone can make room that full recomputation, pulled before it, did not)."""
    for settings in steps:
        fitting = [lay for lay in layouts if settings.fit(lay, spec).fits]
        if fitting:
            return _fewest_levers(steps[0], settings, layouts, spec, fitting)
    return None


def _fewest_levers(
    asked: Settings,
    found: Settings,
    layouts: list[Layout],
    spec: GpuSpec,
    fitting: list[Layout],
) -> tuple[Settings, list[Layout]]:
    """`found` with its recomputation, then its micro-batch, put back as far towards what was
    asked as some layout still fits (the costliest lever first: full recomputation runs the
    forward pass again); ZeRO stages stay as pulled."""

    def attempt(shape: ModelShape, recompute: str) -> tuple[Settings, list[Layout]] | None:
        levers = _lever_names(asked, shape, recompute, found.zero)
        trial = Settings(shape, found.zero, recompute, levers)
        here = [lay for lay in layouts if trial.fit(lay, spec).fits]
        return (trial, here) if here else None

    best = (found, fitting)
    least = RECOMPUTE.index(asked.recompute)
    for level in RECOMPUTE[least : RECOMPUTE.index(found.recompute)]:  # the least first
        got = attempt(found.shape, level)
        if got is not None:
            best = got
            break
    if best[0].shape.micro_batch != asked.shape.micro_batch:
        best = attempt(asked.shape, best[0].recompute) or best
    return best


def _lever_names(asked: Settings, shape: ModelShape, recompute: str, zero: int) -> tuple[str, ...]:
    """The levers between what was asked and these settings, in practitioners' order."""
    out = []
    if shape.micro_batch != asked.shape.micro_batch:
        out.append(f"micro-batch {asked.shape.micro_batch} -> {shape.micro_batch}")
    start = RECOMPUTE.index(asked.recompute) + 1
    out += [
        f"{level} activation recomputation"
        for level in RECOMPUTE[start : RECOMPUTE.index(recompute) + 1]
    ]
    out += [ZERO_LEVERS[stage] for stage in range(asked.zero + 1, zero + 1)]
    return tuple(out)


# --- step time ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTime:
    """Microseconds per step and where they go."""

    compute_us: float
    exposed_us: Mapping[str, float]  # tp, pp, ep, dp: communication on the critical path
    dp_total_us: float  # the whole gradient reduction, before overlap
    bubble_us: float
    micro_batches: int

    @property
    def total_us(self) -> float:
        return self.compute_us + sum(self.exposed_us.values()) + self.bubble_us

    def to_document(self) -> dict[str, Any]:
        return {
            "step_time_us": round(self.total_us, 1),
            "compute_us": round(self.compute_us, 1),
            "exposed_comm_us": {k: round(v, 1) for k, v in self.exposed_us.items()},
            "dp_reduction_us": round(self.dp_total_us, 1),
            "dp_hidden_us": round(self.dp_total_us - self.exposed_us.get("dp", 0.0), 1),
            "bubble_us": round(self.bubble_us, 1),
            "micro_batches": self.micro_batches,
        }


@dataclass(frozen=True)
class StepPlan:
    """What does not depend on the mapping: per-collective counts and the compute per slot,
    so a mapping's step time is a few multiply-adds over its collective times."""

    shape: ModelShape
    layout: Layout
    micro_batches: int
    compute_mb_us: float  # one micro-batch, one stage, forward + backward
    # (dimension, collective, bytes, per-micro-batch count on a stage; dp: 1 per step)
    collectives: tuple[tuple[str, str, int, int], ...]

    def total_us(self, per_mb_comm_us: float, dp_us: float) -> float:
        """`step(...).total_us` from the comm of one micro-batch slot and the DP reduction."""
        slot = self.compute_mb_us + per_mb_comm_us
        dp = max(dp_us - BACKWARD_SHARE * self.compute_mb_us, DP_EXPOSED_MIN * dp_us)
        return (self.micro_batches + self.layout.pp - 1) * slot + dp

    def step(self, each_us: Mapping[tuple[str, str], float]) -> StepTime:
        m, pp = self.micro_batches, self.layout.pp
        per_mb: dict[str, float] = {}
        dp_total = 0.0
        for dim, collective, _nbytes, count in self.collectives:
            t = each_us.get((dim, collective), 0.0) * count
            if dim == "dp":
                dp_total += t
            else:
                per_mb[dim] = per_mb.get(dim, 0.0) + t
        slot = self.compute_mb_us + sum(per_mb.values())
        window = BACKWARD_SHARE * self.compute_mb_us
        exposed = {d: m * t for d, t in per_mb.items()}
        if dp_total:
            exposed["dp"] = max(dp_total - window, DP_EXPOSED_MIN * dp_total)
        return StepTime(m * self.compute_mb_us, exposed, dp_total, (pp - 1) * slot, m)


def step_plan(
    shape: ModelShape,
    layout: Layout,
    spec: GpuSpec,
    achieved: float = ACHIEVED_FRACTION,
    *,
    recompute: str = "selective",
    zero: int = 1,
) -> StepPlan:
    """Full recomputation runs one more forward pass (FULL_RECOMPUTE_COST); ZeRO-3 gathers
    the weights again for the backward pass: one more AllGather of them per step."""
    if not 0 < achieved <= 1:
        raise ValueError(f"the achieved fraction of peak must be in (0, 1], got {achieved}")
    m = micro_batches(shape, layout)
    tokens = shape.micro_batch * shape.seq
    flops = flops_per_token(shape) * tokens / (layout.tp * layout.pp)
    if recompute == "full":
        flops *= FULL_RECOMPUTE_COST
    compute = flops / (spec.peak_tflops * 1e12 * achieved) * 1e6
    entries = ledger(replace(shape, micro_batches=1), layout)
    collectives = tuple((e.dimension, e.collective, e.bytes, e.count) for e in entries)
    if zero >= 3:
        collectives += tuple((d, "all_gather", b, 1) for d, _c, b, _n in collectives if d == "dp")
    return StepPlan(shape, layout, m, compute, collectives)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tensor_parallel_problem(shape: ModelShape, tp: int) -> str | None:
    """Why a TP degree cannot split the model (Megatron and the serving engines split the
    attention heads, the key/value heads and the MLP's hidden units evenly over TP), or None.
    Unknown dimensions (0) are not checked."""
    if shape.heads and shape.heads % tp:
        return f"TP {tp} does not divide the {shape.heads} attention heads"
    kv = shape.key_value_heads
    if kv and kv % tp:
        return f"TP {tp} does not divide the {kv} key/value heads"
    if shape.ffn_hidden and shape.ffn_hidden % tp:
        return f"TP {tp} does not divide the MLP's {shape.ffn_hidden} hidden units"
    return None


def layouts_for(shape: ModelShape, n: int, domain: int | None = None) -> list[Layout]:
    """Every valid TP x PP x DP (x EP for MoE shapes) on n GPUs: TP divides the attention
    heads, the key/value heads and the MLP's hidden units (`tensor_parallel_problem`, where
    the shape names them), PP the layers (stages of
    equal depth), EP the experts and DP. TP groups (consecutive ranks) and EP groups (TP x EP
    consecutive ranks) stay inside one NVLink domain of `domain` GPUs (default n: one server):
    over several domains, TP and TP x EP divide it; PP and DP may span domains."""
    domain = domain or n
    spans = n > domain  # over several domains: groups must not straddle two
    out: list[Layout] = []
    for tp in _divisors(n):
        if (spans and domain % tp) or tensor_parallel_problem(shape, tp):
            continue
        for pp in _divisors(n // tp):
            if shape.layers % pp:
                continue
            dp = n // (tp * pp)
            eps = [1]
            if shape.experts and shape.moe_layers:
                eps = [
                    e
                    for e in _divisors(dp)
                    if shape.experts % e == 0 and not (spans and domain % (tp * e))
                ]
            out.extend(Layout(tp, pp, dp, ep) for ep in eps)
    return out


def valid_layout_problem(shape: ModelShape, layout: Layout, domain: int) -> str | None:
    """Why a layout cannot run (the rules of `layouts_for`), or None."""
    problem = tensor_parallel_problem(shape, layout.tp)
    if problem is not None:
        return problem
    if shape.layers % layout.pp:
        return f"PP {layout.pp} does not divide the {shape.layers} layers"
    if layout.ep > 1 and shape.experts % layout.ep:
        return f"EP {layout.ep} does not divide the {shape.experts} experts"
    if layout.size > domain and domain % (layout.tp * layout.ep):
        what = "TP x EP" if layout.ep > 1 else "TP"
        return f"{what} {layout.tp * layout.ep} does not fit whole in NVLink domains of {domain}"
    return None


@dataclass(frozen=True)
class NoFit:
    """Why nothing fits, and the smallest number of such servers that would."""

    needed_gpus: int | None  # of this GPU, the fewest that fit (None: none up to the limit)
    needed_layout: Layout | None
    needed_gb_per_gpu: float  # at this server's GPU count, the least memory per GPU needed
    levers: tuple[str, ...] = ()  # pulled for `needed_layout` to fit
    server_gpus: int = 0  # GPUs per server: counts go up a server at a time
    memory: MemoryFit | None = None  # per GPU of `needed_layout`, with its levers

    def to_document(self, spec: GpuSpec, n: int) -> dict[str, Any]:
        lay = self.needed_layout
        more = None
        if self.needed_gpus and lay is not None:
            servers = -(-self.needed_gpus // self.server_gpus) if self.server_gpus else None
            more = (
                f"{self.needed_gpus}x {spec.name} ({spec.memory_bytes / 1e9:.0f} GB"
                + (f", {servers} server{'s' if servers > 1 else ''}" if servers else "")
                + f"), e.g. TP{lay.tp} PP{lay.pp} DP{lay.dp}"
                + (f" EP{lay.ep}" if lay.ep > 1 else "")
                + (f" with {', '.join(self.levers)}" if self.levers else "")
                + (f" ({self.memory.summary()})" if self.memory else "")
            )
        return {
            "smallest_gpu_count": self.needed_gpus,
            "smallest_layout": lay.__dict__ if lay else None,
            "levers": list(self.levers),
            "memory": self.memory.to_document() if self.memory else None,
            "gb_per_gpu_needed_at_this_size": round(self.needed_gb_per_gpu, 1),
            "message": (
                f"fits no layout on {n}x {spec.name} ({spec.memory_bytes / 1e9:.0f} GB): "
                + (f"needs at least {more}" if more else "needs more GPUs than 4096")
                + f", or {n} GPUs with at least {self.needed_gb_per_gpu:.0f} GB each"
            ),
        }


MAX_GPUS = 4096


def smallest_fit(
    shape: ModelShape,
    spec: GpuSpec,
    n: int,
    zero: int = 1,
    *,
    recompute: str = "selective",
    server_gpus: int | None = None,
    domain: int | None = None,
) -> NoFit:
    """The fewest GPUs of this kind, a server of `server_gpus` (default n) at a time past n,
    on which some valid layout fits once the levers are pulled in order (`lever_steps`), TP
    and EP inside NVLink domains of `domain` GPUs (default: a server); and the memory per GPU
    that n GPUs would need with every lever pulled."""
    server = server_gpus or n
    steps = lever_steps(shape, zero, recompute)
    last = steps[-1]
    need = min(
        (last.fit(lay, spec).total for lay in layouts_for(shape, n, domain)), default=math.inf
    )
    per_gpu = need / (1 - spec.reserve) / 1e9
    count = (n // server + 1) * server
    while count <= MAX_GPUS:
        found = first_fit(steps, layouts_for(shape, count, domain or server), spec)
        if found is not None:
            settings, fitting = found
            # As practitioners lay it out: the most of a domain model-parallel (TP x EP), the
            # experts split before the layers (EP before TP), then the shallowest pipeline.
            best = min(fitting, key=lambda lay: (-lay.tp * lay.ep, -lay.ep, lay.pp))
            memory = settings.fit(best, spec)
            return NoFit(count, best, per_gpu, settings.levers, server, memory)
        count += server
    return NoFit(None, None, per_gpu, (), server)
