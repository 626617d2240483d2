"""Training communication ledger: every collective one training step issues for a model shape
and a TP/PP/DP/EP layout (DOMAIN.md s4), priced on a server with the cost model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topoweb.core.costs import CostModel, slowest_cost


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    seq: int
    micro_batch: int
    micro_batches: int  # per step per replica, for the ledger; step time uses global_batch
    params: float
    bytes_per_elem: int = 2  # bf16
    moe_layers: int = 0
    top_k: int = 1
    sequence_parallel: bool = False
    global_batch: int = 0  # sequences per step; 0: micro_batch x micro_batches
    vocab: int = 0  # for the logits' memory; 0: not counted
    experts: int = 0  # per MoE layer; 0: a dense model
    expert_params: float = 0.0  # parameters in all experts of all MoE layers
    heads: int = 0  # attention (query) heads; 0: unknown (tensor parallelism then unchecked)
    kv_heads: int = 0  # key/value heads (grouped-query attention); 0: as many as `heads`
    # The MLP's hidden units (intermediate_size; per expert in an MoE): tensor parallelism
    # splits them too, so TP must divide them; 0: unknown.
    ffn_hidden: int = 0
    # Tokens a sequence may hold, as trained (the model card's max_position_embeddings);
    # 0: unknown. Serving engines refuse longer contexts unless the model is extended.
    context_window: int = 0

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "seq", "micro_batch", "micro_batches", "bytes_per_elem"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.params <= 0:
            raise ValueError("params must be positive")
        if not 0 <= self.expert_params < self.params:
            raise ValueError("expert_params must be at least 0 and below params")
        if self.experts and self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds the {self.experts} experts")
        if self.expert_params and not (self.experts and self.moe_layers):
            raise ValueError("expert_params needs experts and moe_layers")
        for name in (
            "global_batch", "vocab", "experts", "moe_layers", "heads", "kv_heads", "ffn_hidden",
            "context_window",
        ):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"{name} cannot be negative")
        if self.heads and self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of the {self.heads} heads")
        if self.kv_heads and (not self.heads or self.heads % self.kv_heads):
            raise ValueError(f"kv_heads {self.kv_heads} must divide the {self.heads} heads")

    @property
    def key_value_heads(self) -> int:
        """Key/value heads: `kv_heads`, or one per attention head (multi-head attention)."""
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads if self.heads else 0

    @property
    def activation_bytes(self) -> int:
        """b x s x h x e: one TP AllReduce and one PP send (DOMAIN.md s4)."""
        return self.micro_batch * self.seq * self.hidden * self.bytes_per_elem

    def to_document(self) -> dict[str, Any]:
        return dict(self.__dict__)


# Each preset's dimensions come from its model card or paper (cited per entry); parameters
# are the published totals. Sequence length, micro-batch and global batch are a training
# setup's, not the model's: the published pre-training ones where given.
PRESETS: dict[str, ModelShape] = {
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: 96 layers,
    # d_model 12288, 96 heads of 128, context 2048, batch 3.2M tokens (1536 sequences);
    # GPT-2's 50257-token vocabulary; section 2.1: the feed-forward layer is four times the
    # bottleneck (d_ff = 4 d_model). DOMAIN.md s4's worked example: 201 MB per TP AllReduce.
    "gpt3-175b": ModelShape(
        "GPT-3 175B",
        96,
        12288,
        2048,
        4,
        1,
        175e9,
        global_batch=1536,
        vocab=50257,
        heads=96,
        ffn_hidden=4 * 12288,
        context_window=2048,
    ),  # fmt: skip
    # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json: hidden_size 4096,
    # num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 32, vocab_size 32000,
    # intermediate_size 11008, max_position_embeddings 4096; Touvron et al. 2023 (Llama 2),
    # Table 1: 6.7B parameters.
    "llama-7b": ModelShape(
        "Llama-style 7B",
        32,
        4096,
        4096,
        1,
        8,
        6.7e9,
        global_batch=256,
        vocab=32000,
        heads=32,
        kv_heads=32,
        ffn_hidden=11008,
        context_window=4096,
    ),  # fmt: skip
    # https://huggingface.co/meta-llama/Llama-2-13b-hf/blob/main/config.json: hidden_size
    # 5120, 40 layers, 40 attention heads, 40 key/value heads, vocab_size 32000,
    # intermediate_size 13824, max_position_embeddings 4096.
    "llama-13b": ModelShape(
        "Llama-style 13B",
        40,
        5120,
        4096,
        1,
        8,
        13e9,
        global_batch=256,
        vocab=32000,
        heads=40,
        kv_heads=40,
        ffn_hidden=13824,
        context_window=4096,
    ),  # fmt: skip
    # https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json: hidden_size
    # 8192, 80 layers, 64 attention heads, 8 key/value heads (GQA), vocab_size 32000,
    # intermediate_size 28672, max_position_embeddings 4096 (Meta-Llama-3-70B's config: the
    # same dimensions, 8192).
    # Sequence parallel, as Megatron runs models this size with TP.
    "llama-70b": ModelShape(
        "Llama-style 70B",
        80,
        8192,
        4096,
        1,
        8,
        70e9,
        sequence_parallel=True,
        global_batch=256,
        vocab=32000,
        heads=64,
        kv_heads=8,
        ffn_hidden=28672,
        context_window=4096,
    ),
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json: hidden_size
    # 4096, 32 layers, 32 attention heads, 8 key/value heads, 8 local experts, 2 per token,
    # vocab_size 32000, intermediate_size 14336, max_position_embeddings 32768; Jiang et al.
    # 2024 (Mixtral of Experts): 46.7B parameters in all.
    # 8 experts of 3 x 4096 x 14336 in each of 32 layers: 45.1 B of the 46.7 B parameters.
    "mixtral-8x7b": ModelShape(
        "Mixtral-style 8x7B MoE",
        32,
        4096,
        4096,
        1,
        8,
        46.7e9,
        moe_layers=32,
        top_k=2,
        global_batch=256,
        vocab=32000,
        experts=8,
        expert_params=45.1e9,
        heads=32,
        kv_heads=8,
        ffn_hidden=14336,
        context_window=32768,
    ),
}


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.dp % self.ep:
            raise ValueError(
                f"EP {self.ep} must divide DP {self.dp} (experts split the data-parallel ranks)"
            )

    @property
    def size(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class LedgerEntry:
    dimension: str  # tp, pp, dp, ep
    collective: str
    bytes: int
    count: int  # per step, on one GPU's critical path
    note: str

    def to_document(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ledger(shape: ModelShape, layout: Layout) -> tuple[LedgerEntry, ...]:
    """Collectives per step. Counts are per GPU: pipeline stages run side by side, so a
    stage's TP group issues 4 (L / PP) m AllReduces; with PP = 1 that is DOMAIN.md's 4 L m."""
    out: list[LedgerEntry] = []
    act = shape.activation_bytes
    layers_here = -(-shape.layers // layout.pp)  # the fullest stage sets the pace
    m = shape.micro_batches
    if layout.tp > 1:
        count = 4 * layers_here * m
        if shape.sequence_parallel:
            out.append(
                LedgerEntry(
                    "tp",
                    "all_gather",
                    act,
                    count,
                    "sequence parallel: AllGather before each TP block",
                )
            )
            out.append(
                LedgerEntry(
                    "tp",
                    "reduce_scatter",
                    act,
                    count,
                    "sequence parallel: ReduceScatter after each TP block",
                )
            )
        else:
            out.append(
                LedgerEntry(
                    "tp",
                    "all_reduce",
                    act,
                    count,
                    "Megatron TP: 2 forward + 2 backward per layer per micro-batch",
                )
            )
    if layout.pp > 1:
        out.append(
            LedgerEntry(
                "pp",
                "sendrecv",
                act,
                2 * m,
                "activations forward and their gradients back, per "
                "micro-batch, every stage boundary at once",
            )
        )
    if layout.dp > 1:
        # Expert gradients are split over EP too (reduced over the DP group: an upper bound
        # on the DP / EP replicas that really share each expert shard).
        params = shape.params - shape.expert_params + shape.expert_params / layout.ep
        grad = int(params * shape.bytes_per_elem / (layout.tp * layout.pp))
        out.append(LedgerEntry("dp", "all_reduce", grad, 1, "gradient AllReduce once per step"))
    if layout.ep > 1 and shape.moe_layers:
        tokens_bytes = act * shape.top_k
        count = 4 * -(-shape.moe_layers // layout.pp) * m
        out.append(
            LedgerEntry(
                "ep",
                "alltoall",
                tokens_bytes,
                count,
                "MoE dispatch + combine, forward and backward",
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class PricedEntry:
    entry: LedgerEntry
    group_size: int
    each_us: float
    total_us: float
    bottleneck: str
    bottleneck_class: str

    def to_document(self) -> dict[str, Any]:
        return {
            **self.entry.to_document(),
            "group_size": self.group_size,
            "each_us": round(self.each_us, 3),
            "total_us": round(self.total_us, 3),
            "bottleneck": self.bottleneck,
            "bottleneck_class": self.bottleneck_class,
        }


def price(
    model: CostModel,
    entries: Sequence[LedgerEntry],
    groups: Mapping[str, Sequence[Sequence[int]]],
) -> tuple[PricedEntry, ...]:
    """Each entry timed with all groups of its dimension running at once (they contend)."""
    out = []
    for e in entries:
        gs = [g for g in groups.get(e.dimension, ()) if len(g) > 1]
        if not gs:
            continue
        slow = slowest_cost(model, e.collective, gs, e.bytes, e.dimension == "pp")
        out.append(
            PricedEntry(
                e,
                len(gs[0]),
                slow.time_us,
                slow.time_us * e.count,
                slow.bottleneck,
                slow.bottleneck_class,
            )
        )
    return tuple(out)


def step_comm_us(priced: Sequence[PricedEntry]) -> float:
    """Dimensions are summed: they run in different phases of the step."""
    return sum(p.total_us for p in priced)
