"""Networks are not assumed healthy (issue 25): a multi-node nccl-tests run (several hosts in
its rank lines) is compared with the busbw its nodes' NICs should carry; far below it is a
finding naming measured, expected, NIC count and speed; the run calibrates multi-node
predictions for servers wired like this one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.core import topologies as T
from tests.core.topo_fixtures import fixture_text
from topoweb.core.costs import (
    Calibration,
    build_model,
    calibrate_from_nccl,
    calibrated,
    collective_cost,
    slowest_group_us,
    solo_time_bound,
)
from topoweb.core.formats import parse_text
from topoweb.core.health import NETWORK_BELOW_EXPECTED, Network, check_health, network_expectation
from topoweb.core.model import NcclMeasurement, NcclRun, Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _run(prefix: str) -> NcclRun:
    (path,) = FIXTURES.glob(prefix + "_*")
    run = parse_text(path.read_text(encoding="utf-8"))
    assert isinstance(run, NcclRun)
    return run


def _scaled(run: NcclRun, factor: float) -> NcclRun:
    """The run with every row's busbw (and algbw) scaled, its time stretched to match."""

    def scale(m: NcclMeasurement) -> NcclMeasurement:
        def times(x: float | None, f: float) -> float | None:
            return None if x is None else round(x * f, 2)

        return dataclasses.replace(
            m,
            busbw_gbps=times(m.busbw_gbps, factor),
            algbw_gbps=times(m.algbw_gbps, factor),
            time_us=times(m.time_us, 1 / factor),
        )

    rows = tuple(
        dataclasses.replace(r, out_of_place=scale(r.out_of_place), in_place=scale(r.in_place))
        for r in run.rows
    )
    return dataclasses.replace(run, rows=rows)


def _a100() -> Topology:
    topo = parse_text(fixture_text("topo_26"), expected="topology")
    assert isinstance(topo, Topology)
    return topo


# nccl_01: two OCI BM.GPU4.8 (HGX A100 like topo_26), 16 x 100 Gb/s RDMA NICs per node.
OCI = Network(nics_per_node=16, nic_gbits=100)


def test_a_healthy_two_node_run_raises_no_network_finding() -> None:
    findings = check_health(_a100(), nccl_runs=[_run("nccl_01")], network=OCI)
    assert [f for f in findings if f.kind == NETWORK_BELOW_EXPECTED] == []


def test_a_two_node_run_at_a_third_of_its_nic_bound_figure_is_a_network_finding() -> None:
    slow = _scaled(_run("nccl_01"), 1 / 3)
    findings = check_health(_a100(), nccl_runs=[slow], network=OCI)
    (finding,) = [f for f in findings if f.kind == NETWORK_BELOW_EXPECTED]
    assert finding.severity == "critical"
    expected = finding.evidence["expectation"]
    assert (expected["nodes"], expected["nics_per_node"], expected["nic_gbits"]) == (2, 16, 100)
    assert finding.evidence["measured_gbps"] == pytest.approx(222.88 / 3, abs=0.01)
    assert "all_reduce over 2 nodes (16 ranks) reached 74.3 GB/s busbw" in finding.message
    assert "16 NIC(s) per node at 100 Gb/s" in finding.message
    assert f"{expected['expected_gbps']:.1f} GB/s its network should carry" in finding.message
    # Its single-node busbw expectations play no part: the run is not over this server alone.
    assert not [f for f in findings if f.kind == "below_expected_bandwidth"]


def test_a_gb10_pair_over_its_200g_link_is_judged_by_that_link() -> None:
    one_gpu = T.from_function(1, lambda i, j: "SYS", lambda i: 0)
    link = Network(nics_per_node=1, nic_gbits=200)
    healthy = check_health(one_gpu, nccl_runs=[_run("nccl_03")], network=link)
    assert [f for f in healthy if f.kind == NETWORK_BELOW_EXPECTED] == []
    slow = check_health(one_gpu, nccl_runs=[_scaled(_run("nccl_03"), 1 / 3)], network=link)
    (finding,) = [f for f in slow if f.kind == NETWORK_BELOW_EXPECTED]
    assert "1 NIC(s) per node at 200 Gb/s" in finding.message


def test_a_single_host_run_has_no_network_expectation() -> None:
    run = _run("nccl_06")
    assert network_expectation(_a100(), run, 1 << 30) is None


def test_a_two_node_sweep_calibrates_the_network_of_its_class() -> None:
    # nccl_03: two DGX Spark over one ConnectX-7, priced here as if the NIC were 400 Gb/s.
    # Calibrated by the run, the model's two-node prediction follows the run, not the NIC's
    # line rate x NET_EFFICIENCY.
    run = _run("nccl_03")
    one_gpu = T.from_function(1, lambda i, j: "SYS", lambda i: 0)
    base = build_model(one_gpu, "NVIDIA GB10", nic_gbits=400, nics_per_node=1)
    calibration = calibrate_from_nccl(base, run)
    assert set(calibration.scale) == {"network"}
    largest = max(run.rows, key=lambda r: r.bytes)
    measured = largest.out_of_place.busbw_gbps
    assert measured is not None
    two = build_model(one_gpu, "NVIDIA GB10", nodes=2, nic_gbits=400, nics_per_node=1)
    fitted = collective_cost(calibrated(two, calibration), "all_gather", [0, 1], largest.bytes)
    plain = collective_cost(two, "all_gather", [0, 1], largest.bytes)
    assert abs(fitted.busbw_gbps - measured) / measured < 0.05
    assert abs(plain.busbw_gbps - measured) / measured > 0.5
    assert fitted.calibrated and fitted.bottleneck_class == "network"


def test_a_network_calibration_leaves_one_servers_bounds_in_place() -> None:
    # A class calibrated by a multi-node run prices one server as before: placement's
    # optimistic bounds still apply (and stay under the priced time).
    base = build_model(_a100(), "NVIDIA A100-SXM4-40GB")
    net = calibrated(base, Calibration({"network": 0.8}, {"network": 4.0}))
    for gpus in ([0, 1, 2, 3], list(range(8))):
        bound = solo_time_bound(net, "all_reduce", gpus, 1 << 26)
        assert 0 < bound <= slowest_group_us(net, "all_reduce", [gpus], 1 << 26)
        assert bound == solo_time_bound(base, "all_reduce", gpus, 1 << 26)
