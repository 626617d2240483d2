"""Health findings for one server: links wired, trained or measured worse than they should be.
A package by concern: findings (the vocabulary), figures, diff, checks (wiring and NVML),
benchmarks, acceptance; every public name is importable from here.

Everything here is a pure function of parsed inputs (Topology, P2PResult, NcclRun, the NVML
facts dict a collector sends) plus the figures a server is expected to reach; the web service
stores the findings with its analysis and the acceptance report next to them.

NVML facts, as the collector (collector/nvml.py) sends them and as read here. Any value may be
None, "unsupported" or "error: ..." where the driver could not say; such values are skipped,
never guessed. `current_gen`/`max_gen` are accepted for the generation keys, true/false and
"up"/"down" for the link state::

    {"available": true,                        # false: nothing else is read
     "gpus": [{"index": 0,                     # NVML index == nvidia-smi's == topo -m GPU<index>
               "name": "NVIDIA H100 80GB HBM3",
               "pci_bus_id": "00000000:18:00.0",
               "pcie": {"current_generation": 5, "max_generation": 5,
                        "current_width": 16, "max_width": 16},
               "nvlinks": [{"link": 0, "state": "active",        # or "inactive"
                            "version": 6,                      # raw nvmlNvlinkVersion_t
                            "remote_device_type": "SWITCH",    # or "GPU"
                            "remote_pci_bus_id": "00000000:05:00.0"}, ...]},   # or "unsupported"
              ...],
     "p2p": [{"from": 0, "to": 1, "read": "OK", "write": "OK", ...}, ...]}   # NVML P2P status
"""

from __future__ import annotations

from topoweb.core.health.acceptance import acceptance_report
from topoweb.core.health.checks import check_health
from topoweb.core.health.diff import TopologyDiff, diff_topologies
from topoweb.core.health.figures import (
    CollectiveKey,
    Expectations,
    Figures,
    PairKey,
    Thresholds,
    expectations_by_class,
    expectations_from_model,
    measured_figures,
    median_figures,
    sku_distribution,
)
from topoweb.core.health.findings import (
    BELOW_EXPECTED_BANDWIDTH,
    DEGRADED_NVLINK,
    DOWNTRAINED_PCIE,
    FAILED_BENCHMARK,
    INCONSISTENT_MATRIX,
    KINDS,
    NIC_FAR_FROM_GPU,
    P2P_UNAVAILABLE,
    SEVERITIES,
    TOPOLOGY_DRIFT,
    Finding,
    HealthInputError,
    Severity,
)

__all__ = [
    "BELOW_EXPECTED_BANDWIDTH",
    "DEGRADED_NVLINK",
    "DOWNTRAINED_PCIE",
    "FAILED_BENCHMARK",
    "INCONSISTENT_MATRIX",
    "KINDS",
    "NIC_FAR_FROM_GPU",
    "P2P_UNAVAILABLE",
    "SEVERITIES",
    "TOPOLOGY_DRIFT",
    "CollectiveKey",
    "Expectations",
    "Figures",
    "Finding",
    "HealthInputError",
    "PairKey",
    "Severity",
    "Thresholds",
    "TopologyDiff",
    "acceptance_report",
    "check_health",
    "diff_topologies",
    "expectations_by_class",
    "expectations_from_model",
    "measured_figures",
    "median_figures",
    "sku_distribution",
]
