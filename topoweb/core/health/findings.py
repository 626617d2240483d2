"""The vocabulary of the health checks: a Finding (kind, severity, devices, evidence, advice,
message), the stable kinds and severities, and the error for inputs that cannot be judged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from topoweb.core.model import Topology

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

BELOW_EXPECTED_BANDWIDTH = "below_expected_bandwidth"
DEGRADED_NVLINK = "degraded_nvlink"
DOWNTRAINED_PCIE = "downtrained_pcie"
P2P_UNAVAILABLE = "p2p_unavailable"
NIC_FAR_FROM_GPU = "nic_far_from_gpu"
TOPOLOGY_DRIFT = "topology_drift"
INCONSISTENT_MATRIX = "inconsistent_matrix"
FAILED_BENCHMARK = "failed_benchmark"
SOURCES_DISAGREE = "sources_disagree"
NETWORK_BELOW_EXPECTED = "network_below_expected"
COLLECTOR_SILENT = "collector_silent"
# Stable ids: the API filters on them and stored analyses keep them.
KINDS: tuple[str, ...] = (
    BELOW_EXPECTED_BANDWIDTH,
    DEGRADED_NVLINK,
    DOWNTRAINED_PCIE,
    P2P_UNAVAILABLE,
    NIC_FAR_FROM_GPU,
    TOPOLOGY_DRIFT,
    INCONSISTENT_MATRIX,
    FAILED_BENCHMARK,
    SOURCES_DISAGREE,
    COLLECTOR_SILENT,
    NETWORK_BELOW_EXPECTED,
)


class HealthInputError(ValueError):
    """Inputs that cannot describe the same server (or NVML facts of the wrong shape)."""


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: Severity
    devices: tuple[str, ...]
    evidence: dict[str, Any] = field(hash=False)
    advice: str
    message: str

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "devices": list(self.devices),
            "evidence": self.evidence,
            "advice": self.advice,
            "message": self.message,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Finding:
        if doc.get("kind") not in KINDS or doc.get("severity") not in SEVERITIES:
            raise HealthInputError(f"not a finding document: {dict(doc)!r:.200}")
        return cls(
            kind=str(doc["kind"]),
            severity=doc["severity"],
            devices=tuple(str(d) for d in doc.get("devices", ())),
            evidence=dict(doc.get("evidence", {})),
            advice=str(doc.get("advice", "")),
            message=str(doc.get("message", "")),
        )


SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


def ordered_ids(topo: Topology, ids: Iterable[str]) -> tuple[str, ...]:
    """Device ids, once each, in the order the topology lists them."""
    position = {d.id: i for i, d in enumerate(topo.devices)}
    return tuple(sorted(set(ids), key=lambda x: (position.get(x, len(position)), x)))
