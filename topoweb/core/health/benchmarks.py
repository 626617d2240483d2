"""Findings from measured runs: P2P unavailable or no better than staged copies, bandwidth
below expectation or below the SKU median, failed nccl-tests runs."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from topoweb.core.health.expectations import (
    FAR_BELOW_BAND,
    FAR_BELOW_EVIDENCE,
    Network,
    PairExpectation,
    judge,
    network_expectation,
    pair_expectations,
    run_hosts,
)
from topoweb.core.health.figures import (
    Expectations,
    Figures,
    Thresholds,
    large_busbw,
    p2p_cells,
    ranks_of,
)
from topoweb.core.health.findings import (
    BELOW_EXPECTED_BANDWIDTH,
    FAILED_BENCHMARK,
    NETWORK_BELOW_EXPECTED,
    P2P_UNAVAILABLE,
    Finding,
    HealthInputError,
    Severity,
    ordered_ids,
)
from topoweb.core.model import NcclRun, P2PResult, Topology, nvlink_count


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


def narrower_link(
    expectation: PairExpectation, measured: float, assumed_pcie: tuple[int, int] | None
) -> int | None:
    """The PCIe width whose share of the model's figure a pair measured (within 25 %), where
    that figure stands on a width nothing reported (topo -m names none; NVML facts would):
    GPUs on x1 risers, in x8 slots or on links trained down measure what that width carries,
    1/16 or 1/2 of an x16 figure. Only for pairs under PCIe switches (PIX, PXB), whose copy
    nothing but the links bounds: across a host bridge or the sockets the driver may stage it
    through host memory, which a narrow link's share would wrongly explain. None for measured
    evidence and staff's figures."""
    if (
        assumed_pcie is None
        or expectation.source != "model"
        or expectation.link_class not in ("PIX", "PXB")
    ):
        return None
    width = assumed_pcie[1]
    for narrower in (1, 2, 4, 8):
        carried = expectation.value_gbps * narrower / width
        if narrower < width and 0.75 * carried <= measured <= 1.25 * carried:
            return narrower
    return None


_BELOW_ADVICE = (
    "Check the link under load: NVLink errors (nvidia-smi nvlink -e), PCIe link state "
    "(lspci -vv LnkSta), BIOS settings (ACS, IOMMU, power profile) and GPU clocks; compare "
    "with a sibling of the same SKU."
)


def p2p_findings(
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
        findings.append(p2p_unavailable(topo, no_access, "the P2P access matrix says no"))

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
            p2p_unavailable(topo, no_gain, "P2P=Enabled bandwidth is no better than P2P=Disabled")
        )

    cells = p2p_cells(p2p)
    assumed_pcie = expectations.assumed_pcie if expectations else None
    measured = {k: v for k, (v, _) in cells.items() if frozenset(k) not in unavailable}
    expected = pair_expectations(topo, expectations, measured, medians, host_staged=unavailable)
    median = medians.p2p_gbps if medians else {}
    low: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in sorted(cells.items()):
        e = expected.get(key)
        if e is None:
            continue
        host_staged = frozenset(key) in unavailable
        verdict = judge(e, value[0], thresholds)
        if verdict.severity is None:
            continue
        m = median.get(key)
        fits = None if host_staged else narrower_link(e, value[0], assumed_pcie)
        low[key] = {
            "measured_gbps": round(value[0], 2),
            "expected_gbps": round(e.value_gbps, 2),
            "ratio": round(verdict.ratio, 3),
            "severity": verdict.severity,
            "against": verdict.against,
            "expectation": e.to_document(),
            "sku_median_gbps": m,
            "median_ratio": round(value[0] / m, 3) if m else None,
            "host_staged": host_staged,
            "matrix": value[1],
            "fits_pcie_width": fits,
        }
    by_pair: dict[frozenset[int], dict[str, Any]] = {}
    for (i, j), ev in sorted(low.items()):
        by_pair.setdefault(frozenset((i, j)), {})[f"{ids[i]}->{ids[j]}"] = ev
    for pair, directions in by_pair.items():
        i, j = sorted(pair)
        critical = any(ev["severity"] == "critical" for ev in directions.values())
        worst = min(directions.values(), key=lambda ev: ev["ratio"])
        cls = topo.link_class(ids[i], ids[j])
        evidence: dict[str, Any] = {
            "benchmark": "p2pBandwidthLatencyTest",
            "class": cls,
            "directions": directions,
        }
        message = (
            f"{ids[i]}-{ids[j]} ({cls}) measured {worst['measured_gbps']:.1f} GB/s per "
            f"direction, {worst['against']}"
        )
        widths = {ev["fits_pcie_width"] for ev in directions.values()}
        if assumed_pcie is not None and len(widths) == 1 and None not in widths:
            evidence["fits_pcie"] = [assumed_pcie[0], widths.pop(), assumed_pcie[1]]
            message += "; that is " + narrower_link_words(*evidence["fits_pcie"])
        findings.append(
            Finding(
                kind=BELOW_EXPECTED_BANDWIDTH,
                severity="critical" if critical else "warning",
                devices=(ids[i], ids[j]),
                evidence=evidence,
                advice=_BELOW_ADVICE,
                message=message,
            )
        )
    return findings


