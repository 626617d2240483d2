"""Health findings for one server: links wired, trained or measured worse than they should be.

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

import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from topoweb.core.catalogue import infer_generation
from topoweb.core.costs import COLLECTIVES, build_model, collective_cost, p2p_matrix
from topoweb.core.fingerprint import canonical_order, nvlink_fabric, topology_fingerprint
from topoweb.core.hierarchy import recover_hierarchy
from topoweb.core.model import NcclRun, P2PResult, Topology, link_class_rank, nvlink_count

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
)

# A mapping search over renumbered devices stops being worth it past this many candidates;
# beyond it devices are matched by their printed ids.
_MAX_MATCHINGS = 20_000
_UNKNOWN_MARKERS = {"unsupported", "n/a", "unknown", "not supported", ""}


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


# --- expected and measured figures ------------------------------------------------------------

PairKey = tuple[int, int]  # (source GPU index, destination GPU index)
CollectiveKey = tuple[str, int]  # (nccl-tests collective name, number of ranks)


@dataclass(frozen=True)
class Figures:
    """Bandwidth figures of one server (or a SKU's median): GB/s per direction for each ordered
    GPU pair, and nccl-tests busbw at large messages for each collective and rank count."""

    p2p_gbps: Mapping[PairKey, float] = field(default_factory=dict, hash=False)
    busbw_gbps: Mapping[CollectiveKey, float] = field(default_factory=dict, hash=False)

    def to_document(self) -> dict[str, Any]:
        return {
            "p2p_gbps": [
                {"src": s, "dst": d, "gbps": v} for (s, d), v in sorted(self.p2p_gbps.items())
            ],
            "busbw_gbps": [
                {"collective": c, "ranks": n, "gbps": v}
                for (c, n), v in sorted(self.busbw_gbps.items())
            ],
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Figures:
        try:
            return cls(
                p2p_gbps={
                    (int(x["src"]), int(x["dst"])): float(x["gbps"])
                    for x in doc.get("p2p_gbps", ())
                },
                busbw_gbps={
                    (str(x["collective"]), int(x["ranks"])): float(x["gbps"])
                    for x in doc.get("busbw_gbps", ())
                },
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HealthInputError(f"malformed figures document: {exc}") from exc


@dataclass(frozen=True)
class Thresholds:
    bandwidth_ratio: float = 0.9  # measured / expected under this is below expectation
    sku_median_ratio: float = 0.9  # measured / SKU median under this is an outlier
    large_message_bytes: int = 256 * 2**20  # nccl-tests rows from this size on show the plateau
    p2p_min_gain: float = 1.05  # P2P=Enabled must beat P2P=Disabled by more than this factor

    def to_document(self) -> dict[str, Any]:
        return {
            "bandwidth_ratio": self.bandwidth_ratio,
            "sku_median_ratio": self.sku_median_ratio,
            "large_message_bytes": self.large_message_bytes,
            "p2p_min_gain": self.p2p_min_gain,
        }


@dataclass(frozen=True)
class Expectations:
    """What a server should reach, and where those figures come from (shown in reports)."""

    figures: Figures
    thresholds: Thresholds = Thresholds()
    basis: str = ""

    def to_document(self) -> dict[str, Any]:
        return {
            "figures": self.figures.to_document(),
            "thresholds": self.thresholds.to_document(),
            "basis": self.basis,
        }


def expectations_by_class(
    topo: Topology,
    p2p_gbps_by_class: Mapping[str, float],
    busbw_gbps_by_collective: Mapping[str, float],
    thresholds: Thresholds = Thresholds(),
    basis: str = "",
) -> Expectations:
    """Expectations from per-link-class figures (as staff enter them for a SKU): every ordered GPU
    pair expects its class's GB/s per direction; busbw figures apply to a run over all GPUs."""
    gpus = topo.gpus
    pairs = {
        (a.index, b.index): float(p2p_gbps_by_class[cls])
        for a in gpus
        for b in gpus
        if a.id != b.id and (cls := topo.link_class(a.id, b.id)) in p2p_gbps_by_class
    }
    busbw = {(c, len(gpus)): float(v) for c, v in busbw_gbps_by_collective.items()}
    return Expectations(Figures(pairs, busbw), thresholds, basis)


# The top of a standard nccl-tests sweep: predicted busbw there is the plateau measured rows reach.
_MODEL_MESSAGE_BYTES = 8 * 2**30


def expectations_from_model(
    topo: Topology, gpu_model: str | None = None, thresholds: Thresholds = Thresholds()
) -> Expectations:
    """What the cost model predicts for this wiring and GPU generation (uncalibrated): P2P copy
    bandwidth per ordered GPU pair and large-message busbw of each collective over all GPUs."""
    model = build_model(topo, gpu_model)
    uni = p2p_matrix(model)["unidirectional_gbps"]
    order = sorted(g.index for g in topo.gpus)
    pairs = {
        (a, b): float(value)
        for i, a in enumerate(order)
        for j, b in enumerate(order)
        if (value := uni[i][j]) is not None
    }
    busbw: dict[CollectiveKey, float] = {}
    if len(order) >= 2:
        for name in COLLECTIVES:
            if name == "sendrecv" and len(order) != 2:
                continue  # nccl-tests' sendrecv over more GPUs is a ring of pairs, not modelled
            cost = collective_cost(model, name, order, _MODEL_MESSAGE_BYTES)
            busbw[(name, len(order))] = round(cost.busbw_gbps, 2)
    assumption = infer_generation(topo, gpu_model).assumption
    return Expectations(
        Figures(pairs, busbw), thresholds, basis=f"cost model, uncalibrated ({assumption})"
    )


def _p2p_cells(p2p: P2PResult) -> dict[PairKey, tuple[float, str]]:
    """Per-direction P2P=Enabled bandwidth per ordered pair, and which matrix it came from.
    Elided pastes may keep only the bidirectional matrix: half of it is one direction."""
    uni = p2p.matrices.get("unidirectional_p2p_enabled_gbps")
    bi = p2p.matrices.get("bidirectional_p2p_enabled_gbps")
    cells: dict[PairKey, tuple[float, str]] = {}
    n = len(p2p.gpus)
    for i, j in itertools.permutations(range(n), 2):
        if uni is not None and i < len(uni) and j < len(uni[i]):
            cells[(i, j)] = (uni[i][j], "unidirectional P2P=Enabled")
        elif bi is not None and i < len(bi) and j < len(bi[i]):
            cells[(i, j)] = (bi[i][j] / 2, "bidirectional P2P=Enabled / 2")
    return cells


def _ranks(run: NcclRun) -> int:
    return len(run.ranks) or (run.n_gpus or 0) * (run.n_threads or 1)


def _large_busbw(run: NcclRun, thresholds: Thresholds) -> tuple[float, int] | None:
    """Best busbw over the rows at or past the large-message size, and the size it was seen at."""
    best: tuple[float, int] | None = None
    for row in run.rows:
        if row.bytes < thresholds.large_message_bytes:
            continue
        for m in (row.out_of_place, row.in_place):
            if m.busbw_gbps is not None and (best is None or m.busbw_gbps > best[0]):
                best = (m.busbw_gbps, row.bytes)
    return best


def measured_figures(
    p2p: P2PResult | None = None,
    nccl_runs: Sequence[NcclRun] = (),
    thresholds: Thresholds = Thresholds(),
) -> Figures:
    """The figures one server's benchmarks show, in the shape expectations and medians use."""
    pairs = {k: v for k, (v, _) in _p2p_cells(p2p).items()} if p2p else {}
    busbw: dict[CollectiveKey, float] = {}
    for run in nccl_runs:
        best = _large_busbw(run, thresholds)
        if run.collective and best is not None:
            key = (run.collective, _ranks(run))
            busbw[key] = max(best[0], busbw.get(key, 0.0))
    return Figures(pairs, busbw)


def median_figures(servers: Iterable[Figures]) -> Figures:
    """Per-figure median over the servers that measured it (the SKU's usual figures)."""
    pairs: dict[PairKey, list[float]] = {}
    busbw: dict[CollectiveKey, list[float]] = {}
    for f in servers:
        for pk, v in f.p2p_gbps.items():
            pairs.setdefault(pk, []).append(v)
        for ck, v in f.busbw_gbps.items():
            busbw.setdefault(ck, []).append(v)
    return Figures(
        {k: statistics.median(v) for k, v in pairs.items()},
        {k: statistics.median(v) for k, v in busbw.items()},
    )


def _figure_name(key: PairKey | CollectiveKey) -> str:
    if isinstance(key[0], str):
        return f"{key[0]} busbw, {key[1]} ranks"
    return f"p2p GPU{key[0]}->GPU{key[1]}"


def sku_distribution(
    servers: Mapping[str, Figures], ratio: float = Thresholds().sku_median_ratio
) -> list[dict[str, Any]]:
    """For each figure the SKU's servers measured: the values by hostname, their spread, and
    the servers under `ratio` x median named as outliers."""
    keys: set[PairKey | CollectiveKey] = set()
    for f in servers.values():
        keys.update(f.p2p_gbps)
        keys.update(f.busbw_gbps)
    out = []
    for key in sorted(keys, key=lambda k: (isinstance(k[0], int), k)):
        values: dict[str, float] = {}
        for host, f in sorted(servers.items()):
            table: Mapping[Any, float] = f.p2p_gbps if isinstance(key[0], int) else f.busbw_gbps
            if key in table:
                values[host] = table[key]
        med = statistics.median(values.values())
        out.append(
            {
                "figure": _figure_name(key),
                "kind": "p2p" if isinstance(key[0], int) else "busbw",
                "key": list(key),
                "values": values,
                "median_gbps": med,
                "min_gbps": min(values.values()),
                "max_gbps": max(values.values()),
                "outliers": [h for h, v in values.items() if v < ratio * med],
            }
        )
    return out


# --- topology comparison ----------------------------------------------------------------------


@dataclass(frozen=True)
class TopologyDiff:
    """How `new` differs from `old`, with devices matched across renumbering."""

    gone: tuple[str, ...]  # ids in the old topology
    added: tuple[str, ...]  # ids in the new topology
    renamed: tuple[tuple[str, str], ...]  # (old id, new id) of matched devices whose id moved
    changed: tuple[tuple[str, str, str, str], ...]  # (new a, new b, old class, new class)

    @property
    def empty(self) -> bool:
        return not (self.gone or self.added or self.changed)

    def to_document(self) -> dict[str, Any]:
        return {
            "gone": list(self.gone),
            "added": list(self.added),
            "renamed": [{"old": o, "new": n} for o, n in self.renamed],
            "changed": [{"a": a, "b": b, "old": o, "new": n} for a, b, o, n in self.changed],
        }


def _candidate_matchings(old: Topology, new: Topology) -> Iterable[dict[str, str]]:
    """Order-preserving matchings per device kind: nvidia-smi numbers devices by PCI order, so a
    GPU that drops off the bus shifts the ones after it down by one, never reorders them."""
    per_kind: list[list[list[tuple[str, str]]]] = []
    for kind in ("gpu", "nic"):
        o = [d.id for d in old.devices if d.kind == kind]
        n = [d.id for d in new.devices if d.kind == kind]
        if len(o) >= len(n):
            options = [list(zip(sub, n, strict=True)) for sub in itertools.combinations(o, len(n))]
        else:
            options = [list(zip(o, sub, strict=True)) for sub in itertools.combinations(n, len(o))]
        per_kind.append(options)
    total = 1
    for options in per_kind:
        total *= len(options)
    if total > _MAX_MATCHINGS:
        # Too many to search: the first option of each kind keeps ids in place.
        per_kind = [options[:1] for options in per_kind]
    for combo in itertools.product(*per_kind):
        yield dict(itertools.chain.from_iterable(combo))
    # Servers of one SKU may number the same NVLink mesh differently (a DGX-1V board against
    # another capture of it): match GPUs so the meshes coincide, NICs in order.
    fabric = _fabric_matching(old, new)
    if fabric is not None:
        for nics in per_kind[1][:1]:
            yield fabric | dict(nics)


def _fabric_matching(old: Topology, new: Topology) -> dict[str, str] | None:
    """GPUs of `old` onto those of `new` under which their NVLink meshes coincide, or None
    when the meshes differ (or there is no NVLink to align by)."""
    a, b = nvlink_fabric(old), nvlink_fabric(new)
    if not any(lnk.is_nvlink for lnk in a.links) or len(a.devices) != len(b.devices):
        return None
    if topology_fingerprint(a) != topology_fingerprint(b):
        return None
    return dict(zip(canonical_order(a), canonical_order(b), strict=True))


def diff_topologies(old: Topology, new: Topology) -> TopologyDiff:
    """The smallest explanation of how `new` differs from `old` (devices gone or added, link
    classes changed), trying every order-preserving way to match renumbered devices and the
    matching that aligns their NVLink meshes."""
    best: tuple[int, dict[str, str], list[tuple[str, str, str, str]]] | None = None
    for mapping in _candidate_matchings(old, new):
        changed = []
        for oa, ob in itertools.combinations(mapping, 2):
            na, nb = mapping[oa], mapping[ob]
            before, after = old.link_class(oa, ob), new.link_class(na, nb)
            if before != after:
                changed.append((na, nb, before, after))
        # A matched device on another NUMA node is a worse explanation than one on the same.
        moved = sum(
            old.device(o).numa_affinity != new.device(n).numa_affinity for o, n in mapping.items()
        )
        cost = len(changed) + moved
        if best is None or cost < best[0]:
            best = (cost, mapping, changed)
    assert best is not None  # there is always at least the empty matching
    _, mapping, changed = best
    position = {d.id: i for i, d in enumerate(new.devices)}
    changed.sort(key=lambda c: (position[c[0]], position[c[1]]))
    return TopologyDiff(
        gone=tuple(d.id for d in old.devices if d.id not in mapping),
        added=tuple(d.id for d in new.devices if d.id not in mapping.values()),
        renamed=tuple((o, n) for o, n in mapping.items() if o != n),
        changed=tuple(changed),
    )


def _farther(before: str, after: str) -> bool:
    rb, ra = link_class_rank(before), link_class_rank(after)
    return ra > rb or (ra == rb and nvlink_count(after) < nvlink_count(before))


# --- the checks -------------------------------------------------------------------------------


def _ordered(topo: Topology, ids: Iterable[str]) -> tuple[str, ...]:
    position = {d.id: i for i, d in enumerate(topo.devices)}
    return tuple(sorted(set(ids), key=lambda x: (position.get(x, len(position)), x)))


def _nic_far_from_gpu(topo: Topology) -> list[Finding]:
    if not topo.nics:
        return []
    far = {}
    for gpu in topo.gpus:
        nearest = min(topo.nics, key=lambda n: link_class_rank(topo.link_class(gpu.id, n.id)))
        cls = topo.link_class(gpu.id, nearest.id)
        if cls == "SYS":
            far[gpu.id] = {"nearest_nic": nearest.nic_name or nearest.id, "class": cls}
    if not far:
        return []
    names = ", ".join(far)
    return [
        Finding(
            kind=NIC_FAR_FROM_GPU,
            severity="warning",
            devices=tuple(far),
            evidence={"gpus": far},
            advice=(
                "GPUDirect RDMA from these GPUs crosses the socket link. Place multi-node ranks "
                "on GPUs with a NIC on their own NUMA node, or add a NIC to that node."
            ),
            message=f"{names}: nearest NIC is across the socket link (SYS)",
        )
    ]


def _inconsistent_matrix(topo: Topology) -> list[Finding]:
    """Cells that contradict the PCIe/NUMA nesting, as the hierarchy recovery reports them."""
    contradictions = [
        f
        for f in recover_hierarchy(topo).findings
        if f.kind in ("nesting_violation", "numa_affinity_conflict")
    ]
    if not contradictions:
        return []
    devices = _ordered(topo, [d for f in contradictions for d in f.devices])
    return [
        Finding(
            kind=INCONSISTENT_MATRIX,
            severity="warning",
            devices=devices,
            evidence={"contradictions": [f.to_document() for f in contradictions]},
            advice=(
                "The matrix cannot describe one PCIe tree: check for a mis-seated card or riser, "
                "a BIOS that misreports NUMA affinity, or a paste that mixes two machines."
            ),
            message=f"{len(contradictions)} cell(s) contradict the PCIe/NUMA nesting: "
            + contradictions[0].message,
        )
    ]


def _drift_from_previous(topo: Topology, previous: Topology) -> list[Finding]:
    diff = diff_topologies(previous, topo)
    if diff.empty:
        return []
    worse = bool(diff.gone) or any(_farther(o, n) for _, _, o, n in diff.changed)
    parts = []
    if diff.gone:
        parts.append(f"gone since the previous snapshot: {', '.join(diff.gone)}")
    if diff.added:
        parts.append(f"new: {', '.join(diff.added)}")
    if diff.changed:
        parts.append(
            "changed: "
            + ", ".join(f"{a}-{b} {o}->{n}" for a, b, o, n in diff.changed[:6])
            + (" ..." if len(diff.changed) > 6 else "")
        )
    changed_devices = [x for a, b, _, _ in diff.changed for x in (a, b)]
    return [
        Finding(
            kind=TOPOLOGY_DRIFT,
            severity="critical" if worse else "warning",
            devices=diff.gone + _ordered(topo, [*diff.added, *changed_devices]),
            evidence={"against": "previous snapshot", "diff": diff.to_document()},
            advice=(
                "Check that every GPU and NIC is seated and visible (nvidia-smi -L, lspci, dmesg "
                "for Xid/AER errors) and that NVLink cables and bridges are in place."
            ),
            message="; ".join(parts),
        )
    ]


def _against_sku(
    topo: Topology,
    reference: Topology | None,
    fingerprint: str | None,
    sku_fingerprint: str | None,
) -> list[Finding]:
    if reference is None:
        if fingerprint and sku_fingerprint and fingerprint != sku_fingerprint:
            return [
                Finding(
                    kind=TOPOLOGY_DRIFT,
                    severity="warning",
                    devices=(),
                    evidence={
                        "against": "SKU",
                        "fingerprint": fingerprint,
                        "sku_fingerprint": sku_fingerprint,
                    },
                    advice="Compare this server's matrix with a sibling of the same SKU.",
                    message="wiring differs from the usual wiring of its SKU",
                )
            ]
        return []
    diff = diff_topologies(reference, topo)
    reduced = [
        c for c in diff.changed if nvlink_count(c[2]) > nvlink_count(c[3]) and nvlink_count(c[3])
    ]
    findings = _degraded_nvlink_findings(topo, reference, diff, reduced)
    rest = TopologyDiff(
        diff.gone, diff.added, diff.renamed, tuple(c for c in diff.changed if c not in reduced)
    )
    if not rest.empty:
        changed_devices = [x for a, b, _, _ in rest.changed for x in (a, b)]
        findings.append(
            Finding(
                kind=TOPOLOGY_DRIFT,
                severity="critical" if rest.gone else "warning",
                devices=rest.gone + _ordered(topo, [*rest.added, *changed_devices]),
                evidence={
                    "against": "SKU",
                    "fingerprint": fingerprint,
                    "sku_fingerprint": sku_fingerprint,
                    "diff": rest.to_document(),
                },
                advice="Compare this server's matrix with a sibling of the same SKU.",
                message=(
                    f"wiring differs from its SKU: {len(rest.gone)} device(s) missing, "
                    f"{len(rest.added)} extra, {len(rest.changed)} link(s) of another class"
                ),
            )
        )
    return findings


def _degraded_nvlink_findings(
    topo: Topology,
    reference: Topology,
    diff: TopologyDiff,
    reduced: list[tuple[str, str, str, str]],
) -> list[Finding]:
    """One finding per GPU whose every NVLink peer lost links (its own ports are short, as an
    NVSwitch GPU with a dead link shows), one per remaining pair (a bundle between two GPUs)."""
    if not reduced:
        return []
    back = {n: o for o, n in diff.renamed}
    nv_peers: dict[str, set[str]] = {}
    for a, b in itertools.permutations([g.id for g in topo.gpus], 2):
        oa, ob = back.get(a, a), back.get(b, b)
        try:
            if nvlink_count(reference.link_class(oa, ob)):
                nv_peers.setdefault(a, set()).add(b)
        except KeyError:
            continue
    reduced_peers: dict[str, set[str]] = {}
    for a, b, _, _ in reduced:
        reduced_peers.setdefault(a, set()).add(b)
        reduced_peers.setdefault(b, set()).add(a)
    whole = [
        g
        for g in _ordered(topo, reduced_peers)
        if len(nv_peers.get(g, ())) > 1 and reduced_peers[g] == nv_peers[g]
    ]
    advice = (
        "Reseat or replace the NVLink cable/bridge or baseboard connection of these GPUs; "
        "nvidia-smi nvlink -s shows which links are down."
    )
    findings = []
    for g in whole:
        cells = {b: (o, n) for a, b, o, n in reduced if a == g} | {
            a: (o, n) for a, b, o, n in reduced if b == g
        }
        before = sorted({o for o, _ in cells.values()})
        after = sorted({n for _, n in cells.values()})
        findings.append(
            Finding(
                kind=DEGRADED_NVLINK,
                severity="critical",
                devices=(g,),
                evidence={
                    "against": "SKU",
                    "peers": {p: {"sku": o, "now": n} for p, (o, n) in sorted(cells.items())},
                },
                advice=advice,
                message=f"{g} shows {'/'.join(after)} to its peers where its SKU shows "
                f"{'/'.join(before)}",
            )
        )
    for a, b, o, n in reduced:
        if a in whole or b in whole:
            continue
        findings.append(
            Finding(
                kind=DEGRADED_NVLINK,
                severity="critical",
                devices=(a, b),
                evidence={"against": "SKU", "sku_class": o, "class": n},
                advice=advice,
                message=f"{a}-{b} is {n} where its SKU shows {o}",
            )
        )
    return findings


def _unknown(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    text = value.strip().lower()
    return text in _UNKNOWN_MARKERS or text.startswith("error")


def _int_or_none(value: Any, where: str) -> int | None:
    if _unknown(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise HealthInputError(f"NVML facts: {where} is {value!r}, expected an integer")


def _link_up(value: Any, where: str) -> bool | None:
    if isinstance(value, bool):
        return value
    if _unknown(value):
        return None
    text = str(value).strip().lower()
    if text in ("up", "active", "enabled", "1"):
        return True
    if text in ("down", "inactive", "disabled", "0"):
        return False
    raise HealthInputError(f"NVML facts: {where} is {value!r}, expected 'up' or 'down'")


def _nvml_gpus(nvml: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if isinstance(nvml, Mapping) and nvml.get("available") is False:
        return []  # the collector could not load NVML: nothing to judge
    gpus = nvml.get("gpus") if isinstance(nvml, Mapping) else None
    if not isinstance(gpus, list) or not all(isinstance(g, Mapping) for g in gpus):
        raise HealthInputError("NVML facts: expected {'gpus': [{...}, ...]}")
    return gpus


def _nvml_findings(topo: Topology, nvml: Mapping[str, Any]) -> list[Finding]:
    findings = []
    gpus = _nvml_gpus(nvml)
    parsed: list[tuple[str, list[tuple[int | None, bool | None, int | None]]]] = []
    for n, g in enumerate(gpus):
        where = f"gpus[{n}]"
        index = _int_or_none(g.get("index"), f"{where}.index")
        try:
            gpu_id = topo.gpu(index).id if index is not None else None
        except KeyError:
            gpu_id = None  # a GPU NVML sees that the matrix does not; drift covers that
        if gpu_id is None:
            continue
        pcie = g.get("pcie") or {}
        if not isinstance(pcie, Mapping):
            raise HealthInputError(f"NVML facts: {where}.pcie is not an object")
        cg, mg, cw, mw = (
            _int_or_none(pcie.get(k, pcie.get(alias)), f"{where}.pcie.{k}")
            for k, alias in (
                ("current_generation", "current_gen"),
                ("max_generation", "max_gen"),
                ("current_width", "current_width"),
                ("max_width", "max_width"),
            )
        )
        slow_gen = cg is not None and mg is not None and cg < mg
        narrow = cw is not None and mw is not None and cw < mw
        if slow_gen or narrow:
            findings.append(
                Finding(
                    kind=DOWNTRAINED_PCIE,
                    # A narrower link is never power saving; a lower generation can be idle.
                    severity="critical" if narrow else "warning",
                    devices=(gpu_id,),
                    evidence={
                        "current_gen": cg,
                        "max_gen": mg,
                        "current_width": cw,
                        "max_width": mw,
                    },
                    advice=(
                        "Check under load (idle GPUs may lower the generation to save power); "
                        "if it stays low, reseat the card or riser, check BIOS PCIe speed "
                        "settings and lspci -vv LnkSta for the slot."
                    ),
                    message=f"{gpu_id} PCIe link runs at Gen{cg} x{cw}, capable of Gen{mg} x{mw}",
                )
            )
        links = g.get("nvlinks") or []
        if isinstance(links, str):
            links = []  # the driver has no NVLink functions ("unsupported")
        if not isinstance(links, list) or not all(isinstance(x, Mapping) for x in links):
            raise HealthInputError(f"NVML facts: {where}.nvlinks is not a list of objects")
        parsed.append(
            (
                gpu_id,
                [
                    (
                        _int_or_none(x.get("link"), f"{where}.nvlinks[{k}].link"),
                        _link_up(x.get("state"), f"{where}.nvlinks[{k}].state"),
                        _int_or_none(x.get("version"), f"{where}.nvlinks[{k}].version"),
                    )
                    for k, x in enumerate(links)
                ],
            )
        )
    versions = [v for _, links in parsed for _, up, v in links if up and v is not None]
    top_version = max(versions, default=None)
    for gpu_id, links in parsed:
        has_nvlink = any(up for _, up, _ in links) or any(
            nvlink_count(topo.link_class(gpu_id, other.id))
            for other in topo.gpus
            if other.id != gpu_id
        )
        # A PCIe card with NVLink ports but no bridge shows every link down: not a fault.
        if not has_nvlink:
            continue
        down = [lk for lk, up, _ in links if up is False]
        old = [
            {"link": lk, "version": v}
            for lk, up, v in links
            if up and v is not None and top_version is not None and v < top_version
        ]
        if not down and not old:
            continue
        parts = []
        if down:
            parts.append(f"{len(down)} NVLink(s) down ({', '.join(map(str, down))})")
        if old:
            parts.append(f"{len(old)} NVLink(s) below version {top_version}")
        findings.append(
            Finding(
                kind=DEGRADED_NVLINK,
                severity="critical",
                devices=(gpu_id,),
                evidence={
                    "against": "NVML",
                    "links_down": down,
                    "links_lower_version": old,
                    "server_link_version": top_version,
                },
                advice=(
                    "nvidia-smi nvlink -s / -e shows the state and error counters; reseat or "
                    "replace the cable or board, and check the fabric manager on NVSwitch systems."
                ),
                message=f"{gpu_id}: " + "; ".join(parts),
            )
        )
    return findings


def _nvml_p2p_findings(
    topo: Topology, nvml: Mapping[str, Any], covered: set[frozenset[str]]
) -> list[Finding]:
    """NVML's P2P status (what `nvidia-smi topo -p2p` prints) for pairs that should have P2P."""
    entries = nvml.get("p2p") if nvml.get("available") is not False else None
    if not isinstance(entries, list):
        return []
    pairs: dict[frozenset[str], dict[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise HealthInputError("NVML facts: p2p holds something other than objects")
        i = _int_or_none(entry.get("from"), "p2p[].from")
        j = _int_or_none(entry.get("to"), "p2p[].to")
        try:
            a, b = topo.gpu(i if i is not None else -1).id, topo.gpu(j if j is not None else -1).id
        except KeyError:
            continue  # a GPU the matrix does not show
        bad = {
            cap: str(entry[cap])
            for cap in ("read", "write")
            if not _unknown(entry.get(cap)) and str(entry.get(cap)).upper() != "OK"
        }
        cls = topo.link_class(a, b)
        key = frozenset((a, b))
        if not bad or cls in ("NODE", "SYS") or key in covered or key in pairs:
            continue
        first, second = _ordered(topo, (a, b))
        pairs[key] = {"a": first, "b": second, "class": cls, "nvml_status": bad}
    if not pairs:
        return []
    return [_p2p_unavailable(topo, list(pairs.values()), "NVML reports P2P as not supported")]


def _gpu_id(topo: Topology, index: int, what: str) -> str:
    try:
        return topo.gpu(index).id
    except KeyError:
        raise HealthInputError(
            f"{what} names GPU {index} but the topology has {len(topo.gpus)} GPU(s)"
        ) from None


def _below_expected(
    topo: Topology,
    measured: Mapping[Any, float],
    expected: Mapping[Any, float],
    medians: Mapping[Any, float],
    thresholds: Thresholds,
) -> dict[Any, dict[str, Any]]:
    """Figures under threshold x expected or threshold x SKU median, with the comparison made."""
    low = {}
    for key, value in measured.items():
        e, m = expected.get(key), medians.get(key)
        below_e = e is not None and e > 0 and value < thresholds.bandwidth_ratio * e
        below_m = m is not None and m > 0 and value < thresholds.sku_median_ratio * m
        if below_e or below_m:
            low[key] = {
                "measured_gbps": round(value, 2),
                "expected_gbps": e,
                "ratio": round(value / e, 3) if e else None,
                "sku_median_gbps": m,
                "median_ratio": round(value / m, 3) if m else None,
                "below_expected": below_e,
                "below_sku_median": below_m,
            }
    return low


_BELOW_ADVICE = (
    "Check the link under load: NVLink errors (nvidia-smi nvlink -e), PCIe link state "
    "(lspci -vv LnkSta), BIOS settings (ACS, IOMMU, power profile) and GPU clocks; compare "
    "with a sibling of the same SKU."
)


def _p2p_findings(
    topo: Topology,
    p2p: P2PResult,
    expectations: Expectations | None,
    medians: Figures | None,
    thresholds: Thresholds,
) -> list[Finding]:
    n = len(p2p.gpus)
    if n > len(topo.gpus):
        raise HealthInputError(f"the p2p result has {n} GPUs but the topology has {len(topo.gpus)}")
    ids = [_gpu_id(topo, i, "the p2p result") for i in range(n)]
    findings = []
    unavailable: set[frozenset[int]] = set()

    no_access: list[dict[str, Any]] = []
    if p2p.p2p_access is not None:
        for i, j in itertools.combinations(range(n), 2):
            if p2p.p2p_access[i][j] and p2p.p2p_access[j][i]:
                continue
            cls = topo.link_class(ids[i], ids[j])
            # Across host bridges or sockets P2P is often off by platform design; within a PCIe
            # switch or over NVLink it should work, so its absence is a fault.
            if cls in ("NODE", "SYS"):
                continue
            unavailable.add(frozenset((i, j)))
            no_access.append({"a": ids[i], "b": ids[j], "class": cls})
    if no_access:
        findings.append(_p2p_unavailable(topo, no_access, "the P2P access matrix says no"))

    no_gain: list[dict[str, Any]] = []
    uni_en = p2p.matrices.get("unidirectional_p2p_enabled_gbps")
    uni_dis = p2p.matrices.get("unidirectional_p2p_disabled_gbps")
    bi_en = p2p.matrices.get("bidirectional_p2p_enabled_gbps")
    bi_dis = p2p.matrices.get("bidirectional_p2p_disabled_gbps")
    en, dis = (uni_en, uni_dis) if uni_en and uni_dis else (bi_en, bi_dis)
    if en and dis:

        def no_better(i: int, j: int) -> bool:
            return 0 < dis[i][j] and en[i][j] <= thresholds.p2p_min_gain * dis[i][j]

        for i, j in itertools.combinations(range(n), 2):
            if frozenset((i, j)) in unavailable:
                continue
            if p2p.p2p_access is not None and not p2p.p2p_access[i][j]:
                continue  # P2P off by design for this pair: no gain to expect
            # ACS or the IOMMU reroute both directions; one slow direction is a slow link.
            if no_better(i, j) and no_better(j, i):
                unavailable.add(frozenset((i, j)))
                no_gain.append(
                    {
                        "a": ids[i],
                        "b": ids[j],
                        "class": topo.link_class(ids[i], ids[j]),
                        "enabled_gbps": [en[i][j], en[j][i]],
                        "disabled_gbps": [dis[i][j], dis[j][i]],
                    }
                )
    if no_gain:
        findings.append(
            _p2p_unavailable(topo, no_gain, "P2P=Enabled bandwidth is no better than P2P=Disabled")
        )

    cells = _p2p_cells(p2p)
    measured = {k: v for k, (v, _) in cells.items() if frozenset(k) not in unavailable}
    low = _below_expected(
        topo,
        measured,
        expectations.figures.p2p_gbps if expectations else {},
        medians.p2p_gbps if medians else {},
        thresholds,
    )
    by_pair: dict[frozenset[int], dict[str, Any]] = {}
    for (i, j), ev in sorted(low.items()):
        by_pair.setdefault(frozenset((i, j)), {})[f"{ids[i]}->{ids[j]}"] = ev | {
            "source": cells[(i, j)][1]
        }
    for pair, directions in by_pair.items():
        i, j = sorted(pair)
        critical = any(ev["below_expected"] for ev in directions.values())
        worst = min(directions.values(), key=lambda ev: ev["ratio"] or ev["median_ratio"] or 1.0)
        against = (
            f"{worst['ratio']:.0%} of the expected {worst['expected_gbps']:.1f} GB/s"
            if worst["below_expected"]
            else f"{worst['median_ratio']:.0%} of the SKU median "
            f"{worst['sku_median_gbps']:.1f} GB/s"
        )
        findings.append(
            Finding(
                kind=BELOW_EXPECTED_BANDWIDTH,
                severity="critical" if critical else "warning",
                devices=(ids[i], ids[j]),
                evidence={
                    "benchmark": "p2pBandwidthLatencyTest",
                    "class": topo.link_class(ids[i], ids[j]),
                    "directions": directions,
                },
                advice=_BELOW_ADVICE,
                message=f"{ids[i]}-{ids[j]} ({topo.link_class(ids[i], ids[j])}) measured "
                f"{worst['measured_gbps']:.1f} GB/s per direction, {against}",
            )
        )
    return findings


def _p2p_unavailable(topo: Topology, pairs: list[dict[str, Any]], why: str) -> Finding:
    devices = _ordered(topo, [x for p in pairs for x in (p["a"], p["b"])])
    over_nvlink = any(nvlink_count(p["class"]) for p in pairs)
    shown = ", ".join(f"{p['a']}-{p['b']}" for p in pairs[:8]) + (" ..." if len(pairs) > 8 else "")
    return Finding(
        kind=P2P_UNAVAILABLE,
        severity="critical" if over_nvlink else "warning",
        devices=devices,
        evidence={"reason": why, "pairs": pairs},
        advice=(
            "Disable PCIe ACS on the switches between these GPUs (BIOS or setpci), set the "
            "IOMMU to passthrough (iommu=pt) or off, and check that the driver allows P2P for "
            "this GPU model; in VMs, P2P needs the hypervisor's support."
        ),
        message=f"P2P unavailable between {shown}: {why}",
    )


def _nccl_findings(
    topo: Topology,
    runs: Sequence[NcclRun],
    expectations: Expectations | None,
    medians: Figures | None,
    thresholds: Thresholds,
) -> list[Finding]:
    findings = []
    for number, run in enumerate(runs):
        name = run.collective or "nccl-tests"
        local = {r.device for r in run.ranks if r.device is not None}
        devices = tuple(g.id for g in topo.gpus if g.index in local) or tuple(
            g.id for g in topo.gpus
        )
        wrong = [
            {
                "bytes": row.bytes,
                "out_of_place": row.out_of_place.wrong,
                "in_place": row.in_place.wrong,
            }
            for row in run.rows
            if (row.out_of_place.wrong or 0) > 0 or (row.in_place.wrong or 0) > 0
        ]
        if wrong or run.errors or not run.rows:
            parts = []
            if wrong:
                parts.append(f"wrong results at {len(wrong)} size(s)")
            if run.errors:
                parts.append(f"the run died: {run.errors[0]}")
            if not run.rows:
                parts.append("no result rows (the run hung or was killed)")
            findings.append(
                Finding(
                    kind=FAILED_BENCHMARK,
                    severity="critical",
                    devices=devices,
                    evidence={
                        "run": number,
                        "collective": run.collective,
                        "wrong_rows": wrong,
                        "errors": list(run.errors),
                        "rows": len(run.rows),
                    },
                    advice=(
                        "Wrong results mean data corruption: check GPU memory (ECC, Xid errors "
                        "in dmesg), NVLink error counters and the NCCL/driver versions; rerun "
                        "with NCCL_DEBUG=INFO for a run that died."
                    ),
                    message=f"{name}: " + "; ".join(parts),
                )
            )
        best = _large_busbw(run, thresholds)
        if run.collective is None or best is None:
            continue
        key = (run.collective, _ranks(run))
        low = _below_expected(
            topo,
            {key: best[0]},
            expectations.figures.busbw_gbps if expectations else {},
            medians.busbw_gbps if medians else {},
            thresholds,
        )
        if key not in low:
            continue
        ev = low[key]
        against = (
            f"{ev['ratio']:.0%} of the expected {ev['expected_gbps']:.1f} GB/s"
            if ev["below_expected"]
            else f"{ev['median_ratio']:.0%} of the SKU median {ev['sku_median_gbps']:.1f} GB/s"
        )
        findings.append(
            Finding(
                kind=BELOW_EXPECTED_BANDWIDTH,
                severity="critical" if ev["below_expected"] else "warning",
                devices=devices,
                evidence=ev
                | {
                    "benchmark": "nccl-tests",
                    "collective": key[0],
                    "ranks": key[1],
                    "at_bytes": best[1],
                },
                advice=_BELOW_ADVICE,
                message=f"{run.collective} over {key[1]} ranks reached {best[0]:.1f} GB/s busbw, "
                f"{against}",
            )
        )
    return findings


_SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


def check_health(
    topo: Topology,
    *,
    previous: Topology | None = None,
    sku_reference: Topology | None = None,
    fingerprint: str | None = None,
    sku_fingerprint: str | None = None,
    nvml: Mapping[str, Any] | None = None,
    p2p: P2PResult | None = None,
    nccl_runs: Sequence[NcclRun] = (),
    expectations: Expectations | None = None,
    sku_medians: Figures | None = None,
    thresholds: Thresholds | None = None,
) -> tuple[Finding, ...]:
    """Every finding the inputs support, most severe first. Absent inputs check nothing:
    no NVML facts, no PCIe finding; no expectations or SKU medians, no bandwidth finding.
    `thresholds` defaults to the expectations' own, then to Thresholds()."""
    limits = thresholds or (expectations.thresholds if expectations else Thresholds())
    findings: list[Finding] = []
    findings += _nic_far_from_gpu(topo)
    findings += _inconsistent_matrix(topo)
    if previous is not None:
        findings += _drift_from_previous(topo, previous)
    findings += _against_sku(topo, sku_reference, fingerprint, sku_fingerprint)
    if nvml is not None:
        findings += _nvml_findings(topo, nvml)
    if p2p is not None:
        findings += _p2p_findings(topo, p2p, expectations, sku_medians, limits)
    if nvml is not None:
        covered = {
            frozenset((p["a"], p["b"]))
            for f in findings
            if f.kind == P2P_UNAVAILABLE
            for p in f.evidence["pairs"]
        }
        findings += _nvml_p2p_findings(topo, nvml, covered)
    findings += _nccl_findings(topo, nccl_runs, expectations, sku_medians, limits)
    kind_order = {k: i for i, k in enumerate(KINDS)}
    return tuple(sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], kind_order[f.kind])))


def _not_measured_groups(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Unmeasured figures folded by kind, link class and expectation: 56 NV12 pairs read better
    as one line than as 56."""
    groups: dict[tuple[str, str, float | None], int] = {}
    for row in rows:
        if row["status"] == "not measured":
            key = (row["kind"], row.get("class") or row["figure"], row["expected_gbps"])
            groups[key] = groups.get(key, 0) + 1
    return [
        {"kind": kind, "what": what, "count": count, "expected_gbps": expected}
        for (kind, what, expected), count in groups.items()
    ]


def acceptance_report(
    topo: Topology,
    expectations: Expectations,
    findings: Sequence[Finding],
    *,
    p2p: P2PResult | None = None,
    nccl_runs: Sequence[NcclRun] = (),
    sku_medians: Figures | None = None,
) -> dict[str, Any]:
    """Pass/fail against the SKU's expectations: fails on any critical finding or any measured
    figure under threshold x expected; incomplete when nothing expected was measured at all."""
    limits = expectations.thresholds
    measured = measured_figures(p2p, nccl_runs, limits)
    medians = sku_medians or Figures()
    rows = []
    for table in ("p2p_gbps", "busbw_gbps"):
        exp: Mapping[Any, float] = getattr(expectations.figures, table)
        got: Mapping[Any, float] = getattr(measured, table)
        med: Mapping[Any, float] = getattr(medians, table)
        for key in sorted(set(exp) | set(got)):
            e, m, s = exp.get(key), got.get(key), med.get(key)
            ratio = round(m / e, 3) if m is not None and e else None
            if m is None:
                status = "not measured"
            elif e is None:
                status = "no expectation"
            else:
                status = "ok" if m >= limits.bandwidth_ratio * e else "below"
            if table == "p2p_gbps":
                a, b = topo.gpu(key[0]).id, topo.gpu(key[1]).id
                row = {
                    "figure": f"p2p {a}->{b}",
                    "kind": "p2p",
                    "devices": [a, b],
                    "class": topo.link_class(a, b),
                }
            else:
                row = {
                    "figure": _figure_name(key),
                    "kind": "busbw",
                    "devices": [],
                    "collective": key[0],
                    "ranks": key[1],
                }
            rows.append(
                row
                | {
                    "measured_gbps": m,
                    "expected_gbps": e,
                    "ratio": ratio,
                    "sku_median_gbps": s,
                    "median_ratio": round(m / s, 3) if m is not None and s else None,
                    "status": status,
                }
            )
    critical = [f for f in findings if f.severity == "critical"]
    below = [r for r in rows if r["status"] == "below"]
    compared = [r for r in rows if r["status"] in ("ok", "below")]
    reasons = []
    if critical:
        reasons.append(f"{len(critical)} critical finding(s)")
    if below:
        reasons.append(f"{len(below)} figure(s) under {limits.bandwidth_ratio:.0%} of expectation")
    # Nothing measured is not a failure of the machine but of the evidence: acceptance waits
    # for a benchmark, and the report says which one.
    if reasons:
        verdict = "fail"
    elif not compared:
        verdict = "incomplete"
        reasons.append(
            "nothing measured yet: upload nccl-tests (and p2pBandwidthLatencyTest) output "
            "to judge the expected figures"
        )
    else:
        verdict = "pass"
    return {
        "verdict": verdict,
        "reasons": reasons,
        "basis": expectations.basis,
        "thresholds": limits.to_document(),
        "rows": rows,
        "not_measured": _not_measured_groups(rows),
        "findings": [f.to_document() for f in findings],
        "summary": {
            "critical": len(critical),
            "warning": sum(f.severity == "warning" for f in findings),
            "info": sum(f.severity == "info" for f in findings),
            "compared": len(compared),
            "below": len(below),
            "not_measured": sum(r["status"] == "not measured" for r in rows),
        },
    }
