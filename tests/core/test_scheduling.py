"""Slurm gres.conf Links= as Slurm's NVML autodetection counts them, topology.conf blocks,
Kubernetes labels, and the merge of a topo -m capture with an NCCL XML of the same server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from topoweb.core.ecosystem import render_export
from topoweb.core.formats import ncclxml, parse_text
from topoweb.core.health import SOURCES_DISAGREE, check_health
from topoweb.core.merge import merge_sources
from topoweb.core.model import Link, Topology
from topoweb.core.scheduling import (
    gres_conf,
    hostlist,
    kubectl_label_lines,
    node_labels,
    slurm_links,
    topology_conf,
)

from .topo_fixtures import FIXTURES, fixture_text


def topo(prefix: str) -> Topology:
    parsed = parse_text(fixture_text(prefix))
    assert isinstance(parsed, Topology)
    return parsed


def links_lines(text: str) -> list[str]:
    return [
        line.rsplit("Links=", 1)[1]
        for line in text.splitlines()
        if "Links=" in line and not line.startswith("#")
    ]


# Slurm's _nvml_get_nvlink_info counts, per GPU, active NVLink lanes whose remote PCI bus id
# is another GPU's; an NVSwitch's bus id matches no GPU. Expected rows written from the
# fixtures' own cells: an H100 HGX (NV18 through NVSwitch) counts nothing but -1 for itself.
def test_an_8x_h100_nvswitch_box_links_only_itself() -> None:
    rows = links_lines(gres_conf(topo("topo_22")))
    assert rows == [",".join("-1" if j == i else "0" for j in range(8)) for i in range(8)]


@pytest.mark.parametrize("prefix", ["topo_12", "topo_07"])
def test_a_dgx1v_counts_its_nv1_and_nv2_bundles_lane_by_lane(prefix: str) -> None:
    t = topo(prefix)
    links = slurm_links(t)
    for i, a in enumerate(t.gpus):
        for j, b in enumerate(t.gpus):
            assert links[i][j] == (-1 if i == j else t.link(a.id, b.id).nvlinks)
    per_gpu = {sum(x for x in row if x > 0) for row in links}
    assert per_gpu == ({6} if prefix == "topo_12" else {4})  # V100 NV1/NV2 mesh; P100 NV1


def test_a_pcie_box_links_nothing() -> None:
    text = gres_conf(topo("topo_09"))
    assert links_lines(text) == ["-1,0,0,0", "0,-1,0,0", "0,0,-1,0", "0,0,0,-1"]
    assert "File=/dev/nvidia2 Cores=32-63 Links=" in text


def test_nvml_lanes_are_counted_exactly_as_slurm_does() -> None:
    t = topo("topo_17")  # two RTX 3090 with an NV4 bridge
    lane = {"state": "active", "remote_pci_bus_id": "00000000:21:00.0"}
    nvml = {
        "available": True,
        "gpus": [
            {"pci_bus_id": "00000000:01:00.0", "nvlinks": [lane] * 4 + [{"state": "inactive"}],
             "minor_number": 3},
            {"pci_bus_id": "00000000:21:00.0",
             "nvlinks": [{"state": "active", "remote_pci_bus_id": "00000000:01:00.0"}] * 3},
        ],
    }  # fmt: skip
    assert slurm_links(t, nvml) == [[-1, 4], [3, -1]]  # a lane down shows, unlike the matrix
    assert "File=/dev/nvidia3 " in gres_conf(t, nvml=nvml, hostname="ws1")


def test_links_from_an_xml_follow_its_nvlink_targets() -> None:
    t = ncclxml.parse(
        (FIXTURES / "ncclxml_01_azure-ncv4-a100pcie-4gpu-nvlink-pairs-topofile.xml").read_text()
    )
    assert slurm_links(t)[0] == [-1, 12, 0, 0]
    h100 = ncclxml.parse(
        (FIXTURES / "ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml").read_text()
    )
    assert slurm_links(h100)[3] == [0, 0, 0, -1, 0, 0, 0, 0]


def test_hostlists_and_blocks_for_nvlink_domains_spanning_servers() -> None:
    assert hostlist(["gb01", "gb02", "gb03", "gb07", "login"]) == "login,gb[01-03,07]"
    text = topology_conf({"rackA.1": ["gb02", "gb01"], "rackB.1": ["gb03", "gb04"], "x": ["solo"]})
    assert "BlockName=block1 Nodes=gb[01-02]" in text
    assert "BlockName=block2 Nodes=gb[03-04]" in text and "solo" not in text
    assert text.rstrip().endswith("BlockSizes=2")


def test_labels_say_the_class_fabric_domain_and_numa_layout() -> None:
    labels = node_labels(topo("topo_22"), fingerprint="f" * 64, gpu_model="NVIDIA H100 80GB HBM3")
    assert labels["topoweb.io/nvlink.fabric"] == "nvswitch"
    assert labels["topoweb.io/nvlink.domain-size"] == "8"
    assert labels["topoweb.io/numa.gpus-per-node"] == "4"
    assert labels["topoweb.io/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["topoweb.io/topology-class"] == "f" * 16
    line = kubectl_label_lines("gpu-a01", labels)
    assert line.startswith("kubectl label node gpu-a01 --overwrite topoweb.io/")
    assert "topoweb.io/nvlink.fabric=nvswitch" in line


def test_a_matrix_and_its_xml_agree_on_a_consistent_server() -> None:
    xml = ncclxml.parse(
        (FIXTURES / "ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml").read_text()
    )
    merged = merge_sources(xml_as_matrix(xml), xml)
    assert merged.details["contradictions"] == []
    assert merged.details["devices"]["GPU0"]["bus_id"] == "0000:a4:00.0"
    assert not [f for f in check_health(merged) if f.kind == SOURCES_DISAGREE]


def xml_as_matrix(xml: Topology) -> Topology:
    """The matrix nvidia-smi would print for the XML's machine (no details)."""
    return Topology(xml.devices, xml.links)


