"""What /metrics says about one server, computed once per evaluation and kept small: each GPU
as dcgm-exporter labels it (index, UUID, model name) with its NVLinks up, and each expected
bandwidth figure beside what was measured. The fleet's gauges are read from these documents
every sweep, never from the (large) acceptance report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from topoweb.core.formats.nvml import NvmlFacts


class GpuGauges(TypedDict):
    gpu: str  # the NVML index, dcgm-exporter's `gpu` label
    uuid: str
    model: str
    nvlinks_up: int  # NVLinks NVML reports up (0 without NVLink)


class BandwidthGauges(TypedDict):
    figure: str
    expected_gbps: float | None
    measured_gbps: float | None


class ServerGauges(TypedDict):
    gpus: list[GpuGauges]
    bandwidth: list[BandwidthGauges]


def server_gauges(nvml: NvmlFacts | None, acceptance: Mapping[str, Any]) -> ServerGauges:
    """The document for one server, from its NVML facts and its acceptance report's rows.
    GPU pairs are summed up by link class: the class's expectation and its worst measured pair
    (one series per class, not per pair: a 576-GPU server has 330,000 pairs)."""
    gpus: list[GpuGauges] = []
    if nvml is not None and nvml.available:
        for gpu in nvml.gpus:
            if gpu.index is None:
                continue
            gpus.append(
                GpuGauges(
                    gpu=str(gpu.index),
                    uuid=gpu.uuid or "",
                    model=gpu.name or "",
                    nvlinks_up=sum(link.up is True for link in gpu.nvlinks),
                )
            )
    figures: dict[str, tuple[list[float], list[float]]] = {}
    for row in acceptance.get("rows", ()):
        figure = f"p2p {row['class']}" if row["kind"] == "p2p" else str(row["figure"])
        expected, measured = figures.setdefault(figure, ([], []))
        if row.get("expected_gbps") is not None:
            expected.append(float(row["expected_gbps"]))
        if row.get("measured_gbps") is not None:
            measured.append(float(row["measured_gbps"]))
    bandwidth = [
        BandwidthGauges(
            figure=figure,
            expected_gbps=max(expected) if expected else None,
            measured_gbps=min(measured) if measured else None,
        )
        for figure, (expected, measured) in sorted(figures.items())
    ]
    return ServerGauges(gpus=gpus, bandwidth=bandwidth)
