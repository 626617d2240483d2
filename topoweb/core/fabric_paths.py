"""What placement needs to know of the fabric between servers, from a fabric's analysis
document: each server's place (its leaf group, spine group, HCA link rate and its leaves'
oversubscription), and the network path a job over several servers crosses (leaf-local, or
through the spines at the rate the worst of its leaves keeps). core.placement.job reads these
through `ServerPool.fabric` and `network_path`; without a fabric it keeps its stated
assumptions (NIC line rate, a fixed spine oversubscription)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from topoweb.core.fabric_exports import host_places
from topoweb.core.formats.ibnet import LANE_GBPS


@dataclass(frozen=True)
class FabricPlace:
    fabric: str
    leaf_group: str  # servers sharing their leaves: one hop apart on every rail
    spine_group: str | None  # leaves joined by common spines
    nic_gbps: float  # the slowest of its HCAs' links to its leaves
    oversubscription: float  # the worst of its leaves: host-facing over spine-facing capacity
    hcas: int  # HCAs cabled to the fabric: the NICs a job's traffic between servers leaves by

    def to_document(self) -> list[Any]:
        return [self.leaf_group, self.spine_group, self.nic_gbps, self.oversubscription, self.hcas]

    @classmethod
    def from_document(cls, fabric: str, row: list[Any]) -> FabricPlace:
        leaf, spine, gbps, ratio, hcas = row
        return cls(fabric, str(leaf), spine, float(gbps), float(ratio), int(hcas))


@dataclass(frozen=True)
class NetworkPath:
    """The fabric between a job's servers: `level` leaf (one leaf group), spine (one spine
    group) or core; the per-NIC rate on the way and the oversubscription it crosses (1 when
    leaf-local)."""

    level: str
    nic_gbps: float
    oversubscription: float
    fabric: str
    nics: int  # HCAs per server on the fabric (the fewest among the job's servers)

    def describe(self) -> str:
        nics = f"{self.nics} NIC{'s' * (self.nics > 1)} at {self.nic_gbps:g} Gb/s per server"
        if self.level == "leaf":
            return f"leaf-local in fabric {self.fabric} ({nics})"
        return (
            f"through the {self.level}s of fabric {self.fabric} ({nics}, leaves "
            f"oversubscribed {self.oversubscription:.2f}:1)"
        )


def _rate_gbps(rate: str | None) -> float:
    """`4xNDR` -> 400."""
    if not rate or "x" not in rate:
        return 0.0
    width, _, speed = rate.partition("x")
    return int(width) * LANE_GBPS.get(speed, 0.0) if width.isdigit() else 0.0


def leaf_oversubscription(doc: Mapping[str, Any]) -> dict[str, float]:
    """Per leaf: Gb/s of host-facing links over Gb/s of spine-facing links (at least 1)."""
    tier = {s["name"]: s["tier"] for s in doc["switches"]}
    down: dict[str, float] = defaultdict(float)
    up: dict[str, float] = defaultdict(float)
    for link in doc["links"]:
        a, b = link["a"], link["b"]
        for lo, hi in ((a, b), (b, a)):
            if tier.get(lo) == "leaf" and tier.get(hi) == "spine":
                up[lo] += link["gbps"]
    for host in doc["hosts"]:
        for h in host["hcas"]:
            if h["switch"] and tier.get(h["switch"]) == "leaf":
                down[h["switch"]] += _rate_gbps(h["rate"])
    return {leaf: max(1.0, d / up[leaf]) if up.get(leaf) else 1.0 for leaf, d in down.items()}


def fabric_places(name: str, doc: Mapping[str, Any]) -> dict[str, FabricPlace]:
    """Each named host of the analysis, by the server it is (else its own name)."""
    ratio = leaf_oversubscription(doc)
    rates = {
        h["hostname"]: min((_rate_gbps(c["rate"]) for c in h["hcas"] if c["rate"]), default=0.0)
        for h in doc["hosts"]
        if h["hostname"]
    }
    cabled = {
        h["hostname"]: sum(1 for c in h["hcas"] if c["switch"])
        for h in doc["hosts"]
        if h["hostname"]
    }
    names = {h["hostname"]: h.get("server") or h["hostname"] for h in doc["hosts"] if h["hostname"]}
    by_node = {v: k for k, v in names.items()}
    out = {}
    for p in host_places(doc, names):
        out[p.node] = FabricPlace(
            fabric=name,
            leaf_group=p.block,
            spine_group=p.spine,
            nic_gbps=rates.get(by_node.get(p.node, p.node), 0.0),
            oversubscription=max((ratio.get(leaf, 1.0) for leaf in p.leaves), default=1.0),
            hcas=cabled.get(by_node.get(p.node, p.node), 0),
        )
    return out


def network_path(places: Iterable[FabricPlace | None]) -> NetworkPath | None:
    """The path a job over servers at these places crosses; None when a server has no place
    in a fabric, or they are in different fabrics."""
    found = list(places)
    if not found or any(p is None for p in found):
        return None
    known = [p for p in found if p is not None]
    if len({p.fabric for p in known}) > 1 or any(p.nic_gbps <= 0 or p.hcas < 1 for p in known):
        return None
    if len({p.leaf_group for p in known}) == 1:
        level, ratio = "leaf", 1.0
    else:
        level = "spine" if len({p.spine_group for p in known}) == 1 else "core"
        ratio = max(p.oversubscription for p in known)
    nics = min(p.hcas for p in known)
    return NetworkPath(level, min(p.nic_gbps for p in known), ratio, known[0].fabric, nics)
