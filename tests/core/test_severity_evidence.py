"""Severity that respects uncertainty (issue 25): healthy NVSwitch servers of every generation
in the fixtures raise nothing critical; a pair at 82 % of its SKU siblings and a lone server's
pair at 86 % of its other same-class pairs are each caught, the finding naming its evidence;
every expectation is one typed record (value, source, band, evidence)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.core import topologies as T
from tests.core.topo_fixtures import fixture_text
from topoweb.core.formats import parse_text
from topoweb.core.health import (
    Figures,
    check_health,
    expectations_from_model,
    measured_figures,
    median_figures,
    pair_expectations,
)
from topoweb.core.health.figures import p2p_cells
from topoweb.core.model import NcclRun, P2PGpu, P2PResult, Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H100 = "NVIDIA H100 80GB HBM3"


def _run(prefix: str) -> NcclRun:
    (path,) = FIXTURES.glob(prefix + "_*")
    run = parse_text(path.read_text(encoding="utf-8"))
    assert isinstance(run, NcclRun)
    return run


def _topo(prefix: str) -> Topology:
    topo = parse_text(fixture_text(prefix), expected="topology")
    assert isinstance(topo, Topology)
    return topo


def _h100_copies(slow: dict[tuple[int, int], float] | None = None) -> P2PResult:
    """An 8x H100 NVSwitch board's one-way copies as a healthy board publishes them (nccl
    issue 1264: 371-377 GB/s between any two GPUs), with `slow` cells scaled."""
    slow = slow or {}
    cells = [[0.0 if i == j else 371.0 + (i * 7 + j * 3) % 7 for j in range(8)] for i in range(8)]
    for (i, j), factor in slow.items():
        cells[i][j] = round(cells[i][j] * factor, 2)
    matrix = tuple(tuple(r) for r in cells)
    return P2PResult(
        tuple(P2PGpu(i, H100, None) for i in range(8)),
        tuple(tuple(True for _ in range(8)) for _ in range(8)),
        {"unidirectional_p2p_enabled_gbps": matrix},
    )


@pytest.mark.parametrize(
    ("generation", "build", "gpu", "prefix"),
    [
        ("Volta", T.nvswitch_16gpu, "Tesla V100-SXM3-32GB", "nccl_15"),
        ("Ampere", lambda: _topo("topo_26"), "NVIDIA A100-SXM4-40GB", "nccl_06"),
        (
            "Hopper",
            lambda: T.from_function(8, lambda i, j: "NV8", lambda i: i // 4),
            "NVIDIA H800",
            "nccl_08",
        ),
    ],
    ids=["volta-dgx2", "ampere-dgx-a100", "hopper-h800"],
)
def test_a_healthy_nvswitch_server_of_each_generation_has_no_critical_finding(
    generation: str, build: Callable[[], Topology], gpu: str, prefix: str
) -> None:
    topo = build()
    expected = expectations_from_model(topo, gpu)
    findings = check_health(topo, nccl_runs=[_run(prefix)], expectations=expected)
    assert not [f for f in findings if f.severity == "critical"], (generation, findings)


def test_a_healthy_h100_boards_real_copy_figures_raise_nothing() -> None:
    topo = T.h100_nv18_no_nic()
    expected = expectations_from_model(topo, H100)
    findings = check_health(topo, p2p=_h100_copies(), expectations=expected)
    assert [f for f in findings if f.kind == "below_expected_bandwidth"] == []


def test_every_expectation_is_a_typed_record_with_source_band_and_evidence() -> None:
    topo = T.h100_nv18_no_nic()
    expected = expectations_from_model(topo, H100)
    alone = pair_expectations(topo, expected)
    record = alone[(2, 5)]
    assert (record.source, record.link_class) == ("model", "NV18")
    assert record.value_gbps == pytest.approx(18 * 25 * 0.83)
    assert record.band == pytest.approx(0.03)
    assert "cost model" in record.evidence
    measured = {k: v for k, (v, _) in p2p_cells(_h100_copies()).items()}
    own = pair_expectations(topo, expected, measured)[(2, 5)]
    assert own.source == "self" and own.evidence == "this server's other 54 NV18 pairs"
    assert own.model_gbps == pytest.approx(record.value_gbps)
    siblings = median_figures([measured_figures(_h100_copies())] * 3)
    sib = pair_expectations(topo, expected, measured, siblings, sibling_count=3)[(2, 5)]
    assert sib.source == "siblings" and "3 SKU siblings' GPU2->GPU5" in sib.evidence
    assert sib.to_document()["source"] == "siblings"


def test_one_pair_at_82_percent_of_its_siblings_is_caught_naming_them() -> None:
    topo = T.h100_nv18_no_nic()
    expected = expectations_from_model(topo, H100)
    siblings = median_figures([measured_figures(_h100_copies())] * 3)
    slow = _h100_copies({(2, 5): 0.82})
    findings = check_health(topo, p2p=slow, expectations=expected, sku_medians=siblings)
    (finding,) = [f for f in findings if f.kind == "below_expected_bandwidth"]
    assert finding.devices == ("GPU2", "GPU5")
    direction = finding.evidence["directions"]["GPU2->GPU5"]
    assert direction["expectation"]["source"] == "siblings"
    assert direction["ratio"] == pytest.approx(0.82, abs=0.005)
    assert "82% of the median of SKU siblings' GPU2->GPU5" in finding.message
    # Healthy siblings' own figures are within the noise: nothing else is flagged.
    healthy = check_health(topo, p2p=_h100_copies(), expectations=expected, sku_medians=siblings)
    assert not [f for f in healthy if f.kind == "below_expected_bandwidth"]


def test_a_lone_servers_pair_at_86_percent_of_its_other_same_class_pairs_is_caught() -> None:
    topo = T.h100_nv18_no_nic()
    expected = expectations_from_model(topo, H100)
    slow = _h100_copies({(2, 5): 0.86})
    findings = check_health(topo, p2p=slow, expectations=expected)
    (finding,) = [f for f in findings if f.kind == "below_expected_bandwidth"]
    assert finding.devices == ("GPU2", "GPU5")
    assert finding.severity == "warning"  # near its evidence: a warning, not an alarm
    assert "GPU2-GPU5 (NV18)" in finding.message
    assert "86% of this server's other 54 NV18 pairs" in finding.message
    assert not [f for f in findings if f.severity == "critical"]


def test_a_whole_slow_board_is_judged_by_the_model_not_by_its_own_slow_pairs() -> None:
    # Every pair at half the published figure: self-consistent, but far below the model.
    topo = T.h100_nv18_no_nic()
    expected = expectations_from_model(topo, H100)
    half = _h100_copies({(i, j): 0.5 for i in range(8) for j in range(8) if i != j})
    findings = check_health(topo, p2p=half, expectations=expected)
    slow = [f for f in findings if f.kind == "below_expected_bandwidth"]
    assert len(slow) == 28 and all(f.severity == "critical" for f in slow)
    assert all("cost model" in f.message for f in slow)


def test_figures_without_a_model_band_are_staffs() -> None:
    topo = T.h100_nv18_no_nic()
    staff = pair_expectations(
        topo,
        expectations_from_model(topo, H100).__class__(Figures({(0, 1): 360.0}, {})),
    )[(0, 1)]
    assert (staff.source, staff.value_gbps, staff.band) == ("staff", 360.0, pytest.approx(0.1))
