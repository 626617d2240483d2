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
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from topoweb.core.ledger import Layout, ModelShape, ledger

# A real H200 (tests/fixtures/device_01_h200-1gpu-firecracker-vm-torch-copy-gemm.json) ran bf16
# GEMMs at 542-803 TFLOP/s of 989 dense peak (0.55-0.81); a whole training step also runs
# attention, norms and the optimizer, and well-tuned Megatron runs report 0.4-0.55 of peak.
ACHIEVED_FRACTION = 0.5
BACKWARD_SHARE = 2 / 3  # backward is two of the three matmul passes
DP_EXPOSED_MIN = 0.1  # the last gradient bucket cannot overlap anything
MEMORY_RESERVE = 0.08  # of each GPU's memory: CUDA context, NCCL buffers, fragmentation
ADAM_STATE_BYTES = 12  # fp32 master weights, momentum and variance per parameter
GIB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_tflops: float  # dense bf16 (fp16 before Ampere) tensor throughput
    memory_bytes: int
    source: str  # where the figures come from

    def to_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "peak_tflops": self.peak_tflops,
            "memory_gb": round(self.memory_bytes / 1e9, 1),
            "source": self.source,
        }


# (name pattern, label, dense bf16/fp16 tensor TFLOP/s, memory GB); first match wins.
_GPU_TABLE: tuple[tuple[str, str, float, float], ...] = (
    (r"GB200", "GB200", 2500, 186),
    (r"B200", "B200", 2250, 180),
    (r"H200", "H200", 989, 141),
    (r"H100.*PCIe|H100 PCIE", "H100 PCIe", 756, 80),
    (r"H100.*NVL", "H100 NVL", 835, 94),
    (r"H100|H800", "H100 SXM", 989, 80),
    (r"H20\b", "H20", 148, 96),
    (r"A100.*40GB|A100-SXM4-40GB|A100-PCIE-40GB", "A100 40GB", 312, 40),
    (r"A100|A800", "A100 80GB", 312, 80),
    (r"L40S", "L40S", 362, 48),
    (r"L40\b", "L40", 181, 48),
    (r"RTX 6000 Ada|Ada Generation", "RTX 6000 Ada", 364, 48),
    (r"RTX 5090", "RTX 5090", 209, 32),
    (r"RTX 4090", "RTX 4090", 165, 24),
    (r"RTX A6000|A40\b", "RTX A6000", 155, 48),
    (r"RTX 3090", "RTX 3090", 71, 24),
    (r"V100.*32GB", "V100 32GB", 125, 32),
    (r"V100", "V100 16GB", 125, 16),
    (r"RTX 2080 Ti", "RTX 2080 Ti", 57, 11),
    (r"T4\b", "T4", 65, 16),
    (r"P100", "P100", 21, 16),
    (r"P40", "P40", 12, 24),
    (r"GTX 10[78]0", "GTX 1080", 9, 8),
    (r"M60", "M60", 5, 8),
    (r"K80", "K80", 4, 12),
)
# By generation when the name is unknown (the cost model's inference from the matrix).
_GENERATION_DEFAULT: dict[str, tuple[str, float, float]] = {
    "Blackwell": ("B200", 2250, 180),
    "Hopper": ("H100 SXM", 989, 80),
    "Hopper-H800": ("H800", 989, 80),
    "Ampere": ("A100 80GB", 312, 80),
    "Ampere-A800": ("A800 80GB", 312, 80),
    "Ampere-sm86": ("RTX A6000", 155, 48),
    "Ada": ("L40S", 362, 48),
    "Blackwell-consumer": ("RTX 5090", 209, 32),
    "Volta": ("V100 32GB", 125, 32),
    "Volta-PCIe": ("V100 16GB", 125, 16),
    "Turing": ("T4", 65, 16),
    "Pascal-NVLink": ("P100", 21, 16),
    "Pascal": ("P40", 12, 24),
    "Maxwell": ("M60", 5, 8),
    "Kepler": ("K80", 4, 12),
}


def gpu_spec(
    gpu_model: str | None, generation: str | None = None, memory_bytes: int | None = None
) -> GpuSpec:
    """Peak and memory of a GPU from its NVML name (a "80GB" in the name wins for memory),
    else its generation's usual part; `memory_bytes` (NVML's total) overrides the memory."""
    found: tuple[str, float, float] | None = None
    source = ""
    if gpu_model:
        for pattern, label, tflops, gb in _GPU_TABLE:
            if re.search(pattern, gpu_model, re.IGNORECASE):
                found, source = (label, tflops, gb), f"catalogue ({gpu_model!r} is {label})"
                break
    if found is None:
        found = _GENERATION_DEFAULT.get(generation or "", ("L40S", 362, 48))
        source = f"catalogue (assumed {found[0]} from the {generation or 'default'} generation)"
    label, tflops, gb = found
    memory = int(gb * 1e9)
    named = re.search(r"(\d+)\s*GB", gpu_model or "", re.IGNORECASE)
    if named:
        memory = int(named.group(1)) * GIB
    if memory_bytes:
        memory, source = int(memory_bytes), source + "; memory from NVML"
    return GpuSpec(label, tflops, memory, source)


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


