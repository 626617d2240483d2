"""Everything a worker computes for one topology class, as a pure function of parsed inputs:
`analyse(topology, gpu_model, benchmarks) -> Analysis`. The web service stores its document;
the CLI prints it (`python -m topoweb.core.cli analyse FILE`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topoweb.core.costs import (
    COLLECTIVES,
    STANDARD_SIZES,
    Calibration,
    CostModel,
    build_model,
    calibrate_from_nccl,
    calibrate_from_p2p,
    calibrated,
    collective_cost,
    curve,
    p2p_matrix,
)
from topoweb.core.fingerprint import describe_links
from topoweb.core.health import Finding, check_health
from topoweb.core.ledger import PRESETS, Layout
from topoweb.core.model import NcclRun, P2PResult, Topology, link_class_rank
from topoweb.core.numbering import canonical_gpus, in_canonical_order
from topoweb.core.placement import (
    DEFAULT_SHAPE,
    Recommendation,
    affinity,
    best_group,
    recommend,
)
from topoweb.core.steptime import GpuSpec, gpu_spec

# Bump when `analyse` computes something new: every topology class then gets a fresh analysis
# from the sweep, and the old result stays readable until the new one is done.
# 3: step-time placement; 4: NCCL protocols, P2P/SHM, mesh rings, copies; 5: valid layouts
# and memory levers; 6: copies by GPU generation, staged copies, expectations with bands;
# 7: latency from evidence (small rows calibrate latency only, large rows bandwidth only),
# copy latency per generation (the stored calibrations are fitted again: fleet.services);
# 8: a smallest fit's memory per GPU with its levers; 9: TP divides the MLP's hidden units;
# 10: a pair whose P2P is unavailable judged against the model's staged copy of its class;
# 11: a staged copy on a link narrower than x16 runs at one host copy's rate;
# 12: a server's health expectations on the PCIe links NVML reports (core.costs.pcie_capability);
# 13: the socket link of the host's CPU (the collector's cpu_model, else the CPUs an NCCL topology
# XML names: core.catalogue.socket_link_of_cpu); a slow PCIe pair names the narrower link it fits
# where the width was assumed (core.health.benchmarks.narrower_link)
COST_MODEL_VERSION = 13

# Message sizes of the per-group cost tables (the full set gets a curve over STANDARD_SIZES).
TABLE_SIZES = (1 << 20, 64 << 20, 1 << 30)
# Wall-clock budget of all layout searches of one analysis together: a 72-GPU class has 60
# factorisations, and the worker's soft limit is 120 s.
LAYOUT_BUDGET_S = 12.0

# A benchmark to calibrate from: the topology it was measured on (its own GPU numbering), that
# server's GPU model, and the parsed run.
CalibrationInput = tuple[Topology, str, NcclRun | P2PResult]


@dataclass(frozen=True)
class Analysis:
    """The analysis of one topology class. Each field is already JSON-shaped, as stored and
    served; `findings` are the wiring's own (per-server findings live with each server)."""

    summary: dict[str, Any]
    warnings: tuple[str, ...]
    findings: tuple[Finding, ...]
    structure: dict[str, Any]
    hardware: dict[str, Any]
    costs: dict[str, Any]
    layouts: tuple[dict[str, Any], ...]
    affinity: dict[str, Any]
    p2p_prediction: dict[str, Any]
    calibration: dict[str, Any]
    # Present only when a benchmark calibrated the model.
    calibrated_costs: dict[str, Any] | None = None
    calibrated_p2p_prediction: dict[str, Any] | None = None
    # Per preset: the recommended layout by step time, or why none fits.
    recommendations: dict[str, Any] | None = None
    step_assumptions: str = ""
    # The analysed topology's GPU indices in canonical order: to_document() stores every GPU
    # index in that order, and each server of the class reads it back in its own numbering.
    gpu_order: tuple[int, ...] = ()

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "summary": self.summary,
            "warnings": list(self.warnings),
            "findings": [f.to_document() for f in self.findings],
            "structure": self.structure,
            "hardware": self.hardware,
            "costs": self.costs,
            "layouts": list(self.layouts),
            "affinity": self.affinity,
            "p2p_prediction": self.p2p_prediction,
            "calibration": self.calibration,
        }
        if self.calibrated_costs is not None:
            doc["calibrated_costs"] = self.calibrated_costs
            doc["calibrated_p2p_prediction"] = self.calibrated_p2p_prediction
        if self.recommendations is not None:
            doc["recommendations"] = self.recommendations
            doc["step_assumptions"] = self.step_assumptions
        return in_canonical_order(doc, self.gpu_order) if self.gpu_order else doc


