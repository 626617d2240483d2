"""The structure recovered from real matrices (transcribed in tests/core/topologies.py)."""

from __future__ import annotations

import random
from typing import Any

from tests.core import topologies as T
from topoweb.core.hierarchy import recover_hierarchy
from topoweb.core.model import Device, Link, Topology


def test_it_splits_the_h200_box_into_two_numa_nodes_with_a_switch_tree_per_gpu_and_nic() -> None:
    h = recover_hierarchy(T.h200_nv18_12nic())
    numa = [n for n in h.nodes if n.kind == "numa"]
    assert [n.label for n in numa] == ["NUMA node 0", "NUMA node 1"]
    assert numa[0].devices == (
        "GPU0",
        "GPU1",
        "GPU2",
        "GPU3",
        "NIC0",
        "NIC1",
        "NIC2",
        "NIC3",
        "NIC4",
        "NIC5",
    )
    assert h.node(h.parent["GPU0"]).devices == ("GPU0", "NIC0")  # the PXB pair
    assert h.node(h.parent["NIC1"]).kind == "switch"  # NIC1-NIC2 are PIX
    assert h.implied_class("GPU1", "NIC3") == "PXB"
    assert h.implied_class("GPU0", "NIC6") == "SYS"
    assert h.findings == ()


def test_it_calls_uniform_nv18_and_nv12_an_nvswitch_fabric() -> None:
    for topo, k in ((T.h200_nv18_12nic(), 18), (T.dgx_a100_nv12(), 12)):
        (domain,) = recover_hierarchy(topo).nvlink_domains
        assert domain.fabric == "nvswitch"
        assert domain.port_links == k
        assert len(domain.gpus) == 8


def test_it_calls_the_dgx1_nv1_nv2_mesh_and_nv4_boards_point_to_point() -> None:
    (mesh,) = recover_hierarchy(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB").nvlink_domains
    assert mesh.fabric == "point_to_point"
    assert "NV1/NV2" in mesh.reason
    (quad,) = recover_hierarchy(T.a100_nv4_4gpu()).nvlink_domains
    assert quad.fabric == "point_to_point"  # NV4 x 3 peers = 12 = the links an A100 has
    (pair,) = recover_hierarchy(T.rtx3090_nv4_pair(), "NVIDIA GeForce RTX 3090").nvlink_domains
    assert (pair.fabric, pair.gpus) == ("point_to_point", ("GPU0", "GPU1"))


def test_nvml_saying_switch_overrides_the_count_rule() -> None:
    (quad,) = recover_hierarchy(T.a100_nv4_4gpu(), nvswitch=True).nvlink_domains
    assert quad.fabric == "nvswitch"
    assert "SWITCH" in quad.reason


def test_it_places_the_dgx_a100_gpus_in_pairs_under_switch_trees_with_their_nics() -> None:
    h = recover_hierarchy(T.dgx_a100_nv12())
    tree = h.node(h.parent["GPU2"])
    assert tree.kind == "switch_tree"
    assert tree.devices == ("GPU2", "GPU3", "mlx5_2", "mlx5_3")
    assert h.node(h.numa_of("GPU2")).label == "NUMA node 1"


def test_the_gtx1070_box_has_two_pcie_switches_under_one_host_bridge() -> None:
    h = recover_hierarchy(T.gtx1070_7gpu())
    switches = sorted(n.devices for n in h.nodes if n.kind == "switch")
    assert switches == [("GPU0", "GPU1", "GPU2"), ("GPU3", "GPU4", "GPU5", "GPU6")]
    assert h.implied_class("GPU0", "GPU4") == "PHB"


def test_nv_only_gpus_take_their_numa_node_from_the_affinity_column() -> None:
    h = recover_hierarchy(T.h100_nv18_no_nic())
    assert h.numa_of("GPU0") == h.numa_of("GPU3") != h.numa_of("GPU4")


def test_classes_that_do_not_nest_become_a_finding_naming_the_pair() -> None:
    # GPU0-GPU1 and GPU1-GPU2 share a switch (PIX) but GPU0-GPU2 claims SYS.
    devices = tuple(Device(f"GPU{i}", "gpu", i) for i in range(3))
    links = (Link("GPU0", "GPU1", "PIX"), Link("GPU1", "GPU2", "PIX"), Link("GPU0", "GPU2", "SYS"))
    h = recover_hierarchy(Topology(devices, links))
    (finding,) = h.findings
    assert finding.kind == "nesting_violation"
    assert finding.devices == ("GPU0", "GPU2")
    assert "GPU0-GPU2 is SYS" in finding.message and "PIX" in finding.message


def test_a_uniform_nvswitch_domain_with_a_short_pair_is_flagged() -> None:
    devices = tuple(Device(f"GPU{i}", "gpu", i) for i in range(4))
    links = tuple(
        Link(f"GPU{a}", f"GPU{b}", "NV12" if (a, b) == (0, 1) else "NV18")
        for a in range(4)
        for b in range(a + 1, 4)
    )
    h = recover_hierarchy(Topology(devices, links), "NVIDIA H100 80GB HBM3", nvswitch=True)
    assert [f.kind for f in h.findings] == ["nvlink_uneven"]
    assert "GPU0-GPU1" in h.findings[0].message


def test_a_numa_column_the_matrix_contradicts_is_a_finding_and_the_matrix_wins() -> None:
    # tests/fixtures/topo_28_a100-8gpu-nv12-4nic-pxb-pix-numaid.txt: GPU0-3 all print NUMA
    # Affinity 0, yet GPU0/GPU1 are SYS from NIC2/NIC3, which are PXB to GPU2/GPU3.
    names = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(4)]
    nv = " ".join(["NV12"] * 8)
    rows = []
    for i in range(8):
        cells = nv.split()
        cells[i] = "X"
        nic = {
            0: "PXB PXB SYS SYS",
            1: "PXB PXB SYS SYS",
            2: "SYS SYS PXB PXB",
            3: "SYS SYS PXB PXB",
        }.get(i, "SYS SYS SYS SYS")
        rows.append(" ".join(cells) + " " + nic)
    rows += [
        "PXB PXB SYS SYS SYS SYS SYS SYS X PXB SYS SYS",
        "PXB PXB SYS SYS SYS SYS SYS SYS PXB X SYS SYS",
        "SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS X PIX",
        "SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS PIX X",
    ]
    aff = {
        f"GPU{i}": ("0-31,64-95" if i < 4 else "32-63,96-127", "0" if i < 4 else "1")
        for i in range(8)
    }
    h = recover_hierarchy(T.from_rows(names, rows, aff))
    assert h.numa_of("GPU0") != h.numa_of("GPU2")
    assert h.numa_of("GPU4") == h.numa_of("GPU7")
    kinds = {f.kind for f in h.findings}
    assert kinds == {"numa_affinity_conflict"}
    assert h.findings[0].message.startswith("GPU0 and GPU2 both report NUMA affinity 0")
    assert "GPU0-NIC2 is SYS" in h.findings[0].message


