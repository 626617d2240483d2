"""Cytoscape elements and the class matrix for the browser."""

from __future__ import annotations

from tests.core import topologies as T
from topoweb.core.export import cytoscape_elements, matrix_view


def _by_id(elements: list[dict]) -> dict[str, dict]:  # type: ignore[type-arg]
    return {e["data"]["id"]: e["data"] for e in elements}


def test_an_nvswitch_box_gets_one_fabric_node_and_an_edge_per_gpu_not_per_pair() -> None:
    elements = cytoscape_elements(T.dgx_a100_nv12())
    data = _by_id(elements)
    nv_edges = [e["data"] for e in elements if e["data"].get("link_class") == "NV12"]
    assert data["nvswitch0"]["kind"] == "nvswitch"
    assert len(nv_edges) == 8
    assert {e["target"] for e in nv_edges} == {"nvswitch0"}
    assert nv_edges[0]["nvlinks"] == 12
    assert nv_edges[0]["bandwidth_gbps_per_direction"] == 240.0


def test_gpu_and_nic_nodes_carry_numa_cpu_and_nic_name_inside_their_numa_compound() -> None:
    data = _by_id(cytoscape_elements(T.h200_nv18_12nic()))
    gpu4 = data["GPU4"]
    assert (gpu4["kind"], gpu4["numa"], gpu4["cpu_affinity"], gpu4["parent"]) == (
        "gpu",
        "1",
        "56-111,168-223",
        "numa1",
    )
    assert data["NIC3"]["nic_name"] == "mlx5_3"
    assert data["NIC3"]["label"] == "mlx5_3"
    assert data["numa1"]["label"] == "NUMA node 1"


def test_a_point_to_point_mesh_gets_pair_edges_with_their_link_counts() -> None:
    elements = cytoscape_elements(T.dgx1_v100_mesh())
    nv = {
        (e["data"]["source"], e["data"]["target"]): e["data"]
        for e in elements
        if e["data"].get("nvlinks")
    }
    assert len(nv) == 16
    assert nv[("GPU0", "GPU1")]["link_class"] == "NV2"
    assert nv[("GPU0", "GPU3")]["bandwidth_gbps_per_direction"] == 20.0


def test_every_edge_says_its_class_bandwidth_per_direction_and_latency() -> None:
    for build in (T.l40s_4gpu, T.gtx1070_7gpu, T.rtx3090_nv4_pair):
        for e in cytoscape_elements(build()):
            if e["group"] == "edges":
                assert {"link_class", "bandwidth_gbps_per_direction", "latency_us"} <= set(
                    e["data"]
                )


def test_pcie_edges_follow_the_recovered_switches() -> None:
    data = _by_id(cytoscape_elements(T.gtx1070_7gpu()))
    assert data["pcie:GPU4"]["target"] == "sw1"
    assert data["pcie:sw1"]["target"] == "hb0"


def test_matrix_view_lists_every_class_with_x_on_the_diagonal() -> None:
    view = matrix_view(T.l40s_4gpu())
    assert view["devices"][:2] == ["GPU0", "GPU1"]
    assert view["classes"][0] == ["X", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert view["classes"][4][5] == "PIX"


def test_the_graph_prices_links_for_the_reported_gpu_and_says_where_its_figures_come_from() -> None:
    """One number per fact: a PCIe-only server's links are its reported GPU's generation's
    figures (as its analysis and findings use), not a guess from the matrix alone."""
    from topoweb.core.catalogue import resolve_hardware
    from topoweb.core.export import graph_document

    topo = T.l40s_4gpu()
    guessed = graph_document(topo)
    told = graph_document(topo, gpu_model="Tesla P40")
    pascal = resolve_hardware(topo, "Tesla P40")
    assert told["figures"] == {"generation": "Pascal", "basis": pascal.assumption}
    assert "'Tesla P40' is Pascal" in told["figures"]["basis"]
    assert guessed["figures"]["basis"].startswith("no GPU name given")
    pcie = [e["data"] for e in told["elements"] if e["data"].get("link_class") == "PCIe"]
    assert pcie and {e["bandwidth_gbps_per_direction"] for e in pcie} == {
        round(pascal.pcie_gbps, 2)
    }
    sys = [e["data"] for e in told["elements"] if e["data"].get("link_class") == "SYS"]
    assert sys and all(pascal.socket_link in e["label"] for e in sys)


def test_the_graph_prices_pcie_on_the_links_nvml_reports_as_the_expectations_do() -> None:
    """One number per fact: where NVML reports the GPUs' links (Gen3 x8 here), the graph's
    PCIe edges are priced on them and say so, as the server's health expectations are."""
    from topoweb.core.catalogue import resolve_hardware
    from topoweb.core.export import graph_document

    topo = T.l40s_4gpu()
    assumed = graph_document(topo, gpu_model="NVIDIA L40S")
    reported = graph_document(topo, gpu_model="NVIDIA L40S", pcie=(3, 8))
    on_its_links = resolve_hardware(topo, "NVIDIA L40S", pcie_gen=3, pcie_width=8)
    assert "assumed from the generation" in assumed["figures"]["basis"]
    assert "assumed from the generation" not in reported["figures"]["basis"]
    assert reported["figures"]["basis"].endswith("PCIe Gen3 x8 as NVML reports the GPUs' links")
    pcie = [e["data"] for e in reported["elements"] if e["data"].get("link_class") == "PCIe"]
    assert pcie and {e["bandwidth_gbps_per_direction"] for e in pcie} == {
        round(on_its_links.pcie_gbps, 2)
    }
    before = [e["data"] for e in assumed["elements"] if e["data"].get("link_class") == "PCIe"]
    assert {e["bandwidth_gbps_per_direction"] for e in before} != {
        e["bandwidth_gbps_per_direction"] for e in pcie
    }


def test_an_nvswitch_fabric_read_from_the_bundles_says_how_it_was_inferred() -> None:
    from topoweb.core.export import graph_document

    nodes = [e["data"] for e in graph_document(T.h200_nv18_12nic())["elements"]]
    (fabric,) = [d for d in nodes if d.get("kind") == "nvswitch"]
    assert fabric["inferred"].startswith("every pair shows NV18 and 18 x 7 peers exceeds")
    assert not [d for d in nodes if d.get("kind") == "gpu" and "inferred" in d]
