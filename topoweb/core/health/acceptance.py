"""The acceptance report of one server: pass, fail or incomplete against its SKU's
expectations, with every figure compared and the findings that decided it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topoweb.core.health.expectations import PairExpectations, judge, pair_expectations
from topoweb.core.health.figures import (
    CollectiveKey,
    Expectations,
    Figures,
    figure_name,
    large_busbw,
    measured_figures,
    ranks_of,
)
from topoweb.core.health.findings import P2P_UNAVAILABLE, Finding
from topoweb.core.model import NcclRun, P2PResult, Topology

ONE_RANK_NOTE = (
    "one GPU: nccl-tests moves no data between GPUs (an in-place no-op), so this busbw is "
    "bytes over almost no time, not a bandwidth"
)


def _not_measured_groups(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Unmeasured figures folded by kind, link class and expectation: 56 NV12 pairs read better
    as one line than as 56."""
    groups: dict[tuple[str, str, float | None], list[str]] = {}
    for row in rows:
        if row["status"] == "not measured":
            key = (row["kind"], row.get("class") or row["figure"], row["expected_gbps"])
            name = "-".join(row["devices"]) if row["devices"] else row["figure"]
            groups.setdefault(key, []).append(name)
    return [
        {
            "kind": kind,
            "what": what,
            "count": len(names),
            "expected_gbps": expected,
            "pairs": names if kind == "p2p" else [],
        }
        for (kind, what, expected), names in groups.items()
    ]


def judged_pairs(
    topo: Topology,
    expectations: Expectations,
    findings: Sequence[Finding],
    measured: Figures,
    sku_medians: Figures | None = None,
) -> PairExpectations:
    """Each GPU pair's expectation as the findings judged it (one rule: pair_expectations),
    the pairs a p2p_unavailable finding names taken as host-staged copies: what the acceptance
    rows and the stored assessment's matrix show."""
    index = {g.id: g.index for g in topo.gpus}
    staged = {
        frozenset((index[p["a"]], index[p["b"]]))
        for f in findings
        if f.kind == P2P_UNAVAILABLE
        for p in f.evidence.get("pairs", ())
        if p.get("a") in index and p.get("b") in index
    }
    return pair_expectations(
        topo,
        expectations,
        {k: v for k, v in measured.p2p_gbps.items() if frozenset(k) not in staged},
        sku_medians,
        host_staged=staged,
    )


def acceptance_report(
    topo: Topology,
    expectations: Expectations,
    findings: Sequence[Finding],
    *,
    p2p: P2PResult | None = None,
    nccl_runs: Sequence[NcclRun] = (),
    sku_medians: Figures | None = None,
    pairs: PairExpectations | None = None,
) -> dict[str, Any]:
    """Pass/fail against the SKU's expectations: fails on any critical finding or any measured
    figure under threshold x expected; incomplete when nothing expected was measured at all."""
    limits = expectations.thresholds
    measured = measured_figures(p2p, nccl_runs, limits)
    # The message size each measured busbw figure was seen at (the best row past the plateau).
    sizes: dict[CollectiveKey, int] = {}
    for run in nccl_runs:
        best = large_busbw(run, limits)
        key = (run.collective or "", ranks_of(run))
        if best is not None and measured.busbw_gbps.get(key) == best[0]:
            sizes[key] = best[1]
    medians = sku_medians or Figures()
    if pairs is None:  # the caller's, when it judged them already (judged_pairs)
        pairs = judged_pairs(topo, expectations, findings, measured, sku_medians)
    rows = []
    for table in ("p2p_gbps", "busbw_gbps"):
        exp: Mapping[Any, float] = getattr(expectations.figures, table)
        got: Mapping[Any, float] = getattr(measured, table)
        med: Mapping[Any, float] = getattr(medians, table)
        for key in sorted(set(exp) | set(got)):
            e, m, s = exp.get(key), got.get(key), med.get(key)
            record = pairs.get(key) if table == "p2p_gbps" else None
            if table == "p2p_gbps":  # the pair's one expectation (none: not judged)
                e = None if record is None else round(record.value_gbps, 2)
            ratio = round(m / e, 3) if m is not None and e else None
            note = ""
            if m is None:
                status = "not measured"
            elif table == "busbw_gbps" and key[1] == 1:
                # One rank moves nothing: nccl-tests times an in-place no-op, so the figure it
                # prints divides bytes by almost no time. Shown with why, never judged.
                status = "not applicable"
                note = ONE_RANK_NOTE
            elif e is None:
                status = "no expectation"
            elif record is not None:
                status = "below" if judge(record, m, limits).severity else "ok"
            else:
                status = "ok" if m >= limits.bandwidth_ratio * e else "below"
            if table == "p2p_gbps":
                a, b = topo.gpu(key[0]).id, topo.gpu(key[1]).id
                row: dict[str, Any] = {
                    "figure": f"p2p {a}->{b}",
                    "kind": "p2p",
                    "devices": [a, b],
                    "class": topo.link_class(a, b),
                    "expectation": record.to_document() if record is not None else None,
                }
            else:
                row = {
                    "figure": figure_name(key),
                    "kind": "busbw",
                    "devices": [],
                    "collective": key[0],
                    "ranks": key[1],
                    "message_bytes": sizes.get(key),
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
                | ({"note": note} if note else {})
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
    collectives_expected = [r for r in rows if r["kind"] == "busbw" and r["expected_gbps"]]
    collectives_compared = [r for r in compared if r["kind"] == "busbw"]
    if reasons:
        verdict = "fail"
    elif not compared:
        verdict = "incomplete"
        reasons.append(
            "nothing measured yet: upload nccl-tests (and p2pBandwidthLatencyTest) output "
            "to judge the expected figures"
        )
    elif collectives_expected and not collectives_compared:
        # Copies between pairs say little about a collective over all GPUs: no pass on them.
        verdict = "incomplete"
        first = collectives_expected[0]
        reasons.append(
            "only GPU pairs were measured: upload nccl-tests output (e.g. "
            f"{first['collective']}_perf over {first['ranks']} GPUs up to messages of "
            f"{limits.large_message_bytes // 2**20} MiB or more) to judge the collective figures"
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
