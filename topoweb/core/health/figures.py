"""Bandwidth figures a server is expected to reach and those its benchmarks show: from staff's
per-class figures or the cost model, measured P2P and nccl-tests busbw, SKU medians and the
spread of a SKU with its outliers."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.catalogue import BUSBW_MODEL_BAND
from topoweb.core.costs import (
    COLLECTIVES,
    build_model,
    collective_cost,
    copy_band,
    p2p_unidirectional,
)
from topoweb.core.health.findings import HealthInputError
from topoweb.core.model import NcclRun, P2PResult, Topology

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
    # The cost model's relative band per figure it gave (a figure without one is staff's).
    p2p_bands: Mapping[PairKey, float] = field(default_factory=dict, hash=False)
    busbw_bands: Mapping[CollectiveKey, float] = field(default_factory=dict, hash=False)
    # The cost model's one-way copy staged through host memory (P2P refused) per GPU link
    # class, with its band: what a pair whose P2P is unavailable is judged against (like with
    # like: its P2P=Enabled cells time staged copies too).
    staged_gbps_by_class: Mapping[str, float] = field(default_factory=dict, hash=False)
    staged_bands_by_class: Mapping[str, float] = field(default_factory=dict, hash=False)
    # The PCIe generation and width the cost model assumed for the GPUs' links (nothing
    # reported them); None where NVML did, or where no model figure stands.
    assumed_pcie: tuple[int, int] | None = None

    def to_document(self) -> dict[str, Any]:
        return {
            "figures": self.figures.to_document(),
            "thresholds": self.thresholds.to_document(),
            "basis": self.basis,
            "p2p_bands": [
                {"src": s, "dst": d, "band": round(v, 3)}
                for (s, d), v in sorted(self.p2p_bands.items())
            ],
            "busbw_bands": [
                {"collective": c, "ranks": n, "band": round(v, 3)}
                for (c, n), v in sorted(self.busbw_bands.items())
            ],
            "staged_gbps_by_class": [
                {"class": c, "gbps": v, "band": round(self.staged_bands_by_class.get(c, 0.0), 3)}
                for c, v in sorted(self.staged_gbps_by_class.items())
            ],
            "assumed_pcie": list(self.assumed_pcie) if self.assumed_pcie else None,
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
    topo: Topology,
    gpu_model: str | None = None,
    thresholds: Thresholds = Thresholds(),
    *,
    pcie: tuple[int, int] | None = None,
    cpu_model: str | None = None,
) -> Expectations:
    """What the cost model predicts for this wiring and GPU generation (uncalibrated): P2P copy
    bandwidth per ordered GPU pair and large-message busbw of each collective over all GPUs.
    `pcie`: the links' generation and width as NVML reports them (core.costs.pcie_capability),
    else the generation's usual ones, assumed and said so; `cpu_model`: the host's CPU as the
    collector reads it, whose socket link carries (or, Intel's, refuses) cross-socket P2P."""
    gen, width = pcie if pcie else (None, 16)
    model = build_model(topo, gpu_model, pcie_gen=gen, pcie_width=width, cpu_model=cpu_model)
    uni = p2p_unidirectional(model)
    order = sorted(g.index for g in topo.gpus)
    pairs = {
        (a, b): float(value)
        for i, a in enumerate(order)
        for j, b in enumerate(order)
        if (value := uni[i][j]) is not None
    }
    bands = {key: copy_band(model, *key) for key in pairs}
    staged, staged_bands = _staged_by_class(topo, gpu_model, gen, width, cpu_model)
    busbw: dict[CollectiveKey, float] = {}
    if len(order) >= 2:
        for name in COLLECTIVES:
            if name == "sendrecv" and len(order) != 2:
                continue  # nccl-tests' sendrecv over more GPUs is a ring of pairs, not modelled
            cost = collective_cost(model, name, order, _MODEL_MESSAGE_BYTES)
            busbw[(name, len(order))] = round(cost.busbw_gbps, 2)
    # What the generation rests on and what else was assumed (the PCIe generation, which
    # topo -m never names): the report's basis says both.
    assumption = model.hardware.assumption
    if pcie:
        assumption += f"; PCIe Gen{pcie[0]} x{pcie[1]} as NVML reports the GPUs' links"
    if not model.hardware.socket_assumed:
        assumption += f"; {model.hardware.socket_link} from {model.hardware.socket_source}"
    return Expectations(
        Figures(pairs, busbw),
        thresholds,
        basis=f"cost model, uncalibrated ({assumption})",
        p2p_bands=bands,
        busbw_bands=dict.fromkeys(busbw, BUSBW_MODEL_BAND),
        staged_gbps_by_class=staged,
        staged_bands_by_class=staged_bands,
        assumed_pcie=None if pcie else (model.hardware.pcie_gen, model.hardware.pcie_width),
    )


def _staged_by_class(
    topo: Topology,
    gpu_model: str | None,
    pcie_gen: int | None,
    pcie_width: int,
    cpu_model: str | None,
) -> tuple[dict[str, float], dict[str, float]]:
    """One-way copies staged through host memory, as the driver makes them where P2P is
    refused: the cost model's figure and band for the first ordered pair of each GPU link class
    (a staged copy's route is its two GPUs' links up to the host and down, whatever their
    class, so one pair speaks for its class)."""
    model = build_model(
        topo, gpu_model, p2p="off", pcie_gen=pcie_gen, pcie_width=pcie_width, cpu_model=cpu_model
    )
    gbps: dict[str, float] = {}
    bands: dict[str, float] = {}
    for a in topo.gpus:
        for b in topo.gpus:
            cls = topo.link_class(a.id, b.id) if a.id != b.id else None
            if cls is None or cls in gbps:
                continue
            rate = model.solo_rate(model.copy_load([((a.index, b.index), 1.0)]), copy=True)
            gbps[cls] = round(rate.gbps, 3)
            bands[cls] = copy_band(model, a.index, b.index)
    return gbps, bands


def p2p_cells(p2p: P2PResult) -> dict[PairKey, tuple[float, str]]:
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


def ranks_of(run: NcclRun) -> int:
    """How many ranks the run used, from its rank lines or its -g x -t arguments."""
    return len(run.ranks) or (run.n_gpus or 0) * (run.n_threads or 1)


def large_busbw(run: NcclRun, thresholds: Thresholds) -> tuple[float, int] | None:
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
    pairs = {k: v for k, (v, _) in p2p_cells(p2p).items()} if p2p else {}
    busbw: dict[CollectiveKey, float] = {}
    for run in nccl_runs:
        best = large_busbw(run, thresholds)
        if run.collective and best is not None:
            key = (run.collective, ranks_of(run))
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


def figure_name(key: PairKey | CollectiveKey) -> str:
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
                "figure": figure_name(key),
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
