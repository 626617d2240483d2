"""A server's assessment document: everything its page and exports show that takes work to
compute (each GPU pair's one expectation, findings, graph, matrix, device details, affinity,
the class analysis in the server's own numbering, the busbw curves), composed by the health
worker (services.evaluate_server) and stored as JSON text on ServerHealth.document. Requests
only read it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from topoweb.analysis import selectors as analysis_selectors
from topoweb.analysis.models import Analysis
from topoweb.core.analysis import COST_MODEL_VERSION
from topoweb.core.export import device_details, matrix_document
from topoweb.core.health import Expectations, Finding, PairExpectation, PairExpectations
from topoweb.core.health.groups import group_findings
from topoweb.core.model import Topology
from topoweb.fleet.models import Benchmark, Server
from topoweb.fleet.selectors import models_note

BEST_LAYOUTS = 5

# The keys of the stored document, in the order the page's answer gives them.
ASSESSMENT_KEYS = (
    "analysis",
    "expectations",
    "findings",
    "groups",
    "reader_warnings",
    "graph",
    "matrix",
    "devices",
    "affinity",
    "plot",
    "best_layouts",
    "recommendations",
    "step_assumptions",
    "left_out",
)

# An acceptance report lists at most this many rows whole (a 576-GPU server has 331,200 pair
# rows); past it the rows not measured are only counted in `not_measured`, and each of its
# groups names at most PAIRS_NAMED pairs.
ACCEPTANCE_ROWS = 2000
PAIRS_NAMED = 64

AFFINITY_WAITS = "waits for the class analysis of this wiring (queued or running)"


def bounded_acceptance(report: dict[str, Any]) -> dict[str, Any]:
    """The acceptance report as stored and served: whole up to ACCEPTANCE_ROWS rows; past it
    the collective rows and the pairs compared (below expectation first) up to that many, the
    rest counted under `rows_left_out` with a note, and long lists of unmeasured pairs cut to
    PAIRS_NAMED."""
    rows = report["rows"]
    if len(rows) > ACCEPTANCE_ROWS:
        order = {"below": 0, "no expectation": 1, "ok": 2}
        # Every collective row (a handful), and the pairs that were measured.
        compared = sorted(
            (r for r in rows if r["status"] != "not measured" or r["kind"] == "busbw"),
            key=lambda r: (r["kind"] != "busbw", order.get(r["status"], 3)),
        )
        kept = compared[:ACCEPTANCE_ROWS]
        report["rows"] = kept
        report["rows_left_out"] = {
            "count": len(rows) - len(kept),
            "note": f"{len(rows) - len(kept):,} of {len(rows):,} rows not listed: unmeasured "
            "figures are counted by link class under not_measured"
            + ("" if len(compared) <= ACCEPTANCE_ROWS else ", compared ones past the first ")
            + ("" if len(compared) <= ACCEPTANCE_ROWS else f"{ACCEPTANCE_ROWS:,} (below first)"),
        }
    for group in report["not_measured"]:
        if len(group["pairs"]) > PAIRS_NAMED:
            group["pairs_left_out"] = len(group["pairs"]) - PAIRS_NAMED
            group["pairs"] = group["pairs"][:PAIRS_NAMED]
    return report


def newest_p2p(server: Server) -> dict[str, Any] | None:
    found = (
        Benchmark.objects.filter(server=server, kind=Benchmark.Kind.P2P)
        .only("document")
        .order_by("-captured_at", "-id")
        .first()
    )
    return found.document if found is not None else None


def pair_table(
    topology: Topology, pairs: PairExpectations, expectations: Expectations
) -> dict[str, Any]:
    """Each ordered GPU pair's one expectation (core.health.pair_expectations' record, less
    its pair): the distinct records once, and a grid by GPU (rows and columns in `gpus` order)
    of each pair's record number (None where nothing is expected). A 576-GPU server has 331,200
    pairs and a handful of distinct records."""
    gpus = [g.index for g in topology.gpus]
    records: dict[tuple[Any, ...], int] = {}
    documents: list[dict[str, Any]] = []

    def number(e: PairExpectation) -> int:
        # What a record says, less its pair (src, dst are the grid's row and column).
        key = (e.link_class, e.value_gbps, e.source, e.band, e.evidence, e.model_gbps)
        found = records.get(key)
        if found is None:
            found = records[key] = len(documents)
            doc = e.to_document()
            del doc["src"], doc["dst"]
            documents.append(doc)
        return found

    grid = [[None if (e := pairs.get((a, b))) is None else number(e) for b in gpus] for a in gpus]
    return {
        "basis": expectations.basis,
        "thresholds": expectations.thresholds.to_document(),
        "gpus": gpus,
        "records": documents,
        "grid": grid,
        "busbw_gbps": expectations.figures.to_document()["busbw_gbps"],
    }


def _plot(server: Server, costs_doc: dict[str, Any]) -> dict[str, Any]:
    """The busbw curves: the model's all_reduce over all GPUs (and calibrated), and every
    measured nccl-tests sweep, each as points (bytes, GB/s)."""
    doc = costs_doc
    series = []

    def modelled(costs: dict[str, Any] | None, label: str) -> None:
        curve = ((costs or {}).get("curves") or {}).get("all_reduce")
        if curve:
            points = [list(p) for p in zip(costs["sizes"], curve["busbw_gbps"], strict=True)]  # type: ignore[index]
            series.append({"label": label, "kind": "modelled", "dashed": True, "points": points})

    gpus = len(((doc.get("costs") or {}).get("curve_gpus")) or [])
    modelled(doc.get("costs"), f"modelled all_reduce, {gpus} GPUs")
    modelled(doc.get("calibrated_costs"), "modelled all_reduce, calibrated on measurements")
    for m in doc["measured"]:
        series.append(
            {
                "label": f"measured {m['collective']}, {m['gpu_count']} GPUs "
                f"(run {m['benchmark_id']})",
                "kind": "measured",
                "dashed": False,
                "points": [list(p) for p in zip(m["bytes"], m["busbw_gbps"], strict=True)],
            }
        )
    if not series:
        status = doc["analysis_status"]
        why = "" if status == "done" else f" (analysis {status or 'not run'})"
        note = (
            f"No modelled curve yet{why}; upload nccl-tests output to see measured bus bandwidth."
        )
    elif not doc["measured"]:
        note = "Modelled only: upload nccl-tests output to compare with a measurement."
    else:
        note = ""
    return {"series": series, "note": note}


def step_us(doc: dict[str, Any]) -> float:
    value: float = doc.get("predicted_step_time_us", doc.get("predicted_step_comm_us", 0.0))
    return value


def best_layouts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored layouts that fit in memory first, each group fastest first."""
    layouts = sorted(
        result.get("layouts") or [], key=lambda d: (d.get("fits") is False, step_us(d))
    )
    return layouts[:BEST_LAYOUTS]


