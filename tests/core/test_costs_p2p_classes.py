"""The P2P matrices price each shape of route once (costs.copies._route_shape) rather than each GPU
pair: every cell bit-for-bit (==) what pricing pair by pair gives, on fixtures, synthetic and
asymmetric servers, calibrated or not, P2P auto, on or off; `p2p_unidirectional` is the same
numbers as `p2p_matrix`'s unidirectional matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import synthetic
from tests.core import topologies as T
from topoweb.core.costs import (
    Calibration,
    CostModel,
    P2PMode,
    build_model,
    p2p_matrix,
    p2p_unidirectional,
)
from topoweb.core.formats.topo import parse
from topoweb.core.model import Topology

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def pair_by_pair(model: CostModel) -> dict[str, list[list[float | None]]]:
    """The matrices as first written: every ordered pair priced on its own."""
    idx = sorted(model.gpu_ids)
    uni: list[list[float | None]] = []
    bi: list[list[float | None]] = []
    for i, a in enumerate(idx):
        uni.append([])
        bi.append([])
        for j, b in enumerate(idx):
            if a == b:
                uni[-1].append(None)
                bi[-1].append(None)
                continue
            uni[-1].append(round(model.solo_rate(model.copy_load([((a, b), 1.0)]), True).gbps, 3))
            if j < i:
                bi[-1].append(bi[j][i])
                continue
            both = model.share(
                [model.copy_load([((a, b), 1.0)]), model.copy_load([((b, a), 1.0)])], copy=True
            )
            bi[-1].append(round(sum(r.gbps for r in both), 3))
    return {"unidirectional_gbps": uni, "bidirectional_gbps": bi}


def _topologies() -> dict[str, Topology]:
    out = {f.name: parse(f.read_text(encoding="utf-8")) for f in sorted(FIXTURES.glob("topo_*"))}
    out.update(
        {
            "ring-33": parse(synthetic.gpu_ring(33)),
            "nvswitch-24": parse(synthetic.nvswitch_domain(24)),
            "nics-8x12": parse(synthetic.many_nics(8, 12)),
            "dgx1": T.dgx1_v100_mesh(),
            "gtx1070": T.gtx1070_7gpu(),
            "pcie-nv4-16": T.pcie_nv4_pairs_16gpu(),
            "asym-12": T.asymmetric_box(12, 3, 0.4),
            "asym-16": T.asymmetric_box(16, 7, 0.7),
        }
    )
    return out


TOPOLOGIES = _topologies()


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("p2p", ["auto", "on", "off"])
def test_per_shape_matrices_equal_pair_by_pair(name: str, p2p: P2PMode) -> None:
    topo = TOPOLOGIES[name]
    for gpu_model in (None, "Tesla V100-SXM2-32GB"):
        fresh = build_model(topo, gpu_model, p2p=p2p)
        assert p2p_matrix(fresh) == pair_by_pair(build_model(topo, gpu_model, p2p=p2p))
        other = build_model(topo, gpu_model, p2p=p2p)
        assert p2p_unidirectional(other) == p2p_matrix(fresh)["unidirectional_gbps"]


def test_calibrated_classes_keep_the_pair_by_pair_figures() -> None:
    topo = T.pcie_nv4_pairs_16gpu()
    cal = Calibration(scale={"nvlink": 0.83, "pcie": 1.07, "socket": 0.61})
    assert p2p_matrix(build_model(topo, calibration=cal)) == pair_by_pair(
        build_model(topo, calibration=cal)
    )


@pytest.mark.parametrize("name", ["dgx1", "pcie-nv4-16", "nvswitch-24", "asym-16", "gtx1070"])
def test_nvlinked_answers_as_the_domain_scan_and_link_did(name: str) -> None:
    """Domain membership is a set look-up and the link class a row look-up (a tuple scan per
    pair made a 576-GPU domain cubic): the same answer for every pair."""
    topo = TOPOLOGIES[name]
    model = build_model(topo)
    domains = {g: d for d in model.hierarchy.nvlink_domains for g in d.gpus}
    ids = [g.id for g in topo.gpus]
    for a in ids:
        for b in ids:
            if a != b:
                d = domains.get(a)
                want = d is not None and b in d.gpus and topo.link(a, b).is_nvlink
                assert model.routes.nvlinked(a, b) == want


@pytest.mark.parametrize("name", ["dgx1", "nvswitch-24", "nics-8x12", "pcie-nv4-16"])
def test_nvlink_copies_take_nccls_route_and_switch_ports_are_the_named_resources(
    name: str,
) -> None:
    topo = TOPOLOGIES[name]
    model = build_model(topo)
    ids = model.gpu_ids
    for a in ids:
        for b in ids:
            if a == b:
                continue
            copy = model.copy_path((a, b))
            if model.copy_transport((a, b)) == "nvlink":
                assert copy == model.path((a, b))
            for r, _ in copy:
                res = model.resources[r]
                assert model.routes.index_of(res.id) == r
                if res.kind == "nvswitch_port":
                    end = ids[a] if res.id.endswith(":out") else ids[b]
                    assert res.id in (f"nvport:{end}:out", f"nvport:{end}:in")