def test_contradictions_between_the_sources_become_a_finding() -> None:
    xml = ncclxml.parse(
        (FIXTURES / "ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml").read_text()
    )
    matrix = xml_as_matrix(xml)
    links = tuple(
        Link(lnk.a, lnk.b, "NV12") if {lnk.a, lnk.b} == {"GPU0", "GPU1"} else lnk
        for lnk in matrix.links
    )
    merged = merge_sources(Topology(matrix.devices, links), xml)
    (c,) = merged.details["contradictions"]
    assert c["devices"] == ["GPU0", "GPU1"] and (c["matrix"], c["xml"]) == ("NV12", "NV18")
    (finding,) = [f for f in check_health(merged) if f.kind == SOURCES_DISAGREE]
    assert finding.devices == ("GPU0", "GPU1") and "NV12 in topo -m but NV18" in finding.message


def test_a_truncated_xml_against_a_full_matrix_names_what_it_lacks() -> None:
    xml = ncclxml.parse(
        (FIXTURES / "ncclxml_05_h200-baremetal-dump-hosthash-pcie-switch-TRUNCATED.xml").read_text()
    )
    merged = merge_sources(topo("topo_01"), xml)  # an H200 box: 8 GPUs, 12 NICs
    messages = [c["message"] for c in merged.details["contradictions"]]
    assert "topo -m shows 8 GPUs, the NCCL XML 3" in messages
    assert any("NVIDIA" not in m and "mlx5_" in m for m in messages)
    assert any(w.startswith("NCCL XML: the XML is truncated") for w in merged.warnings)


def test_the_merged_topology_exports_the_xml_it_was_given() -> None:
    path = FIXTURES / "ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml"
    xml = ncclxml.parse(path.read_text())
    out = render_export(merge_sources(xml_as_matrix(xml), xml), "nccl-xml", name="h100-vsi")
    assert out.body == path.read_text() and out.filename == "h100-vsi-nccl-topo.xml"


def test_json_labels_export_is_a_map() -> None:
    out = render_export(topo("topo_09"), "k8s-labels", name="ws")
    assert json.loads(out.body)["topoweb.io/nvlink.fabric"] == "none"


@pytest.mark.parametrize("fmt", ["nccl-xml", "gres", "k8s-labels", "kubectl"])
def test_the_cli_writes_each_export_to_stdout(fmt: str) -> None:
    path = next(FIXTURES.glob("topo_22_*"))
    done = subprocess.run(
        [sys.executable, "-m", "topoweb.core.cli", "export", str(path), "--format", fmt],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    if fmt == "nccl-xml":
        assert "placeholders" in done.stderr  # no bus ids in a topo -m file: said, not hidden
        assert ncclxml.parse(done.stdout).gpus


def test_cores_fold_smt_siblings_only_where_the_lists_show_them() -> None:
    # H100 HGX on two EPYC 9654 (96 cores, 192 threads each): GPU0 lists 0-95,192-287.
    h100 = gres_conf(topo("topo_22"))
    assert "File=/dev/nvidia0 Cores=0-95 Links=" in h100
    assert "File=/dev/nvidia4 Cores=96-191 Links=" in h100
    assert "siblings (CPU c and c+N/2) folded" in h100
    # A KVM guest whose one GPU is near all 252 vCPUs: nothing says they are threads.
    vm = gres_conf(topo("topo_25"))
    assert "Cores=0-251 Links=" in vm and "as nvidia-smi lists them" in vm