@dataclass(frozen=True)
class Fitted:
    """Calibrations already fitted (the web service fits each run once, at ingest): merged,
    the notes on runs that could not calibrate, and which runs (by id) did."""

    calibration: Calibration | None
    notes: tuple[str, ...] = ()
    benchmark_ids: tuple[int, ...] = ()


def analyse(
    topology: Topology,
    gpu_model: str = "",
    benchmarks: Sequence[CalibrationInput] = (),
    *,
    fitted: Fitted | None = None,
    cpu_model: str = "",
) -> Analysis:
    """Everything stored as the analysis of one topology class. `gpu_model` is the NVML name
    the class's servers report (it picks the catalogue's link speeds), `cpu_model` their host
    CPU (the socket link); `benchmarks` are measured runs to fit a calibration from (the
    CLI), or `fitted` the calibration already fitted from the class's runs (the worker)."""
    model = build_model(topology, gpu_model or None, cpu_model=cpu_model or None)
    advised = advice(model, gpu_model)
    if fitted is None:
        calibration, notes = calibration_from(benchmarks, cpu_model)
        used: list[int] = []
    else:
        calibration, notes, used = (
            fitted.calibration,
            list(fitted.notes),
            list(fitted.benchmark_ids),
        )
    measured = calibrated(model, calibration) if calibration is not None else None
    return Analysis(
        summary=summary_of(model, gpu_model),
        warnings=tuple(topology.warnings),
        findings=check_health(topology),
        structure=model.hierarchy.to_document(),
        hardware=model.hardware.describe(),
        costs=cost_tables(model),
        layouts=tuple(advised["layouts"]),
        affinity=affinity(model).to_document(),
        p2p_prediction=p2p_matrix(model),
        calibration={
            "applied": calibration is not None,
            **(
                calibration.to_document()
                if calibration
                else {"scale": {}, "alpha_us": {}, "sources": []}
            ),
            "skipped": notes,
            "benchmarks": used,
        },
        calibrated_costs=cost_tables(measured) if measured is not None else None,
        calibrated_p2p_prediction=p2p_matrix(measured) if measured is not None else None,
        recommendations=advised["recommendations"],
        step_assumptions=advised["step_assumptions"],
        gpu_order=canonical_gpus(topology),
    )


def advice(model: CostModel, gpu_model: str) -> dict[str, Any]:
    """What an analysis advises on `model` for GPUs of `gpu_model` (the name picks their
    memory and rates): every layout of the default preset (`layouts`), each preset's
    recommendation (`recommendations`) and what the step time assumes (`step_assumptions`),
    in the model's own GPU numbering."""
    spec = gpu_spec(gpu_model or None, model.hardware.generation.name)
    default = recommend(model, DEFAULT_SHAPE, spec=spec, time_budget_s=_each_budget())
    return {
        "layouts": layout_advice(default),
        "recommendations": recommendations(model, spec),
        "step_assumptions": default.to_document()["assumptions"],
    }


def summary_of(model: CostModel, gpu_model: str) -> dict[str, Any]:
    """The few facts lists and comparisons show, from the topology and its recovered structure."""
    topology = model.topo
    gpu_pairs = Counter(link.link_class for link in topology.gpu_links())
    nearest_nic = {}
    for gpu in topology.gpus:
        classes = [topology.link_class(gpu.id, nic.id) for nic in topology.nics]
        nearest_nic[gpu.id] = min(classes, key=link_class_rank) if classes else None
    domains = [len(d.gpus) for d in model.hierarchy.nvlink_domains]
    return {
        "gpu_model": gpu_model,
        "gpu_count": len(topology.gpus),
        "nic_count": len(topology.nics),
        "gpu_pair_classes": dict(sorted(gpu_pairs.items(), key=lambda kv: link_class_rank(kv[0]))),
        # A GPU without NVLink is a domain of one.
        "largest_nvlink_domain": max(domains, default=min(1, len(topology.gpus))),
        "nearest_nic_class": nearest_nic,
        "description": describe_links(topology),
    }


