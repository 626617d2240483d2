"""What each GPU pair of one server is expected to reach, as one typed record per ordered pair:
the figure, where it comes from (the SKU siblings' measurements, this server's own other pairs
of the same link class, staff's SKU figures, or the cost model), how uncertain that source is,
and the evidence in words. `pair_expectations` is the one rule; findings, the acceptance report
and the stored assessment all read its answer, and `judge` says how bad a measurement is.

Severity respects the uncertainty: a figure inside the model's band is never critical; critical
needs a figure far below measured evidence, or far below the model's band."""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from topoweb.core.catalogue import BUSBW_MODEL_BAND
from topoweb.core.costs import build_model, collective_cost
from topoweb.core.health.figures import Expectations, Figures, PairKey, Thresholds
from topoweb.core.health.findings import Severity
from topoweb.core.model import NcclRun, Topology

Source = Literal["siblings", "self", "staff", "model"]
SOURCES: tuple[Source, ...] = ("siblings", "self", "staff", "model")

# A measurement under this share of measured evidence (siblings' median, this server's other
# same-class pairs) is far below it: critical. Under thresholds.sku_median_ratio: a warning.
FAR_BELOW_EVIDENCE = 0.80
# Under this share of the low edge of the model's band a figure is far below the model.
FAR_BELOW_BAND = 0.80
# This server's own pairs speak for a pair's class only with at least this many other pairs.
MIN_SAME_CLASS_PAIRS = 3
# The band of a figure measured on siblings or on this server's own pairs: how far healthy
# copies of one class spread on one board (p2p matrices of healthy boards stay within 2-3 %).
MEASURED_BAND = 0.05
# The band of a staff figure: staff's own threshold says how close is close enough.
_STAFF = "staff's SKU figure"


@dataclass(frozen=True)
class PairExpectation:
    """What one GPU pair, one direction, should reach (GB/s per direction), and why."""

    src: int
    dst: int
    link_class: str
    value_gbps: float
    source: Source
    band: float  # relative: healthy figures from this source fall within value x (1 +- band)
    evidence: str  # the evidence in words: "this server's other 27 NV18 pairs"
    model_gbps: float | None = None  # the cost model's figure, kept beside measured evidence
    model_band: float = 0.0

    @property
    def low_gbps(self) -> float:
        return self.value_gbps * (1 - self.band)

    def to_document(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "class": self.link_class,
            "expected_gbps": round(self.value_gbps, 2),
            "source": self.source,
            "band": round(self.band, 3),
            "low_gbps": round(self.low_gbps, 2),
            "evidence": self.evidence,
            "model_gbps": None if self.model_gbps is None else round(self.model_gbps, 2),
            "model_band": round(self.model_band, 3),
        }


@dataclass(frozen=True)
class Judgement:
    """A measurement against its expectation: its severity (None: fine), the ratio and the
    comparison in words ("86 % of this server's other NV18 pairs (372.0 GB/s)")."""

    severity: Severity | None
    ratio: float
    against: str


@dataclass(frozen=True)
class PairExpectations:
    """Every ordered GPU pair's expectation on one server (the answer `pair_expectations`
    gives; the stored assessment keeps it whole)."""

    pairs: Mapping[PairKey, PairExpectation] = field(default_factory=dict, hash=False)

    def __getitem__(self, key: PairKey) -> PairExpectation:
        return self.pairs[key]

    def __iter__(self) -> Iterator[PairKey]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def get(self, key: PairKey) -> PairExpectation | None:
        return self.pairs.get(key)

    def to_document(self) -> list[dict[str, Any]]:
        return [e.to_document() for _, e in sorted(self.pairs.items())]