def test_a_ring_of_96_gpus_is_recovered_with_quadratic_work_and_one_conflict_per_far_gpu(
    monkeypatch: Any,
) -> None:
    """The ring the issue measured (neighbours NV1, the rest SYS, one NUMA column) once took
    ~2,000 union-find steps per GPU pair; bounded work keeps it to a few per pair."""
    from tests import synthetic
    from topoweb.core import hierarchy
    from topoweb.core.formats import parse_text

    topo = parse_text(synthetic.gpu_ring(96), expected="topology")
    assert isinstance(topo, Topology)
    steps = 0
    find = hierarchy._Union.find

    def counted(self: Any, x: str) -> str:
        nonlocal steps
        steps += 1
        return find(self, x)

    monkeypatch.setattr(hierarchy._Union, "find", counted)
    h = recover_hierarchy(topo)

    assert steps <= 4 * 96 * 96
    conflicts = [f for f in h.findings if f.kind == "numa_affinity_conflict"]
    assert len(conflicts) == 96 - 2  # every GPU but GPU0's two NVLink neighbours
    assert conflicts[0].message.startswith("GPU0 and GPU2 both report NUMA affinity 0")
    assert "(GPU0-GPU2 is SYS)" in conflicts[0].message


def _random_nvlink_topology(seed: int) -> Topology:
    rng = random.Random(seed)
    n = rng.randrange(2, 14)
    gpus = tuple(Device(f"GPU{i}", "gpu", i, numa_affinity=str(i % 2)) for i in range(n))
    nics = tuple(Device(f"NIC{i}", "nic", i) for i in range(rng.randrange(0, 3)))
    devices = gpus + nics
    links = []
    for i, a in enumerate(devices):
        for b in devices[i + 1 :]:
            both_gpus = a.kind == b.kind == "gpu"
            nv = both_gpus and rng.random() < rng.choice([0.1, 0.3, 0.9])
            links.append(Link(a.id, b.id, rng.choice(["NV1", "NV2", "NV18"]) if nv else "SYS"))
    return Topology(devices, tuple(links))


def test_nvlink_domains_are_the_groups_nvlink_connects_with_their_pairs_and_bundles() -> None:
    for seed in range(200):
        topo = _random_nvlink_topology(seed)
        # The groups a union of every NVLink pair makes, in GPU order.
        group = {g.id: {g.id} for g in topo.gpus}
        for lnk in topo.gpu_links():
            if lnk.is_nvlink and group[lnk.a] is not group[lnk.b]:
                merged = group[lnk.a] | group[lnk.b]
                for member in merged:
                    group[member] = merged
        expected = []
        for g in topo.gpus:
            members = tuple(m.id for m in topo.gpus if m.id in group[g.id])
            if len(members) >= 2 and members not in expected:
                expected.append(members)
        domains = recover_hierarchy(topo).nvlink_domains
        assert [d.gpus for d in domains] == expected, seed
        for d in domains:
            inside = [lnk for lnk in topo.gpu_links() if lnk.is_nvlink and lnk.a in d.gpus]
            assert d.port_links == max(lnk.nvlinks for lnk in inside), seed
