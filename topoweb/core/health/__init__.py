"""Health findings for one server: links wired, trained or measured worse than they should be.
A package by concern: findings (the vocabulary), figures, diff, checks (wiring and NVML),
benchmarks, acceptance, gauges (what /metrics says of a server), silence (a collector that
stopped reporting); every public name is importable from here.

Everything here is a pure function of parsed inputs (Topology, P2PResult, NcclRun, the NVML
facts dict a collector sends) plus the figures a server is expected to reach; the web service
stores the findings with its analysis and the acceptance report next to them.

NVML facts are read through topoweb.core.formats.nvml (NvmlFacts); check_health also takes
the collector's raw `nvml` object and reads it there.
"""

from __future__ import annotations

from topoweb.core.health.acceptance import acceptance_report, judged_pairs
from topoweb.core.health.checks import check_health
from topoweb.core.health.diff import TopologyDiff, diff_topologies
from topoweb.core.health.expectations import (
    SOURCES,
    Judgement,
    Network,
    NetworkExpectation,
    PairExpectation,
    PairExpectations,
    judge,
    network_expectation,
    pair_expectations,
)
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
    COLLECTOR_SILENT,
    DEGRADED_NVLINK,
    DOWNTRAINED_PCIE,
    FAILED_BENCHMARK,
    INCONSISTENT_MATRIX,
    KINDS,
    NETWORK_BELOW_EXPECTED,
    NIC_FAR_FROM_GPU,
    P2P_UNAVAILABLE,
    SEVERITIES,
    SOURCES_DISAGREE,
    TOPOLOGY_DRIFT,
    Finding,
    HealthInputError,
    Severity,
)
from topoweb.core.health.gauges import BandwidthGauges, GpuGauges, ServerGauges, server_gauges
from topoweb.core.health.silence import collector_silence, silence_window

__all__ = [
    "BELOW_EXPECTED_BANDWIDTH",
    "COLLECTOR_SILENT",
    "DEGRADED_NVLINK",
    "DOWNTRAINED_PCIE",
    "FAILED_BENCHMARK",
    "INCONSISTENT_MATRIX",
    "KINDS",
    "NETWORK_BELOW_EXPECTED",
    "NIC_FAR_FROM_GPU",
    "P2P_UNAVAILABLE",
    "SEVERITIES",
    "SOURCES",
    "SOURCES_DISAGREE",
    "TOPOLOGY_DRIFT",
    "CollectiveKey",
    "Expectations",
    "Figures",
    "Finding",
    "HealthInputError",
    "Judgement",
    "Network",
    "NetworkExpectation",
    "PairExpectation",
    "PairExpectations",
    "PairKey",
    "Severity",
    "Thresholds",
    "TopologyDiff",
    "acceptance_report",
    "BandwidthGauges",
    "GpuGauges",
    "ServerGauges",
    "server_gauges",
    "check_health",
    "collector_silence",
    "silence_window",
    "diff_topologies",
    "expectations_by_class",
    "expectations_from_model",
    "judge",
    "judged_pairs",
    "measured_figures",
    "median_figures",
    "network_expectation",
    "pair_expectations",
    "sku_distribution",
]