def _advice(
    server: Server, layouts: list[dict[str, Any]], recommendations: dict[str, Any]
) -> dict[str, Any]:
    """The class analysis's advice for this server: where its GPUs differ, each answer's
    `assumed` list first says which one model it priced (the class prices that one)."""
    note = models_note(server.latest_snapshot)
    if not note:
        return {"best_layouts": layouts, "recommendations": recommendations}

    def said(doc: dict[str, Any]) -> dict[str, Any]:
        return {**doc, "assumed": [note, *doc.get("assumed", ())]}

    return {
        "best_layouts": [said(d) for d in layouts],
        "recommendations": {
            key: {**said(rec), "recommended": rec.get("recommended") and said(rec["recommended"])}
            for key, rec in recommendations.items()
        },
    }


def _analysis_part(analysis: Analysis | None, result: dict[str, Any]) -> dict[str, Any] | None:
    if analysis is None:
        return None
    done = analysis.finished_at
    finished = done.isoformat().replace("+00:00", "Z") if done is not None else None
    return {
        "status": analysis.status,
        "error": analysis.error,
        "finished_at": finished,
        "cost_model_version": analysis.cost_model_version,
        "current": analysis.cost_model_version == COST_MODEL_VERSION,
        # Which measured runs calibrated the class's curves and predictions.
        "calibrated_by": (result.get("calibration") or {}).get("benchmarks", []),
    }


def assessment_document(
    server: Server,
    topology: Topology,
    expectations: Expectations,
    pairs: PairExpectations,
    findings: Sequence[Finding],
    graph: dict[str, Any],
) -> dict[str, Any]:
    """The stored document of ASSESSMENT_KEYS, from what is stored now (worker side)."""
    analysis = analysis_selectors.current_analysis(server.topology_class_id)
    result: dict[str, Any] = {}
    if analysis is not None and analysis.result:
        result = analysis_selectors.analysis_result_for(server, analysis.result) or {}
    # The class analysis advises for the GPU and CPU models it priced; a server of other ones
    # (an H200 board wired as the class's H100s) gets its layouts priced for its own.
    advised = result
    if result and not analysis_selectors.prices_own_models(server):
        advised = analysis_selectors.own_advice(server)
    left_out: dict[str, str] = {}
    affinity = None
    if result.get("affinity"):
        affinity = {"hostname": server.hostname, **result["affinity"]}
    else:
        left_out["affinity"] = AFFINITY_WAITS
    costs = analysis_selectors.stored_costs(server)
    # Rounded as the findings and acceptance rows give them: one number per pair.
    expected = {k: round(pairs[k].value_gbps, 2) for k in pairs}
    matrix = matrix_document(topology, newest_p2p(server), expected)
    return {
        "analysis": _analysis_part(analysis, result),
        "expectations": pair_table(topology, pairs, expectations),
        "findings": [f.to_document() for f in findings],
        "groups": [g.to_document() for g in group_findings(findings)],
        "reader_warnings": list(topology.warnings),
        "graph": graph,
        "matrix": matrix,
        "devices": device_details(topology, affinity),
        "affinity": affinity,
        "plot": _plot(server, costs),
        **_advice(server, best_layouts(advised), advised.get("recommendations") or {}),
        "step_assumptions": advised.get("step_assumptions") or "",
        "left_out": left_out,
    }