def narrower_link_words(gen: int, width: int, assumed: int) -> str:
    """What a measurement that fits a narrower link than the one assumed says (a finding's
    message, its group's title)."""
    return (
        f"what a PCIe Gen{gen} x{width} link carries (x{assumed} was assumed: a riser, an "
        f"x{width} slot or a link trained down? NVML facts name the width)"
    )


def p2p_unavailable(topo: Topology, pairs: list[dict[str, Any]], why: str) -> Finding:
    devices = ordered_ids(topo, [x for p in pairs for x in (p["a"], p["b"])])
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


def _busbw_severity(
    ev: Mapping[str, Any], expectations: Expectations | None, key: tuple[str, int]
) -> Severity:
    """Critical only far below the evidence: under FAR_BELOW_EVIDENCE of the SKU median, or
    under FAR_BELOW_BAND of the low edge of the model's band (staff's figures: of the figure)."""
    median_ratio = ev.get("median_ratio")
    if ev["below_sku_median"] and median_ratio is not None and median_ratio < FAR_BELOW_EVIDENCE:
        return "critical"
    if not ev["below_expected"]:
        return "warning"
    band = expectations.busbw_bands.get(key) if expectations else None
    low = ev["expected_gbps"] * (1 - (band or 0.0))
    return "critical" if ev["measured_gbps"] < FAR_BELOW_BAND * low else "warning"


def _network_findings(
    topo: Topology,
    run: NcclRun,
    best: tuple[float, int],
    devices: tuple[str, ...],
    network: Network | None,
) -> list[Finding]:
    """A run over several hosts against the busbw its nodes' NICs should carry: inside the
    model's band nothing; below it a warning; far below it (FAR_BELOW_BAND) critical."""
    expected = network_expectation(topo, run, best[1], network)
    if expected is None or best[0] >= expected.low_gbps:
        return []
    ratio = best[0] / expected.value_gbps
    far = best[0] < FAR_BELOW_BAND * expected.low_gbps
    return [
        Finding(
            kind=NETWORK_BELOW_EXPECTED,
            severity="critical" if far else "warning",
            devices=devices,
            evidence={
                "benchmark": "nccl-tests",
                "collective": run.collective,
                "measured_gbps": round(best[0], 2),
                "ratio": round(ratio, 3),
                "hosts": run_hosts(run),
                "expectation": expected.to_document(),
            },
            advice=(
                "Check the network under load: link state and speed of every RDMA port "
                "(ibstat, ethtool), NCCL_IB_HCA / NCCL_SOCKET_IFNAME (NCCL falling back to TCP "
                "shows as NET/Socket in NCCL_DEBUG=INFO), GPUDirect RDMA (nvidia-peermem), PCIe "
                "placement of NICs beside their GPUs, and the switch ports' counters."
            ),
            message=f"{run.collective} over {expected.nodes} nodes ({expected.ranks} ranks) "
            f"reached {best[0]:.1f} GB/s busbw, {ratio:.0%} of the {expected.value_gbps:.1f} "
            f"GB/s its network should carry ({expected.nics_per_node:g} NIC(s) per node at "
            f"{expected.nic_gbits:g} Gb/s)",
        )
    ]


def nccl_findings(
    topo: Topology,
    runs: Sequence[NcclRun],
    expectations: Expectations | None,
    medians: Figures | None,
    thresholds: Thresholds,
    network: Network | None = None,
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
        best = large_busbw(run, thresholds)
        if run.collective is None or best is None:
            continue
        if len(run_hosts(run)) > 1:
            findings += _network_findings(topo, run, best, devices, network)
            continue
        key = (run.collective, ranks_of(run))
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
                severity=_busbw_severity(ev, expectations, key),
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