def calibration_from(
    benchmarks: Sequence[CalibrationInput], cpu_model: str = ""
) -> tuple[Calibration | None, list[str]]:
    """Measured corrections from the runs, each fitted on the topology it ran on (a
    Calibration is per link class, so it carries over to every server of the class). Runs
    that cannot calibrate (one GPU, another node's GPUs, no table) are named in the notes."""
    found: Calibration | None = None
    notes: list[str] = []
    for topo, model_name, run in benchmarks:
        try:
            base = build_model(topo, model_name or None, cpu_model=cpu_model or None)
            if isinstance(run, NcclRun):
                cal = calibrate_from_nccl(base, run)
            else:
                cal = calibrate_from_p2p(base, run)
        except ValueError as exc:
            kind = "nccl-tests" if isinstance(run, NcclRun) else "p2pBandwidthLatencyTest"
            notes.append(f"{kind} run skipped: {exc}")
            continue
        found = cal if found is None else found.merged(cal)
    return found, notes


def factorisations(n: int) -> list[Layout]:
    """Every TP x PP x DP with product n, TP varying slowest."""
    return [
        Layout(tp, pp, n // (tp * pp))
        for tp in range(1, n + 1)
        if n % tp == 0
        for pp in range(1, n // tp + 1)
        if (n // tp) % pp == 0
    ]


def group_sizes(n: int) -> list[int]:
    """2, 4, 8, ... below n, then n itself."""
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n] if n >= 2 else []


def cost_tables(model: CostModel) -> dict[str, Any]:
    """Each collective on the best-connected group of each size: a curve over STANDARD_SIZES
    for all GPUs, TABLE_SIZES for the smaller groups. Columns, not rows, to keep it compact."""
    groups = {k: list(best_group(model, k)) for k in group_sizes(len(model.gpu_ids))}
    everyone = sorted(model.gpu_ids)
    curves: dict[str, Any] = {}
    table: dict[str, Any] = {}
    for collective in COLLECTIVES:
        if len(everyone) >= 2:
            points = curve(model, collective, everyone)
            curves[collective] = {
                "time_us": [round(c.time_us, 3) for c in points],
                "algbw_gbps": [round(c.algbw_gbps, 3) for c in points],
                "busbw_gbps": [round(c.busbw_gbps, 3) for c in points],
                "algorithm": [c.algorithm for c in points],
                "bottleneck": points[-1].bottleneck,
                "bottleneck_class": points[-1].bottleneck_class,
            }
        rows = []
        for k, gpus in groups.items():
            for nbytes in TABLE_SIZES:
                c = collective_cost(model, collective, gpus, nbytes)
                rows.append(
                    [
                        k,
                        nbytes,
                        round(c.time_us, 3),
                        round(c.busbw_gbps, 3),
                        c.algorithm,
                        c.bottleneck_class,
                    ]
                )
        table[collective] = rows
    return {
        "calibrated": bool(model.calibration.scale),
        "sizes": list(STANDARD_SIZES),
        "curve_gpus": everyone,
        "curves": curves,
        "groups": {str(k): g for k, g in groups.items()},
        "table_columns": [
            "group_size",
            "bytes",
            "time_us",
            "busbw_gbps",
            "algorithm",
            "bottleneck_class",
        ],
        "table": table,
    }


def _each_budget() -> float:
    return LAYOUT_BUDGET_S / (len(PRESETS) + 1)


def layout_advice(default: Recommendation) -> list[dict[str, Any]]:
    """Every layout of the default preset, fitting ones first, by predicted step time."""
    out = []
    for placement in default.placements:
        doc = placement.to_document()
        doc.pop("assumption")  # stored once, with the hardware
        out.append(doc)
    return out


def recommendations(model: CostModel, spec: GpuSpec) -> dict[str, Any]:
    """Per preset: the recommended layout (or why none fits), without the full ranking."""
    out = {}
    for key, shape in PRESETS.items():
        doc = recommend(model, shape, spec=spec, time_budget_s=_each_budget()).to_document()
        doc.pop("layouts")
        out[key] = doc
    return out
