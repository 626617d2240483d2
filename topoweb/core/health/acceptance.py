"""The acceptance report of one server: pass, fail or incomplete against its SKU's
expectations, with every figure compared and the findings that decided it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topoweb.core.health.figures import Expectations, Figures, figure_name, measured_figures
from topoweb.core.health.findings import Finding
from topoweb.core.model import NcclRun, P2PResult, Topology


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
                    "figure": figure_name(key),
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
