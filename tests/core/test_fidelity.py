"""bench/fidelity.py's slices (issue 25: every slice within 15 % median on the fixtures'
measurements, the worst row named). The bench prices with the uncalibrated model, whose figures
come from published sources (catalogue.py), so a change that drifts a slice fails here first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fidelity  # noqa: E402


@pytest.fixture(scope="module")
def table() -> list[tuple[str, int, float, float, str]]:
    return fidelity.table(fidelity.copy_rows() + fidelity.sweep_rows())


def test_every_slice_is_priced_within_15_percent_median(
    table: list[tuple[str, int, float, float, str]],
) -> None:
    assert [row[0] for row in table] == list(fidelity.SLICES)
    for name, rows, median, _, worst in table:
        assert rows > 0, name
        assert median <= 0.15, (name, median, worst)


def test_the_latency_slice_holds_copy_latencies_and_small_collectives_alike() -> None:
    rows = [r for r in fidelity.copy_rows() + fidelity.sweep_rows() if r.slice == "latency"]
    assert any(" latency P2P=" in r.name for r in rows)
    assert any(r.name.startswith("nccl_") for r in rows)
