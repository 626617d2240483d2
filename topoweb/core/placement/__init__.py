"""Placement advice: the layout and rank->GPU mapping with the lowest predicted step time
that fits in memory (core/steptime.py), which free GPUs a smaller job should take
(fragmentation-aware), the best k GPUs over servers, and per-GPU NIC/NUMA affinity.

- `objective`: a mapping's step time (what the searches minimise), Megatron's rank groups;
- `exact`: the branch and bound over every mapping (up to 16 GPUs);
- `large`: past the exact sizes, starts along the hierarchy, swaps, and the NUMA cut bound;
- `mapping`: `place` (one layout) and `recommend` (every layout of a model, ranked);
- `selection`: the best k free GPUs of each server;
- `job`: jobs over several servers;
- `binding`: per-GPU NIC / NUMA affinity and launch hints;
- `serving`: GPUs per replica, replicas, memory per GPU and latency of serving a model.
"""

from topoweb.core.placement.binding import AffinityAdvice, GpuAffinity, affinity
from topoweb.core.placement.job import (
    JobSelection,
    ServerPart,
    ServerPool,
    inter_node_all_reduce_us,
    select_job,
)
from topoweb.core.placement.mapping import (
    BOUNDED_LIMIT,
    EXACT_LIMIT,
    STEP_ASSUMPTIONS,
    Placement,
    Recommendation,
    place,
    recommend,
)
from topoweb.core.placement.objective import (
    DEFAULT_SHAPE,
    DIMENSIONS,
    DimensionResult,
    StepCost,
    rank_groups,
)
from topoweb.core.placement.selection import SELECTION_BYTES, Selection, best_group, select_gpus

__all__ = [
    "BOUNDED_LIMIT",
    "DEFAULT_SHAPE",
    "DIMENSIONS",
    "EXACT_LIMIT",
    "SELECTION_BYTES",
    "STEP_ASSUMPTIONS",
    "AffinityAdvice",
    "DimensionResult",
    "GpuAffinity",
    "JobSelection",
    "Placement",
    "Recommendation",
    "Selection",
    "ServerPart",
    "ServerPool",
    "StepCost",
    "affinity",
    "best_group",
    "inter_node_all_reduce_us",
    "place",
    "rank_groups",
    "recommend",
    "select_gpus",
    "select_job",
]