def pair_expectations(
    topo: Topology,
    expectations: Expectations | None,
    measured: Mapping[PairKey, float] | None = None,
    medians: Figures | None = None,
    sibling_count: int | None = None,
    host_staged: Collection[frozenset[int]] = (),
) -> PairExpectations:
    """Each ordered pair's expectation, from the most specific evidence there is: the SKU
    siblings' median for this very pair, else the median of this server's other pairs of the
    same link class (`measured`, at least MIN_SAME_CLASS_PAIRS of them), else staff's figure,
    else the cost model's with its band. Measured evidence that is itself far below the model's
    band (a whole SKU or server slow) gives way to the model. `host_staged`: pairs whose P2P is
    unavailable (a p2p_unavailable finding): their measured copies are staged through the host,
    so they are judged against a staged figure, their siblings' or the cost model's staged copy
    over their link class (`Expectations.staged_gbps_by_class`), never against a direct figure
    nor a share of one: the driver pipelines a staged copy's legs, so how it compares with P2P
    depends on the link. Without a staged figure such a pair has no expectation."""
    measured = measured or {}
    model = dict(expectations.figures.p2p_gbps) if expectations else {}
    bands = dict(expectations.p2p_bands) if expectations else {}
    staged = dict(expectations.staged_gbps_by_class) if expectations else {}
    staged_bands = dict(expectations.staged_bands_by_class) if expectations else {}
    siblings = dict(medians.p2p_gbps) if medians else {}
    ids = {g.index: g.id for g in topo.gpus}
    # The pairs with any figure, gathered once (not once per pair: 331,200 pairs at 576 GPUs).
    known = model.keys() | measured.keys() | siblings.keys()
    cls = {
        (a, b): topo.link_class(ids[a], ids[b])
        for a in ids
        for b in ids
        if a != b and (a, b) in known
    }
    by_class: dict[str, list[tuple[PairKey, float]]] = {}
    for key, value in measured.items():
        if key in cls:
            by_class.setdefault(cls[key], []).append((key, value))
    out: dict[PairKey, PairExpectation] = {}
    for key, link_class in sorted(cls.items()):
        a, b = key
        m_value = model.get(key)
        staff = m_value is not None and key not in bands
        m_band = bands.get(key, 0.0)
        model_low = None if m_value is None or staff else m_value * (1 - m_band)
        candidates: list[PairExpectation] = []
        if key in siblings:
            n = f"{sibling_count} " if sibling_count else ""
            candidates.append(
                PairExpectation(
                    a, b, link_class, siblings[key], "siblings", MEASURED_BAND,
                    f"the median of {n}SKU siblings' GPU{a}->GPU{b}",
                    None if staff else m_value, m_band,
                )
            )  # fmt: skip
        pair = {key, (b, a)}
        others = [v for k, v in by_class.get(link_class, ()) if k not in pair]
        if len(others) >= MIN_SAME_CLASS_PAIRS:
            candidates.append(
                PairExpectation(
                    a, b, link_class, statistics.median(others), "self", MEASURED_BAND,
                    f"this server's other {len(others)} {link_class} pairs",
                    None if staff else m_value, m_band,
                )
            )  # fmt: skip
        chosen = next(
            (
                c
                for c in candidates
                if model_low is None or c.value_gbps >= FAR_BELOW_BAND * model_low
            ),
            None,
        )
        if chosen is None and m_value is not None:
            if staff:
                band = (
                    1 - (expectations.thresholds if expectations else Thresholds()).bandwidth_ratio
                )
                chosen = PairExpectation(a, b, link_class, m_value, "staff", band, _STAFF)
            else:
                chosen = PairExpectation(
                    a, b, link_class, m_value, "model", m_band,
                    f"the cost model's {link_class} figure (+-{m_band:.0%})",
                    m_value, m_band,
                )  # fmt: skip
        if chosen is not None and chosen.source != "siblings" and frozenset(key) in host_staged:
            chosen = _staged_expectation(key, link_class, staged, staged_bands)
        if chosen is not None:
            out[key] = chosen
    return PairExpectations(out)


def _staged_expectation(
    key: PairKey, link_class: str, staged: Mapping[str, float], bands: Mapping[str, float]
) -> PairExpectation | None:
    """The cost model's figure for the pair's copy staged through host memory, if it gave one."""
    value = staged.get(link_class)
    if value is None:
        return None
    band = bands.get(link_class, 0.0)
    return PairExpectation(
        key[0], key[1], link_class, value, "model", band,
        f"the cost model's {link_class} figure for a host-staged copy (P2P unavailable) "
        f"(+-{band:.0%})",
        value, band,
    )  # fmt: skip


