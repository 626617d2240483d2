"""The cost model's error against every paired measurement in tests/fixtures: each peer-copy
matrix (P2P on and off, one way and both ways, latency) and each nccl-tests row (every size),
priced by the model built from the same machine's (or SKU's) topology. Prints the median and
largest relative error per slice (NVSwitch, NVLink mesh, PCIe P2P, staged, SHM, latency,
multi-node) with the worst row named, and exits 0. Nothing here is tuned to these rows: the
model's figures come from catalogue.py's published sources.

    .venv/bin/python bench/fidelity.py [--rows]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.core import topologies as T  # noqa: E402
from topoweb.core.costs import (  # noqa: E402
    CostModel,
    build_model,
    collective_cost,
    copy_latency,
    p2p_matrix,
    p2p_status_from_text,
)
from topoweb.core.costs.records import SMALL_MESSAGE_BYTES  # noqa: E402
from topoweb.core.formats import parse_text  # noqa: E402
from topoweb.core.model import NcclRun, P2PResult, Topology  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SLICES = ("NVSwitch", "NVLink mesh", "PCIe P2P", "staged", "SHM", "latency", "multi-node")


def _text(prefix: str) -> str:
    (path,) = FIXTURES.glob(prefix + "_*")
    return path.read_text(encoding="utf-8")


def _topo(prefix: str) -> Topology:
    topo = parse_text(_text(prefix), expected="topology")
    assert isinstance(topo, Topology)
    return topo


def _dgx1v() -> Topology:
    """DGX-1V hybrid cube mesh (NV2 / NV1 pairs as p2p_08's connectivity shows)."""
    nv2 = {(0, 3), (0, 6), (1, 2), (1, 7), (2, 3), (4, 5), (4, 7), (5, 6)}
    nv1 = {(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7), (6, 7)}

    def cls(i: int, j: int) -> str:
        pair = (min(i, j), max(i, j))
        return "NV2" if pair in nv2 else "NV1" if pair in nv1 else "SYS"

    return T.from_function(8, cls, lambda i: i // 4)


def _m60_boards(n: int) -> Topology:
    """Tesla M60: two GPUs per board behind the board's PCIe switch."""
    return T.from_function(n, lambda i, j: "PIX" if i % 2 == j % 2 else "SYS", lambda i: i % 2)


@dataclass(frozen=True)
class CopyCase:
    prefix: str
    build: Callable[[], Topology]
    gpu: str
    options: dict[str, int]
    note: str


# Every p2pBandwidthLatencyTest capture with a topology of the same machine or board.
COPIES = (
    CopyCase("p2p_11", lambda: _topo("topo_32"), "NVIDIA GeForce RTX 2080 Ti", {}, "same machine"),
    CopyCase("p2p_05", lambda: _topo("topo_09"), "NVIDIA RTX 6000 Ada Generation", {}, "same"),
    CopyCase("p2p_06", lambda: _topo("topo_10"), "NVIDIA RTX 6000 Ada Generation", {}, "same"),
    CopyCase("p2p_01", lambda: _topo("topo_04"), "GeForce GTX 1070", {"pcie_width": 1}, "x1"),
    CopyCase("p2p_08", _dgx1v, "Tesla V100-SXM2-32GB", {}, "DGX-1V board"),
    CopyCase(
        "p2p_09", lambda: T.from_function(4, lambda i, j: "NV2", lambda i: 0), "Tesla V100", {}, ""
    ),
    CopyCase("p2p_03", lambda: _m60_boards(4), "Tesla M60", {}, "two M60 boards"),
    CopyCase("p2p_02", lambda: _topo("topo_05"), "Tesla M60", {}, "same VM"),
)


@dataclass(frozen=True)
class Row:
    slice: str
    name: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return abs(self.predicted - self.measured) / self.measured


def _status(result: P2PResult) -> dict[tuple[int, int], bool] | None:
    if result.p2p_access is None:
        return None
    return {
        (i, j): ok for i, row in enumerate(result.p2p_access) for j, ok in enumerate(row) if i != j
    }


def _copy_slice(model: CostModel, i: int, j: int) -> str:
    how = model.copy_transport((i, j))
    if how == "staged":
        return "staged"
    if how == "p2p":
        return "PCIe P2P"
    domain = model.nvlink_domain_of(model.gpu_ids[i])
    return "NVSwitch" if domain is not None and domain.fabric == "nvswitch" else "NVLink mesh"


def copy_rows() -> list[Row]:
    rows: list[Row] = []
    for case in COPIES:
        result = parse_text(_text(case.prefix))
        assert isinstance(result, P2PResult)
        status = _status(result)
        topo = case.build()
        on = build_model(topo, case.gpu, p2p_status=status, **case.options)  # type: ignore[arg-type]
        off = build_model(topo, case.gpu, p2p="off", **case.options)  # type: ignore[arg-type]
        for model, state in ((on, "enabled"), (off, "disabled")):
            predicted = p2p_matrix(model)
            for way, key in (
                ("unidirectional", "unidirectional_gbps"),
                ("bidirectional", "bidirectional_gbps"),
            ):
                measured = result.matrices.get(f"{way}_p2p_{state}_gbps")
                if measured is None:
                    continue
                for i, line in enumerate(measured):
                    for j, value in enumerate(line):
                        got = predicted[key][i][j]
                        if i == j or got is None or value <= 0:
                            continue
                        name = f"{case.prefix} {way} P2P={state} GPU{i}->GPU{j}"
                        rows.append(Row(_copy_slice(model, i, j), name, got, value))
            measured_lat = result.matrices.get(f"latency_gpu_p2p_{state}_us")
            if measured_lat is None:
                continue
            for i, line in enumerate(measured_lat):
                for j, value in enumerate(line):
                    if i == j or value <= 0 or i not in model.gpu_ids or j not in model.gpu_ids:
                        continue
                    name = f"{case.prefix} latency P2P={state} GPU{i}->GPU{j}"
                    rows.append(Row("latency", name, copy_latency(model, i, j), value))
    return rows


@dataclass(frozen=True)
class SweepCase:
    prefix: str
    build: Callable[[], CostModel]
    gpus: list[int]
    per_thread: int


def _sweeps() -> list[SweepCase]:
    return [
        SweepCase(
            "nccl_06",
            lambda: build_model(_topo("topo_26"), "NVIDIA A100-SXM4-40GB"),
            list(range(8)),
            8,
        ),
        SweepCase(
            "nccl_15",
            lambda: build_model(T.nvswitch_16gpu(), "Tesla V100-SXM3-32GB"),
            [1, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
            12,
        ),
        SweepCase(
            "nccl_08",
            lambda: build_model(
                T.from_function(8, lambda i, j: "NV8", lambda i: i // 4), "NVIDIA H800"
            ),
            list(range(8)),
            8,
        ),
        SweepCase(
            "nccl_11",
            lambda: build_model(
                _topo("topo_32"),
                "NVIDIA GeForce RTX 2080 Ti",
                p2p_status=p2p_status_from_text(_text("topo_32")),
            ),
            [0, 1],
            2,
        ),
        SweepCase(
            "nccl_01",
            lambda: build_model(
                _topo("topo_26"), "NVIDIA A100-SXM4-40GB", nodes=2, nic_gbits=100, nics_per_node=16
            ),
            list(range(16)),
            1,
        ),
        SweepCase(
            "nccl_03",
            lambda: build_model(
                T.from_function(1, lambda i, j: "SYS", lambda i: 0),
                "NVIDIA GB10",
                nodes=2,
                nic_gbits=200,
                nics_per_node=1,
            ),
            [0, 1],
            1,
        ),
    ]


def sweep_rows() -> list[Row]:
    rows: list[Row] = []
    for case in _sweeps():
        run = parse_text(_text(case.prefix))
        assert isinstance(run, NcclRun)
        model = case.build()
        for row in run.rows:
            measured = row.out_of_place.time_us
            if measured is None or measured <= 0 or row.bytes <= 0:
                continue
            cost = collective_cost(
                model, run.collective or "", case.gpus, row.bytes, gpus_per_thread=case.per_thread
            )
            if model.nodes > 1:
                kind = "multi-node"
            elif row.bytes < SMALL_MESSAGE_BYTES:
                kind = "latency"
            elif any("shared memory" in t for t in cost.transports):
                kind = "SHM"
            elif any("NVLink" in t for t in cost.transports):
                domain = model.nvlink_domain_of(model.gpu_ids[case.gpus[0]])
                nvswitch = domain is not None and domain.fabric == "nvswitch"
                kind = "NVSwitch" if nvswitch else "NVLink mesh"
            else:
                kind = "PCIe P2P"
            name = f"{case.prefix} {run.collective} {row.bytes} B"
            rows.append(Row(kind, name, cost.time_us, measured))
    return rows


def table(rows: list[Row]) -> list[tuple[str, int, float, float, str]]:
    out = []
    for name in SLICES:
        mine = [r for r in rows if r.slice == name]
        if not mine:
            out.append((name, 0, float("nan"), float("nan"), "no paired measurement"))
            continue
        worst = max(mine, key=lambda r: r.error)
        out.append(
            (
                name,
                len(mine),
                statistics.median(r.error for r in mine),
                worst.error,
                f"{worst.name}: {worst.predicted:.3g} vs {worst.measured:.3g}",
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every row too")
    args = parser.parse_args()
    rows = copy_rows() + sweep_rows()
    if args.rows:
        for r in sorted(rows, key=lambda r: (r.slice, -r.error)):
            print(f"{r.slice:12} {r.error:7.1%}  {r.name}: {r.predicted:.4g} vs {r.measured:.4g}")
    print(f"{'slice':12} {'rows':>5} {'median':>8} {'max':>8}  worst row")
    for name, n, med, worst, text in table(rows):
        print(f"{name:12} {n:5d} {med:8.1%} {worst:8.1%}  {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
