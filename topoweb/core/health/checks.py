"""check_health: every finding the inputs support for one server, most severe first. The
wiring checks (NIC placement, matrix consistency, drift from the previous snapshot or the SKU)
and the NVML checks (PCIe training, NVLink state and version, P2P status) live here; the
benchmark checks in health.benchmarks."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from topoweb.core.formats.nvml import NvLink, NvmlFacts, NvmlFactsError, read_nvml
from topoweb.core.health.benchmarks import nccl_findings, p2p_findings, p2p_unavailable
from topoweb.core.health.diff import TopologyDiff, diff_topologies, farther
from topoweb.core.health.expectations import Network
from topoweb.core.health.figures import Expectations, Figures, Thresholds
from topoweb.core.health.findings import (
    DEGRADED_NVLINK,
    DOWNTRAINED_PCIE,
    INCONSISTENT_MATRIX,
    KINDS,
    NIC_FAR_FROM_GPU,
    P2P_UNAVAILABLE,
    SEVERITY_ORDER,
    SOURCES_DISAGREE,
    TOPOLOGY_DRIFT,
    Finding,
    HealthInputError,
    ordered_ids,
)
from topoweb.core.hierarchy import recover_hierarchy
from topoweb.core.model import NcclRun, P2PResult, Topology, link_class_rank, nvlink_count


def check_health(
    topo: Topology,
    *,
    previous: Topology | None = None,
    sku_reference: Topology | None = None,
    fingerprint: str | None = None,
    sku_fingerprint: str | None = None,
    nvml: NvmlFacts | Mapping[str, Any] | None = None,
    p2p: P2PResult | None = None,
    nccl_runs: Sequence[NcclRun] = (),
    expectations: Expectations | None = None,
    sku_medians: Figures | None = None,
    thresholds: Thresholds | None = None,
    network: Network | None = None,
) -> tuple[Finding, ...]:
    """Every finding the inputs support, most severe first. Absent inputs check nothing:
    no NVML facts, no PCIe finding; no expectations or SKU medians, no bandwidth finding.
    `thresholds` defaults to the expectations' own, then to Thresholds()."""
    limits = thresholds or (expectations.thresholds if expectations else Thresholds())
    if nvml is not None and not isinstance(nvml, NvmlFacts):
        try:
            nvml = read_nvml(nvml)
        except NvmlFactsError as exc:
            raise HealthInputError(str(exc)) from exc
    findings: list[Finding] = []
    findings += _nic_far_from_gpu(topo)
    findings += _inconsistent_matrix(topo)
    findings += _sources_disagree(topo)
    if previous is not None:
        findings += _drift_from_previous(topo, previous)
    findings += _against_sku(topo, sku_reference, fingerprint, sku_fingerprint)
    if nvml is not None:
        findings += _nvml_findings(topo, nvml)
    if p2p is not None:
        findings += p2p_findings(topo, p2p, expectations, sku_medians, limits)
    if nvml is not None:
        covered = {
            frozenset((p["a"], p["b"]))
            for f in findings
            if f.kind == P2P_UNAVAILABLE
            for p in f.evidence["pairs"]
        }
        findings += _nvml_p2p_findings(topo, nvml, covered)
    findings += nccl_findings(topo, nccl_runs, expectations, sku_medians, limits, network)
    kind_order = {k: i for i, k in enumerate(KINDS)}
    names = _nic_names(topo, previous, sku_reference)
    named = [_with_nic_names(f, names) for f in findings] if names else findings
    return tuple(sorted(named, key=lambda f: (SEVERITY_ORDER[f.severity], kind_order[f.kind])))


_NIC_ID = re.compile(r"\bNIC\d+\b")


def _nic_names(*topologies: Topology | None) -> dict[str, str]:
    """Matrix ids of NICs (`NIC3`) -> the RDMA names the legend gave (`mlx5_3`): the one name
    the graph, the matrix and the hints use. The current topology's names win."""
    names: dict[str, str] = {}
    for topo in reversed([t for t in topologies if t is not None]):
        names |= {d.id: d.nic_name for d in topo.nics if d.nic_name and d.nic_name != d.id}
    return names