def judge(expectation: PairExpectation, measured: float, thresholds: Thresholds) -> Judgement:
    """How a measured figure stands against its expectation. Against measured evidence: a
    warning under thresholds.sku_median_ratio of it, critical under FAR_BELOW_EVIDENCE. Against
    the model or staff: nothing inside the band, a warning below it, critical only far below
    its low edge (FAR_BELOW_BAND)."""
    e = expectation
    ratio = measured / e.value_gbps if e.value_gbps > 0 else 1.0
    words = f"{ratio:.0%} of {e.evidence} ({e.value_gbps:.1f} GB/s)"
    if e.source in ("siblings", "self"):
        if ratio < FAR_BELOW_EVIDENCE:
            return Judgement("critical", ratio, words)
        if ratio < thresholds.sku_median_ratio:
            return Judgement("warning", ratio, words)
        return Judgement(None, ratio, words)
    low = e.low_gbps
    if measured >= low:
        return Judgement(None, ratio, words)
    far = measured < FAR_BELOW_BAND * low
    return Judgement("critical" if far else "warning", ratio, words)


@dataclass(frozen=True)
class Network:
    """What a collector or staff say of a server's RDMA network (None: not known)."""

    nics_per_node: int | None = None
    nic_gbits: float | None = None


@dataclass(frozen=True)
class NetworkExpectation:
    """The busbw a multi-node nccl-tests run should reach, bound by its nodes' NICs."""

    collective: str
    nodes: int
    ranks: int
    at_bytes: int
    value_gbps: float
    band: float
    nics_per_node: float
    nic_gbits: float
    evidence: str

    @property
    def low_gbps(self) -> float:
        return self.value_gbps * (1 - self.band)

    def to_document(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "nodes": self.nodes,
            "ranks": self.ranks,
            "at_bytes": self.at_bytes,
            "expected_gbps": round(self.value_gbps, 2),
            "band": round(self.band, 3),
            "low_gbps": round(self.low_gbps, 2),
            "nics_per_node": self.nics_per_node,
            "nic_gbits": self.nic_gbits,
            "evidence": self.evidence,
        }


def run_hosts(run: NcclRun) -> list[str]:
    """The hosts a run's rank lines name, in order of first appearance."""
    seen: dict[str, None] = {}
    for rank in run.ranks:
        if rank.host:
            seen.setdefault(rank.host, None)
    return list(seen)


def network_expectation(
    topo: Topology, run: NcclRun, at_bytes: int, network: Network | None = None
) -> NetworkExpectation | None:
    """The NIC-bound busbw of a run over several hosts (its rank lines name them), priced by
    the cost model over that many servers wired like this one: the NICs the collector reports
    (else the capture's, else one per GPU), at their reported rate (else the generation's).
    None for a run on one host, or one the model cannot price."""
    hosts = run_hosts(run)
    if len(hosts) < 2 or run.collective is None or not topo.gpus:
        return None
    network = network or Network()
    names = [r.name for r in run.ranks if r.name]
    per_host = [sum(1 for r in run.ranks if r.host == h) for h in hosts]
    local = len(topo.gpus)
    if len(set(per_host)) != 1 or per_host[0] > local:
        return None
    try:
        model = build_model(
            topo,
            names[0] if names else None,
            nodes=len(hosts),
            nic_gbits=network.nic_gbits,
            nics_per_node=network.nics_per_node,
        )
        gpus = [node * local + g for node in range(len(hosts)) for g in range(per_host[0])]
        cost = collective_cost(model, run.collective, gpus, at_bytes)
    except ValueError:
        return None
    hw = model.hardware
    nics = model.nics_per_node * min(per_host[0], local) / local
    source = "reported" if network.nic_gbits else hw.nic_source
    count = (
        "reported"
        if network.nics_per_node
        else ("one per GPU assumed" if model.nic_assumed else "from the capture")
    )
    return NetworkExpectation(
        run.collective,
        len(hosts),
        len(run.ranks),
        at_bytes,
        cost.busbw_gbps,
        BUSBW_MODEL_BAND,
        round(max(1.0, nics), 2),
        hw.nic_gbps * 8,
        f"{len(hosts)} nodes' NICs: {max(1.0, nics):g} per node ({count}) at "
        f"{hw.nic_gbps * 8:g} Gb/s ({source}), {cost.algorithm} bound by {cost.bottleneck}",
    )
