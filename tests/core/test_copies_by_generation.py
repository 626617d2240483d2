"""Peer copies per GPU generation and staged copies (issue 25): copy engines reach a
generation's published share of the NVLink line rate, staged copies pipeline their legs from
PCIe Gen4 on, and neither a host bridge nor the NICs a capture lists change a staged copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core import topologies as T
from tests.core.topo_fixtures import fixture_text
from topoweb.core.catalogue import (
    NVLINK_COPY_SHARE,
    PCIE_P2P_SHARE,
    STAGED_COPY_SHARE,
    resolve_hardware,
)
from topoweb.core.costs import build_model, p2p_matrix
from topoweb.core.formats import parse_text
from topoweb.core.model import P2PResult, Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _p2p(prefix: str) -> P2PResult:
    (path,) = FIXTURES.glob(prefix + "_*")
    result = parse_text(path.read_text(encoding="utf-8"))
    assert isinstance(result, P2PResult)
    return result


def _topo(prefix: str) -> Topology:
    topo = parse_text(fixture_text(prefix), expected="topology")
    assert isinstance(topo, Topology)
    return topo


def _without_nics(topo: Topology) -> Topology:
    gpus = {d.id for d in topo.gpus}
    return Topology(
        tuple(d for d in topo.devices if d.kind == "gpu"),
        tuple(lnk for lnk in topo.links if lnk.a in gpus and lnk.b in gpus),
        topo.warnings,
    )


def test_every_copy_figure_names_a_published_source() -> None:
    for table in (NVLINK_COPY_SHARE, PCIE_P2P_SHARE, STAGED_COPY_SHARE):
        for key, figure in table.items():
            assert 0 < figure.share < 1 and 0 < figure.band < 0.2, key
            cited = ("https://", "DOMAIN.md", "p2p_0", "Hopper's share")
            assert any(c in figure.source for c in cited), (key, figure.source)


@pytest.mark.parametrize(
    ("gpu", "share"),
    [
        ("Tesla V100-SXM2-32GB", 0.96),
        ("NVIDIA A100-SXM4-80GB", 0.80),
        ("NVIDIA H100 80GB HBM3", 0.83),
        ("NVIDIA B200", 0.83),
    ],
)
def test_copy_engines_reach_their_generations_share_of_nvlink(gpu: str, share: float) -> None:
    hw = resolve_hardware(None, gpu)
    line = hw.generation.nvlink_per_link_gbps
    assert hw.nvlink_copy_per_link_gbps == pytest.approx(line * share)


def test_a_healthy_hgx_h100s_published_copies_sit_inside_the_models_band() -> None:
    # HGX H100 (nccl issue 1264): 371-377 GB/s one way between any two GPUs over NV18.
    model = build_model(T.h100_nv18_no_nic(), "NVIDIA H100 80GB HBM3")
    uni = p2p_matrix(model)["unidirectional_gbps"]
    predicted = uni[0][1]
    assert predicted is not None
    band = model.hardware.nvlink_copy_band
    for measured in (371.0, 377.0):
        assert abs(measured - predicted) / predicted <= band
    # The V100 factor the model used before would have expected 436.5 and called 371 low.
    assert predicted == pytest.approx(18 * 25 * 0.83)


@pytest.mark.parametrize("prefix, topo", [("p2p_05", "topo_09"), ("p2p_06", "topo_10")])
def test_staged_gen4_copies_overlap_their_legs_one_way_and_both_ways(
    prefix: str, topo: str
) -> None:
    result = _p2p(prefix)
    model = build_model(_topo(topo), "NVIDIA RTX 6000 Ada Generation", p2p="off")
    predicted = p2p_matrix(model)
    for name, key in (
        ("unidirectional_p2p_disabled_gbps", "unidirectional_gbps"),
        ("bidirectional_p2p_disabled_gbps", "bidirectional_gbps"),
    ):
        measured = result.matrices[name]
        for i, row in enumerate(measured):
            for j, value in enumerate(row):
                if i != j:
                    got = predicted[key][i][j]
                    assert got is not None and abs(got - value) / value <= 0.10, (name, i, j)


def test_a_gen3_staged_copy_still_runs_its_legs_in_turn() -> None:
    # p2p_11 (two RTX 2080 Ti on Gen3, P2P refused): both directions at once are twice one way.
    result = _p2p("p2p_11")
    model = build_model(_topo("topo_32"), "NVIDIA GeForce RTX 2080 Ti", p2p="off")
    predicted = p2p_matrix(model)
    for name, key in (
        ("unidirectional_p2p_disabled_gbps", "unidirectional_gbps"),
        ("bidirectional_p2p_disabled_gbps", "bidirectional_gbps"),
    ):
        value = result.matrices[name][0][1]
        got = predicted[key][0][1]
        assert got is not None and abs(got - value) / value <= 0.10, (name, got, value)


@pytest.mark.parametrize(
    ("prefix", "gpu"),
    [
        ("topo_01", "NVIDIA H200"),
        ("topo_26", "NVIDIA A100-SXM4-80GB"),
        ("topo_28", "NVIDIA A100-SXM4-80GB"),
        ("topo_09", "NVIDIA RTX 6000 Ada Generation"),
    ],
)
def test_a_capture_with_or_without_its_nics_prices_copies_the_same(prefix: str, gpu: str) -> None:
    full = _topo(prefix)
    for p2p in ("auto", "off"):
        a = p2p_matrix(build_model(full, gpu, p2p=p2p))  # type: ignore[arg-type]
        b = p2p_matrix(build_model(_without_nics(full), gpu, p2p=p2p))  # type: ignore[arg-type]
        assert a == b, (prefix, p2p)


def test_two_gpus_under_one_host_bridge_do_not_share_an_x16_when_copying_both_ways() -> None:
    # topo_10: two RTX 6000 Ada across a host bridge (PHB). Each staged copy keeps its own
    # links; both ways at once pay only the links' duplex share, not half of a shared x16.
    model = build_model(_topo("topo_10"), "NVIDIA RTX 6000 Ada Generation", p2p="off")
    matrix = p2p_matrix(model)
    one_way = matrix["unidirectional_gbps"][0][1]
    both = matrix["bidirectional_gbps"][0][1]
    assert one_way is not None and both is not None
    assert both == pytest.approx(2 * 0.72 * one_way, rel=1e-3)


# Every P2P=Disabled (staged) matrix of the fixtures against the model, by its median error.
# Known misses, each a limit of the capture: p2p_01's x1 risers both ways at once (the model
# queues PIX pairs' staged legs on their switch's uplink, and gives the other pairs no duplex
# share before Gen4); p2p_08 / p2p_09 show NV cells
# for pairs that share a PCIe switch when copying through the host; p2p_02's VM shows SOC
# inside one M60 board.
KNOWN_STAGED_MISSES = {
    ("p2p_01", "bidirectional"),
    ("p2p_08", "bidirectional"),
    ("p2p_09", "bidirectional"),
    ("p2p_02", "bidirectional"),
}


def test_every_staged_matrix_in_the_fixtures_is_within_15_percent_median() -> None:
    from tests.core.test_costs_measured import COPIES

    cases = COPIES + [("p2p_02", lambda: _topo("topo_05"), "Tesla M60", {})]
    checked = 0
    for prefix, build, gpu, options in cases:
        result = _p2p(prefix)
        model = build_model(build(), gpu, p2p="off", **options)  # type: ignore[operator, arg-type]
        predicted = p2p_matrix(model)
        for way in ("unidirectional", "bidirectional"):
            measured = result.matrices.get(f"{way}_p2p_disabled_gbps")
            if measured is None or (prefix, way) in KNOWN_STAGED_MISSES:
                continue
            errors = [
                abs((predicted[f"{way}_gbps"][i][j] or 0.0) - v) / v
                for i, row in enumerate(measured)
                for j, v in enumerate(row)
                if i != j and v > 0
            ]
            errors.sort()
            assert errors[len(errors) // 2] <= 0.15, (prefix, way, errors[len(errors) // 2])
            checked += 1
    assert checked >= 8