@dataclass(frozen=True)
class MemoryFit:
    weights: float  # bytes per GPU
    gradients: float
    optimizer: float
    activations: float
    capacity: float  # usable bytes (after MEMORY_RESERVE)
    gpu_bytes: int
    zero: int

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def to_document(self) -> dict[str, Any]:
        gb = 1e9
        return {
            "fits": self.fits,
            "zero": self.zero,
            "weights_gb": round(self.weights / gb, 2),
            "gradients_gb": round(self.gradients / gb, 2),
            "optimizer_gb": round(self.optimizer / gb, 2),
            "activations_gb": round(self.activations / gb, 2),
            "total_gb": round(self.total / gb, 2),
            "usable_gb": round(self.capacity / gb, 2),
            "gpu_memory_gb": round(self.gpu_bytes / gb, 2),
        }


def memory_fit(shape: ModelShape, layout: Layout, gpu_bytes: int, zero: int = 1) -> MemoryFit:
    """Bytes per GPU of the fullest (first) pipeline stage; see the module notes."""
    if zero not in (0, 1, 2):
        raise ValueError(f"ZeRO stage must be 0, 1 or 2, got {zero}")
    e = shape.bytes_per_elem
    shard = layout.tp * layout.pp
    dense = (shape.params - shape.expert_params) / shard
    experts = shape.expert_params / (shard * layout.ep)
    expert_dp = layout.dp // layout.ep  # replicas of each expert shard
    weights = (dense + experts) * e
    grads = (dense + experts) * e
    optimizer = (dense + experts) * ADAM_STATE_BYTES
    if zero >= 1:
        optimizer = (dense / layout.dp + experts / expert_dp) * ADAM_STATE_BYTES
    if zero >= 2:
        grads = (dense / layout.dp + experts / expert_dp) * e
    m = micro_batches(shape, layout)
    sbh = shape.seq * shape.micro_batch * shape.hidden
    per_layer = sbh * (34 / layout.tp if shape.sequence_parallel else 10 + 24 / layout.tp)
    layers_here = -(-shape.layers // layout.pp)
    acts = per_layer * layers_here * min(layout.pp, m)
    acts += shape.seq * shape.micro_batch * shape.vocab * 4 / layout.tp  # fp32 logits
    capacity = gpu_bytes * (1 - MEMORY_RESERVE)
    return MemoryFit(weights, grads, optimizer, acts, capacity, gpu_bytes, zero)


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
    shape: ModelShape, layout: Layout, spec: GpuSpec, achieved: float = ACHIEVED_FRACTION
) -> StepPlan:
    if not 0 < achieved <= 1:
        raise ValueError(f"the achieved fraction of peak must be in (0, 1], got {achieved}")
    m = micro_batches(shape, layout)
    tokens = shape.micro_batch * shape.seq
    flops = flops_per_token(shape) * tokens / (layout.tp * layout.pp)
    compute = flops / (spec.peak_tflops * 1e12 * achieved) * 1e6
    entries = ledger(replace(shape, micro_batches=1), layout)
    collectives = tuple((e.dimension, e.collective, e.bytes, e.count) for e in entries)
    return StepPlan(shape, layout, m, compute, collectives)


def layouts_for(shape: ModelShape, n: int) -> list[Layout]:
    """Every TP x PP x DP (x EP for MoE shapes) on n GPUs the shape allows: PP at most the
    layer count, EP dividing DP and the expert count."""
    out: list[Layout] = []
    for tp in range(1, n + 1):
        if n % tp:
            continue
        for pp in range(1, n // tp + 1):
            if (n // tp) % pp or pp > shape.layers:
                continue
            dp = n // (tp * pp)
            eps = [1]
            if shape.experts and shape.moe_layers:
                eps = [e for e in range(1, dp + 1) if dp % e == 0 and shape.experts % e == 0]
            out.extend(Layout(tp, pp, dp, ep) for ep in eps)
    return out


@dataclass(frozen=True)
class NoFit:
    """Why nothing fits, and the smallest shapes that would."""

    needed_gpus: int | None  # of this GPU, the fewest that fit (None: none up to the limit)
    needed_layout: Layout | None
    needed_gb_per_gpu: float  # at this server's GPU count, the least memory per GPU needed

    def to_document(self, spec: GpuSpec, n: int) -> dict[str, Any]:
        more = (
            f"{self.needed_gpus}x {spec.name} ({spec.memory_bytes / 1e9:.0f} GB), e.g. TP"
            f"{self.needed_layout.tp} PP{self.needed_layout.pp} DP{self.needed_layout.dp}"
            if self.needed_gpus and self.needed_layout
            else None
        )
        return {
            "smallest_gpu_count": self.needed_gpus,
            "smallest_layout": self.needed_layout.__dict__ if self.needed_layout else None,
            "gb_per_gpu_needed_at_this_size": round(self.needed_gb_per_gpu, 1),
            "message": (
                f"fits no layout on {n}x {spec.name} ({spec.memory_bytes / 1e9:.0f} GB): "
                + (f"needs at least {more}" if more else "needs more GPUs than 4096")
                + f", or {n} GPUs with at least {self.needed_gb_per_gpu:.0f} GB each"
            ),
        }


def smallest_fit(shape: ModelShape, spec: GpuSpec, n: int, zero: int = 1) -> NoFit:
    """The fewest GPUs of this kind (doubling from n) on which some layout fits, and the memory
    per GPU that n GPUs would need."""
    need = min(
        (memory_fit(shape, lay, spec.memory_bytes, zero).total for lay in layouts_for(shape, n)),
        default=math.inf,
    )
    count = 2 * n
    while count <= 4096:
        for lay in layouts_for(shape, count):
            if memory_fit(shape, lay, spec.memory_bytes, zero).fits:
                return NoFit(count, lay, need / (1 - MEMORY_RESERVE) / 1e9)
        count *= 2
    return NoFit(None, None, need / (1 - MEMORY_RESERVE) / 1e9)
