"""Latency from evidence (issue 25): a server's own p2p latency matrices and small-message
nccl-tests rows replace the published priors; without them, answers say the latency is
uncalibrated and give the prior's band."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tests.core.topo_fixtures import fixture_text
from topoweb.core.catalogue import P2P_COPY_LATENCY_US, STAGED_COPY_LATENCY_US
from topoweb.core.costs import (
    build_model,
    calibrate_from_nccl,
    calibrate_from_p2p,
    calibrated,
    collective_cost,
    copy_latency,
    p2p_status_from_text,
)
from topoweb.core.formats import parse_text
from topoweb.core.model import NcclRun, P2PResult, Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ADA = "NVIDIA RTX 6000 Ada Generation"


def _parsed(prefix: str) -> object:
    (path,) = FIXTURES.glob(prefix + "_*")
    return parse_text(path.read_text(encoding="utf-8"))


def _topo(prefix: str) -> Topology:
    topo = parse_text(fixture_text(prefix), expected="topology")
    assert isinstance(topo, Topology)
    return topo


def _off_diagonal(matrix: tuple[tuple[float, ...], ...]) -> list[float]:
    return [v for i, row in enumerate(matrix) for j, v in enumerate(row) if i != j]


def test_without_a_latency_matrix_a_copy_takes_the_published_prior_and_says_so() -> None:
    model = build_model(_topo("topo_09"), ADA)
    assert copy_latency(model, 0, 1) == P2P_COPY_LATENCY_US
    assert copy_latency(build_model(_topo("topo_09"), ADA, p2p="off"), 0, 1) == (
        STAGED_COPY_LATENCY_US
    )
    cost = collective_cost(model, "copy", [0, 1], 4)
    assert any(a.startswith("copy latency uncalibrated") and "+-50%" in a for a in cost.assumed)


def test_a_servers_own_latency_matrices_calibrate_its_copies() -> None:
    result = _parsed("p2p_05")
    assert isinstance(result, P2PResult)
    model = build_model(_topo("topo_09"), ADA)
    fitted = calibrated(model, calibrate_from_p2p(model, result))
    p2p = statistics.median(_off_diagonal(result.matrices["latency_gpu_p2p_enabled_us"]))
    staged = statistics.median(_off_diagonal(result.matrices["latency_gpu_p2p_disabled_us"]))
    assert copy_latency(fitted, 0, 2) == pytest.approx(p2p)
    off = calibrated(build_model(_topo("topo_09"), ADA, p2p="off"), fitted.calibration)
    assert copy_latency(off, 0, 2) == pytest.approx(staged)
    tiny = collective_cost(fitted, "copy", [0, 2], 4)
    assert tiny.time_us == pytest.approx(p2p, rel=0.01)
    assert not any(a.startswith("copy latency uncalibrated") for a in tiny.assumed)


def test_small_message_rows_calibrate_a_collectives_latency() -> None:
    run = _parsed("nccl_11")
    assert isinstance(run, NcclRun)
    topo = _topo("topo_32")
    status = p2p_status_from_text(fixture_text("topo_32"))
    model = build_model(topo, "NVIDIA GeForce RTX 2080 Ti", p2p_status=status)
    plain = collective_cost(model, "all_reduce", [0, 1], 8)
    assert any(a.startswith("latency uncalibrated") for a in plain.assumed)
    fitted = calibrated(model, calibrate_from_nccl(model, run))
    small = collective_cost(fitted, "all_reduce", [0, 1], 8)
    assert not any(a.startswith("latency uncalibrated") for a in small.assumed)
    assert small.calibrated