def _with_nic_names(finding: Finding, names: Mapping[str, str]) -> Finding:
    return dataclasses.replace(
        finding,
        devices=tuple(names.get(d, d) for d in finding.devices),
        message=_NIC_ID.sub(lambda m: names.get(m.group(0), m.group(0)), finding.message),
    )


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


def _sources_disagree(topo: Topology) -> list[Finding]:
    """Where `topo -m` and the NCCL topology XML of the same capture describe it differently
    (core.merge lists them): one of the two is stale or the VM hides part of the machine."""
    found = topo.details.get("contradictions") if isinstance(topo.details, dict) else None
    if not found:
        return []
    known = {d.id for d in topo.devices}
    devices = [d for c in found for d in c.get("devices", ()) if d in known]
    return [
        Finding(
            kind=SOURCES_DISAGREE,
            severity="warning",
            devices=ordered_ids(topo, devices),
            evidence={"contradictions": list(found)},
            advice=(
                "Capture both again at the same time (collector --nccl-topo-xml); if they still "
                "differ, NCCL plans with the XML's view: fix or regenerate the NCCL_TOPO_FILE."
            ),
            message=f"topo -m and the NCCL topology XML disagree in {len(found)} place(s): "
            + "; ".join(str(c.get("message")) for c in found[:3])
            + ("; ..." if len(found) > 3 else ""),
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
    devices = ordered_ids(topo, [d for f in contradictions for d in f.devices])
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
    worse = bool(diff.gone) or any(farther(o, n) for _, _, o, n in diff.changed)
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
            devices=diff.gone + ordered_ids(topo, [*diff.added, *changed_devices]),
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
                devices=rest.gone + ordered_ids(topo, [*rest.added, *changed_devices]),
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
        for g in ordered_ids(topo, reduced_peers)
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


def _nvml_findings(topo: Topology, nvml: NvmlFacts) -> list[Finding]:
    findings = []
    parsed: list[tuple[str, tuple[NvLink, ...]]] = []
    for g in nvml.gpus:
        try:
            gpu_id = topo.gpu(g.index).id if g.index is not None else None
        except KeyError:
            gpu_id = None  # a GPU NVML sees that the matrix does not; drift covers that
        if gpu_id is None:
            continue
        pcie = g.pcie
        if pcie.slower_generation or pcie.narrower:
            cg, mg, cw, mw = (
                pcie.current_generation,
                pcie.max_generation,
                pcie.current_width,
                pcie.max_width,
            )
            findings.append(
                Finding(
                    kind=DOWNTRAINED_PCIE,
                    # A narrower link is never power saving; a lower generation can be idle.
                    severity="critical" if pcie.narrower else "warning",
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
        parsed.append((gpu_id, g.nvlinks))
    versions = [x.version for _, links in parsed for x in links if x.up and x.version is not None]
    top_version = max(versions, default=None)
    for gpu_id, links in parsed:
        has_nvlink = any(x.up for x in links) or any(
            nvlink_count(topo.link_class(gpu_id, other.id))
            for other in topo.gpus
            if other.id != gpu_id
        )
        # A PCIe card with NVLink ports but no bridge shows every link down: not a fault.
        if not has_nvlink:
            continue
        down = [x.link for x in links if x.up is False]
        old = [
            {"link": x.link, "version": x.version}
            for x in links
            if x.up
            and x.version is not None
            and top_version is not None
            and x.version < top_version
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
    topo: Topology, nvml: NvmlFacts, covered: set[frozenset[str]]
) -> list[Finding]:
    """NVML's P2P status (what `nvidia-smi topo -p2p` prints) for pairs that should have P2P."""
    pairs: dict[frozenset[str], dict[str, Any]] = {}
    for entry in nvml.p2p or ():
        i, j = entry.src, entry.dst
        try:
            a, b = topo.gpu(i if i is not None else -1).id, topo.gpu(j if j is not None else -1).id
        except KeyError:
            continue  # a GPU the matrix does not show
        bad = entry.refused()
        cls = topo.link_class(a, b)
        key = frozenset((a, b))
        if not bad or cls in ("NODE", "SYS") or key in covered or key in pairs:
            continue
        first, second = ordered_ids(topo, (a, b))
        pairs[key] = {"a": first, "b": second, "class": cls, "nvml_status": bad}
    if not pairs:
        return []
    return [p2p_unavailable(topo, list(pairs.values()), "NVML reports P2P as not supported")]
