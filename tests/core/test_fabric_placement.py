"""Placement over the fabric: a job over several servers takes servers whose rails share leaves
(one leaf group of the real ibnet_01 fabric) before servers a spine apart, and prices the hop
between them on the fabric's path (its link rate; through the spines, its leaves' measured
oversubscription) instead of NIC line rate and a fixed spine ratio."""

from __future__ import annotations

import pytest

from tests.core.test_fabric import IBNET_01
from topoweb.core.costs import build_model, collective_cost, with_options
from topoweb.core.fabric import build_fabric
from topoweb.core.fabric_findings import fabric_analysis
from topoweb.core.fabric_paths import FabricPlace, NetworkPath, fabric_places, network_path
from topoweb.core.formats import parse_text
from topoweb.core.formats.ibnet import parse
from topoweb.core.model import Topology
from topoweb.core.placement.job import ServerPool, inter_node_all_reduce_us, select_job

H200 = (IBNET_01.parent / "topo_01_h200-8gpu-12nic-numaid.txt").read_text()
# Two hosts of unit 01-05 (leaves B09-P1-IBLEAF-0k-05), two of other units: by name alone
# (what a selection without the fabric sorts on) the cross-unit pair comes first.
SAME_LEAF = ("b05-p1-dgx-05-c01", "b05-p1-dgx-05-c02")
APART = ("a05-p1-dgx-01-c01", "a06-p1-dgx-02-c01")


@pytest.fixture(scope="module")
def places() -> dict[str, FabricPlace]:
    doc = fabric_analysis(build_fabric(parse(IBNET_01.read_text())))
    return fabric_places("ndr", doc)


def pools(places: dict[str, FabricPlace] | None) -> dict[str, ServerPool]:
    topo = parse_text(H200)
    assert isinstance(topo, Topology)
    model = build_model(topo, "NVIDIA H200")
    out = {}
    for host in (*APART, *SAME_LEAF):
        place = places[host] if places else None
        group = f"leaf={place.leaf_group}" if place else "class=h200"
        out[host] = ServerPool(model, tuple(range(8)), group, fabric=place)
    return out


def test_places_come_from_the_graph(places: dict[str, FabricPlace]) -> None:
    a, b = (places[h] for h in SAME_LEAF)
    assert a.leaf_group == b.leaf_group == "B09-P1-IBLEAF-01-05"
    assert places[APART[0]].leaf_group == "A09-P1-IBLEAF-01-01"
    assert {p.spine_group for p in places.values()} == {"A10-P1-IBSPINE-01"}
    assert a.nic_gbps == 400.0
    # IBLEAF-01-05 carries 18 hosts at 400 Gb/s on 16 uplinks (one missing to IBSPINE-04 and
    # one to IBSPINE-08): 7200 / 6400.
    assert a.oversubscription == pytest.approx(7200 / 6400)
    leaf = network_path([a, b])
    spine = network_path([places[h] for h in APART])
    assert leaf is not None and (leaf.level, leaf.oversubscription) == ("leaf", 1.0)
    assert spine is not None and spine.level == "spine" and spine.oversubscription > 1.0
    assert network_path([a, None]) is None


def test_a_two_server_job_prefers_the_hosts_that_share_leaves(
    places: dict[str, FabricPlace],
) -> None:
    without = select_job(pools(None), k=16)[0]
    assert {p.server for p in without.parts} == set(APART)  # the name order, blind to cables
    best, *others = select_job(pools(places), k=16)
    assert {p.server for p in best.parts} == set(SAME_LEAF)
    assert "leaf-local in fabric ndr (4 NICs at 400 Gb/s per server)" in best.reason
    apart = next(j for j in others if {p.server for p in j.parts} == set(APART))
    # a05-p1-dgx-01-c01 has 3 HCAs on the fabric (its rail-2 leaf is not in the capture),
    # and the pair's leaves are oversubscribed: the cost model prices both on that path.
    assert "through the spines of fabric ndr (3 NICs at 400 Gb/s per server, leaves " in (
        apart.reason
    )
    assert apart.inter_node_us > best.inter_node_us


