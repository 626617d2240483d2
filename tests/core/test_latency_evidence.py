"""Latency from evidence (issue 25): a server's own p2p latency matrices and small-message
nccl-tests rows replace the published priors; without them, answers say the latency is
uncalibrated and give the prior's band."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from tests.core.topo_fixtures import fixture_text
from topoweb.core.catalogue import (
    COPY_LATENCY,
    LAUNCH_US_PER_GPU,
    P2P_COPY_LATENCY_US,
    STAGED_COPY_LATENCY_US,
    copy_latency_prior,
)
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


def test_without_a_latency_matrix_a_copy_takes_its_generations_published_prior_and_says_so() -> (
    None
):
    model = build_model(_topo("topo_09"), ADA)
    prior = copy_latency_prior(model.hardware.generation)
    assert (prior.p2p_us, prior.staged_us) == (1.3, 11.0)
    assert copy_latency(model, 0, 1) == prior.p2p_us
    assert copy_latency(build_model(_topo("topo_09"), ADA, p2p="off"), 0, 1) == prior.staged_us
    cost = collective_cost(model, "copy", [0, 1], 4)
    assert any(
        a.startswith("copy latency uncalibrated") and "+-20%" in a and "dbkinghorn" in a
        for a in cost.assumed
    )


def test_the_copy_latency_prior_follows_the_gpu_generation_not_the_link() -> None:
    hopper = build_model(_topo("topo_22"), "NVIDIA H100 80GB HBM3")
    assert copy_latency(hopper, 0, 1) == COPY_LATENCY["Hopper"].p2p_us
    # A generation without a published latency matrix of its own takes the fallback, wide band.
    volta = build_model(_topo("topo_12"), "Tesla V100-SXM2-32GB")
    assert copy_latency(volta, 0, 1) == P2P_COPY_LATENCY_US
    assert copy_latency_prior(volta.hardware.generation).staged_us == STAGED_COPY_LATENCY_US
    cost = collective_cost(volta, "copy", [0, 1], 4)
    assert any("+-50%" in a for a in cost.assumed)


def test_every_copy_latency_names_where_it_was_published() -> None:
    for name, prior in COPY_LATENCY.items():
        assert "https://" in prior.source or "not recorded" in prior.source, name
        assert 0 < prior.p2p_us < prior.staged_us and 0 < prior.band <= 0.5, name


def test_one_thread_driving_n_gpus_reproduces_the_published_dgx_a100_small_message_times() -> None:
    # nccl-tests#123 (DGX-A100, all_reduce 8-128 B, -g N): the run LAUNCH_US_PER_GPU comes from.
    published = {2: 10.0, 3: 13.76, 4: 16.88, 5: 20.8, 6: 25.2, 7: 29.5, 8: 33.7}
    model = build_model(_topo("topo_26"), "NVIDIA A100-SXM4-80GB")
    for n, measured in published.items():
        cost = collective_cost(model, "all_reduce", range(n), 8, gpus_per_thread=n)
        assert cost.time_us == pytest.approx(measured, rel=0.08), n
    alone = collective_cost(model, "all_reduce", range(8), 8)
    eight = collective_cost(model, "all_reduce", range(8), 8, gpus_per_thread=8)
    assert eight.time_us - alone.time_us == pytest.approx(7 * LAUNCH_US_PER_GPU)


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


def _nccl_06_rows(keep: object) -> NcclRun:
    run = _parsed("nccl_06")
    assert isinstance(run, NcclRun)
    return replace(run, rows=tuple(r for r in run.rows if keep(r.bytes)))  # type: ignore[operator]


def test_a_run_of_small_messages_alone_calibrates_the_latency_and_leaves_the_bandwidth() -> None:
    small = _nccl_06_rows(lambda n: n < 64 << 10)
    model = build_model(_topo("topo_26"), "NVIDIA A100-SXM4-40GB")
    cal = calibrate_from_nccl(model, small)
    assert cal.scale == {} and set(cal.alpha_us) == {"nvlink"}
    fitted = calibrated(model, cal)
    measured = statistics.median(r.out_of_place.time_us or 0.0 for r in small.rows)
    # nccl_06 ran one thread over 8 GPUs (-g 8): the class's own latency is what the run
    # measured less that thread's launches, which come back when the same harness is priced.
    harness = collective_cost(fitted, "all_reduce", range(8), 8, gpus_per_thread=8)
    assert harness.time_us == pytest.approx(measured, rel=0.03)
    tiny = collective_cost(fitted, "all_reduce", range(8), 8)
    assert tiny.time_us == pytest.approx(measured - 7 * LAUNCH_US_PER_GPU, rel=0.05)
    assert any(a.startswith("latency measured") for a in tiny.assumed)
    assert not any(a.startswith("latency uncalibrated") for a in tiny.assumed)
    # Latency-bound rows say nothing of the bandwidth: large messages price as before.
    big, plain = (collective_cost(m, "all_reduce", range(8), 1 << 30) for m in (fitted, model))
    assert big.busbw_gbps == pytest.approx(plain.busbw_gbps, rel=0.01)
    assert not big.calibrated


def test_a_run_of_large_messages_alone_calibrates_the_bandwidth_not_the_latency() -> None:
    large = _nccl_06_rows(lambda n: n >= 64 << 20)
    model = build_model(_topo("topo_26"), "NVIDIA A100-SXM4-40GB")
    cal = calibrate_from_nccl(model, large)
    assert set(cal.scale) == {"nvlink"} and cal.alpha_us == {}
    tiny = collective_cost(calibrated(model, cal), "all_reduce", range(8), 8)
    assert any(a.startswith("latency uncalibrated") for a in tiny.assumed)
    # ... and prices small messages with NCCL's own latency, as an uncalibrated class does.
    plain = collective_cost(model, "all_reduce", range(8), 8)
    assert tiny.calibrated and tiny.time_us == pytest.approx(plain.time_us, rel=0.01)


def test_a_copy_latency_matrix_calibrates_copies_not_nccls_steps() -> None:
    result = _parsed("p2p_05")
    assert isinstance(result, P2PResult)
    model = build_model(_topo("topo_09"), ADA)
    cal = calibrate_from_p2p(model, result)
    assert set(cal.alpha_us) == {"copy", "copy_staged"}
    fitted = calibrated(model, cal)
    small = collective_cost(fitted, "all_reduce", [0, 1], 8)
    assert any(a.startswith("latency uncalibrated") for a in small.assumed)
    assert small.time_us == pytest.approx(
        collective_cost(model, "all_reduce", [0, 1], 8).time_us, rel=0.01
    )


def test_a_run_with_one_large_size_and_no_small_rows_cannot_calibrate() -> None:
    one = _nccl_06_rows(lambda n: n == 1 << 30)
    model = build_model(_topo("topo_26"), "NVIDIA A100-SXM4-40GB")
    with pytest.raises(ValueError, match="under 64 KiB"):
        calibrate_from_nccl(model, one)


@pytest.mark.parametrize(
    ("topo", "gpu", "runs"),
    [
        ("topo_04", "NVIDIA GeForce GTX 1070", "p2p_01"),  # a copy matrix: bandwidth only
        ("topo_26", "NVIDIA A100-SXM4-40GB", "nccl_06 large"),  # large messages only
    ],
)
def test_a_class_measured_in_bandwidth_only_is_faster_per_byte_at_every_larger_size(
    topo: str, gpu: str, runs: str
) -> None:
    """NCCL's variants on the calibrated links, the fastest at each size: the modelled curve
    rises with the message size (a calibrated ring under the latency of whichever variant won
    dipped where LL handed over to Simple on the GTX rig's page)."""
    model = build_model(_topo(topo), gpu)
    if runs == "p2p_01":
        result = _parsed("p2p_01")
        assert isinstance(result, P2PResult)
        cal = calibrate_from_p2p(model, result)
    else:
        cal = calibrate_from_nccl(model, _nccl_06_rows(lambda n: n >= 64 << 20))
    fitted = calibrated(model, cal)
    gpus = model.local_order
    sizes = [1 << k for k in range(3, 31)]
    busbw = [collective_cost(fitted, "all_reduce", gpus, n).busbw_gbps for n in sizes]
    assert all(b > 0 for b in busbw)
    dips = [
        (sizes[i], busbw[i], busbw[i + 1])
        for i in range(len(sizes) - 1)
        if busbw[i + 1] < busbw[i] * 0.999
    ]
    assert dips == []
