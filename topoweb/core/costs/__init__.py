"""NCCL-like cost of collectives and peer copies on a GPU subset of one server or of N servers
wired alike: per-pair transport (NVLink, PCIe P2P, host shared memory), flows that share a
link, PCIe uplink, host bridge, socket link or NVSwitch port splitting its capacity (max-min
fair share over the recovered hierarchy), NCCL's algorithms (ring, tree, NVLS) and protocols
(LL, LL128, Simple) with its published latencies, and calibration from measured runs.

One room per concern, each with its own public surface:
- `records`: the operations, the records answered (`CollectiveCost`), `Resource`, `Calibration`;
- `routes`: transports and routes of each GPU pair, the resources they cross, collector facts;
- `rings`: the rings NCCL would build over a subset, and their rates;
- `model`: `CostModel` (routes + rings + rates and fair sharing), `build_model`, `with_options`;
- `tables`: NCCL's published tuning tables, as data;
- `collectives`: NCCL's algorithms and protocols priced, concurrent groups, pipeline chains;
- `copies`: peer copies and the predicted P2P matrices;
- `bounds`: optimistic times without a ring search (what placement cuts on);
- `calibration`: corrections fitted from measured runs.

Callers import from `topoweb.core.costs`; the names below are the package's surface."""

from topoweb.core.costs.bounds import (
    BOUND_MARGIN,
    chain_time_bound,
    ring_time_bound,
    solo_time_bound,
)
from topoweb.core.costs.calibration import calibrate_from_nccl, calibrate_from_p2p, fit_alpha_beta
from topoweb.core.costs.collectives import (
    chain_costs,
    chain_time,
    collective_cost,
    concurrent_costs,
    curve,
    slowest_cost,
    slowest_group_us,
)
from topoweb.core.costs.copies import copy_band, copy_latency, p2p_matrix, p2p_unidirectional
from topoweb.core.costs.model import (
    CostModel,
    build_model,
    calibrated,
    nvlink_domain,
    with_options,
)
from topoweb.core.costs.records import (
    BUSBW_FACTOR,
    CALIBRATION_CLASSES,
    COLLECTIVES,
    OPERATIONS,
    STANDARD_SIZES,
    Calibration,
    CollectiveCost,
    Flow,
    P2PMode,
    Path,
    Rate,
    Resource,
)
from topoweb.core.costs.rings import BIG_RING, EXACT_RING, MAX_RINGS, RING_SEARCH_NODES, Rings
from topoweb.core.costs.routes import (
    Routes,
    options_from_facts,
    p2p_status_from_text,
    pcie_capability,
)

__all__ = [
    "BIG_RING",
    "BOUND_MARGIN",
    "BUSBW_FACTOR",
    "CALIBRATION_CLASSES",
    "COLLECTIVES",
    "EXACT_RING",
    "MAX_RINGS",
    "OPERATIONS",
    "RING_SEARCH_NODES",
    "STANDARD_SIZES",
    "Calibration",
    "CollectiveCost",
    "CostModel",
    "Flow",
    "P2PMode",
    "Path",
    "Rate",
    "Resource",
    "Rings",
    "Routes",
    "build_model",
    "calibrate_from_nccl",
    "calibrate_from_p2p",
    "calibrated",
    "chain_costs",
    "chain_time",
    "chain_time_bound",
    "collective_cost",
    "concurrent_costs",
    "copy_band",
    "copy_latency",
    "curve",
    "fit_alpha_beta",
    "nvlink_domain",
    "options_from_facts",
    "pcie_capability",
    "p2p_matrix",
    "p2p_status_from_text",
    "p2p_unidirectional",
    "ring_time_bound",
    "slowest_cost",
    "slowest_group_us",
    "solo_time_bound",
    "with_options",
]