def test_the_hop_is_priced_on_the_fabric_path(places: dict[str, FabricPlace]) -> None:
    model = pools(None)[APART[0]].model
    parts = [(model, 8, 8), (model, 8, 8)]
    spine = network_path([places[h] for h in APART])
    assert spine is not None and 1.0 < spine.oversubscription < 2.0
    leaf = NetworkPath("leaf", 400.0, 1.0, "ndr", 4)
    through = NetworkPath("spine", 400.0, spine.oversubscription, "ndr", 4)
    nbytes = 1 << 30
    alpha = 2 * dict(model.hardware.latency_us).get("network", 3.0)

    def bandwidth_us(path: NetworkPath | None, same_rails: bool = False) -> float:
        return inter_node_all_reduce_us(parts, nbytes, same_rails, path) - alpha

    # Through the spines the rate drops by the leaves' measured ratio, not the fixed 2:1...
    assert bandwidth_us(through) / bandwidth_us(leaf) == pytest.approx(spine.oversubscription)
    # ...and a server leaves by the HCAs it has on the fabric (4), not every NIC of its
    # topology (8 used here): without a fabric, 8 NICs at line rate, halved across groups.
    eight = NetworkPath("spine", 400.0, spine.oversubscription, "ndr", 8)
    assert bandwidth_us(None) / bandwidth_us(eight) == pytest.approx(2.0 / spine.oversubscription)


@pytest.mark.parametrize(
    ("fixture", "gpu"),
    [
        ("topo_01_h200-8gpu-12nic-numaid.txt", "NVIDIA H200"),
        ("topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt", "NVIDIA A100-SXM4-40GB"),
        ("topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt", "NVIDIA RTX 6000 Ada Generation"),
    ],
)
@pytest.mark.parametrize("nbytes", [1 << 20, 1 << 30])
def test_a_job_through_the_spine_never_comes_out_faster_than_one_on_a_leaf(
    fixture: str, gpu: str, nbytes: int
) -> None:
    """Two servers wired alike, all their GPUs: one rule prices the job on one rail group and
    across two (the cost model, the spine's oversubscription taken off the NICs), so crossing
    the spine costs the same or more (a ring over the NICs priced the crossing job, 30-40 %
    under the same job on one leaf at 1 MiB)."""
    topo = parse_text((IBNET_01.parent / fixture).read_text())
    assert isinstance(topo, Topology)
    model = build_model(topo, gpu)
    free = tuple(sorted(model.gpu_ids))

    def job(rails: tuple[str, str]) -> float:
        servers = {name: ServerPool(model, free, r) for name, r in zip("ab", rails, strict=True)}
        (best,) = select_job(servers, k=2 * len(free), nbytes=nbytes, top=1)
        assert "priced by the multi-node cost model" in best.reason
        return best.predicted_us

    assert job(("r1", "r2")) >= job(("r1", "r1"))


def test_a_k_gpu_job_over_servers_of_one_nvlink_domain_is_priced_over_nvlink() -> None:
    """Two 4-GPU servers of one NVML clique hold a k=8 job as one NVLink machine, priced as
    the layout path and the cost API price that domain (costs.with_options's nvlink_nodes):
    no network time. Without the shared domain, the same servers go over their NICs."""
    topo = parse_text(
        (IBNET_01.parent / "topo_13_polaris-a100-4gpu-nv4-2mlx5-mixed-sep-header.txt").read_text()
    )
    assert isinstance(topo, Topology)
    model = build_model(topo, "NVIDIA A100-SXM4-40GB")
    free = tuple(sorted(model.gpu_ids))

    def job(domain: str) -> object:
        servers = {n: ServerPool(model, free, "r1", nvlink_domain=domain) for n in ("a", "b")}
        (best,) = select_job(servers, k=8, nbytes=1 << 30, top=1)
        return best

    joined, apart = job("cluster/7"), job("")
    assert joined.inter_node_us == 0 and "NVLink domain" in joined.reason  # type: ignore[attr-defined]
    assert "multi-node cost model" in apart.reason  # type: ignore[attr-defined]
    domain = with_options(model, nodes=2, nvlink_nodes=True)
    whole = collective_cost(domain, "all_reduce", list(range(8)), 1 << 30).time_us
    assert joined.predicted_us == pytest.approx(whole)  # type: ignore[attr-defined]
    assert apart.inter_node_us > 0  # type: ignore[attr-defined]
