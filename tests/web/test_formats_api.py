"""The ecosystem's formats through HTTP: NCCL topology XML beside topo -m (merged, and
contradictions as a finding), nvbandwidth as a benchmark, and the exports for NCCL, Slurm and
Kubernetes per server, per topology class and for the fleet."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.web.conftest import fixture_text, report
from topoweb.core.formats import ncclxml
from topoweb.core.model import Topology
from topoweb.fleet.models import Benchmark, Snapshot
from topoweb.health.models import HealthFinding
from topoweb.health.selectors import health_inputs
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
H200_DUMP = "ncclxml_05_h200-baremetal-dump-hosthash-pcie-switch-TRUNCATED.xml"
H100_VSI = "ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml"
A6000_NVB = "nvbandwidth_01_a6000-6gpu-v0.8-d2d-read-ce-elided-header.txt"
TWO_GPU_NVB = "nvbandwidth_02_2gpu-v0.10-h2d-d2h-d2d-read-no-header.txt"
RTX6000 = "topo_09_rtx6000ada-4gpu-4nic-node-sys-numaid.txt"


def topo_m_text(topo: Topology) -> str:
    """What nvidia-smi topo -m prints for a topology (tab-separated, NIC legend)."""
    ids = [d.id for d in topo.devices]
    lines = ["\t" + "\t".join(ids) + "\tCPU Affinity\tNUMA Affinity"]
    for d in topo.devices:
        cells = [topo.link_class(d.id, o) for o in ids]
        tail = [d.cpu_affinity or "", d.numa_affinity or ""] if d.kind == "gpu" else []
        lines.append("\t".join([d.id, *(" X " if c == "X" else c for c in cells), *tail]))
    lines += ["", "NIC Legend:", ""] + [f"  {n.id}: {n.nic_name}" for n in topo.nics]
    return "\n".join(lines) + "\n"


def upload(client: APIClient, hostname: str, text: str) -> Any:
    f = io.BytesIO(text.encode())
    f.name = "upload.txt"
    return client.post("/api/v1/uploads", {"hostname": hostname, "file": f, "create": True})


def test_a_report_with_a_matching_xml_dump_stores_one_merged_topology(
    collector_client: Any, reader: APIClient
) -> None:
    xml_text = fixture_text(H100_VSI)
    xml = ncclxml.parse(xml_text)
    body = report("vsi-1", nccl_xml=xml_text) | {"topo_text": topo_m_text(xml)}
    response = collector_client("vsi-1").post("/api/v1/reports", body, format="json")
    assert response.status_code == 201, response.json()
    snapshot = Snapshot.objects.get()
    assert snapshot.nccl_xml == xml_text
    details = snapshot.document["details"]
    assert details["contradictions"] == []
    assert details["devices"]["GPU0"]["pcie_path"][0]["link_speed_gts"] == 2.5
    exported = reader.get("/api/v1/servers/vsi-1/export/nccl-xml")
    assert exported.status_code == 200
    assert exported.content.decode() == xml_text  # the real tree, real bus ids
    assert exported["Content-Disposition"] == 'attachment; filename="vsi-1-nccl-topo.xml"'


def test_an_xml_that_contradicts_the_matrix_becomes_a_finding(person: APIClient) -> None:
    assert upload(person, "h200-a", fixture_text(H200)).status_code == 201
    response = upload(person, "h200-a", fixture_text(H200_DUMP))
    assert response.status_code == 201 and response.json()["kind"] == "topology"
    latest = Snapshot.objects.order_by("-id").first()
    assert latest is not None and latest.raw_text == fixture_text(H200)
    assert latest.nccl_xml == fixture_text(H200_DUMP)
    evaluate_server(latest.server_id)
    (finding,) = HealthFinding.objects.filter(kind="sources_disagree")
    assert "topo -m shows 8 GPUs, the NCCL XML 3" in finding.message


def test_an_xml_alone_is_a_topology_source(person: APIClient, reader: APIClient) -> None:
    assert upload(person, "vsi-2", fixture_text(H100_VSI)).status_code == 201
    snapshot = Snapshot.objects.get()
    assert (snapshot.gpu_count, snapshot.nic_count, snapshot.nvlink_summary) == (8, 8, "NV18 x28")
    gres = reader.get("/api/v1/servers/vsi-2/export/gres").content.decode()
    assert "NodeName=" not in gres or "vsi-2" in gres
    assert [ln.rsplit("Links=", 1)[1] for ln in gres.splitlines() if ln.startswith("Name=gpu")][
        0
    ] == "-1,0,0,0,0,0,0,0"


def test_a_broken_xml_in_a_report_is_refused_with_its_line(collector_client: Any) -> None:
    body = report("bad-xml", nccl_xml='<system version="1">\n  <cpu>\n  </pci>\n</system>\n')
    response = collector_client("bad-xml").post("/api/v1/reports", body, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["line"] == 3 and error["message"].startswith("nccl_xml: not well-formed XML")
    assert not Snapshot.objects.exists()


def test_nvbandwidth_uploads_as_a_benchmark_that_health_reads_as_p2p(person: APIClient) -> None:
    upload(person, "ws-ada", fixture_text(RTX6000))
    response = upload(person, "ws-two", fixture_text(TWO_GPU_NVB))
    assert response.status_code == 201 and response.json()["kind"] == "nvbandwidth"
    bench = Benchmark.objects.get(kind="nvbandwidth")
    assert bench.gpu_count == 2 and bench.document["kind"] == "nvbandwidth"
    p2p = bench.to_domain()
    assert p2p.matrices["unidirectional_p2p_enabled_gbps"][1][0] == 276.07


def test_health_judges_a_server_by_its_nvbandwidth_matrix(person: APIClient) -> None:
    upload(
        person,
        "ws-3090",
        fixture_text("topo_17_rtx3090-2gpu-nv4-bridge-numaid-trailing-prompt.txt"),
    )
    upload(person, "ws-3090", fixture_text(TWO_GPU_NVB))
    server = Snapshot.objects.get().server
    inputs = health_inputs(server)
    assert inputs is not None and inputs.p2p is not None
    assert inputs.p2p.matrices["unidirectional_p2p_enabled_gbps"][0][1] == 276.19
    health = evaluate_server(server.pk)
    assert health is not None
    p2p_rows = {r["figure"]: r for r in health.acceptance["rows"] if r["kind"] == "p2p"}
    assert p2p_rows["p2p GPU0->GPU1"]["measured_gbps"] == 276.19


def test_class_exports_say_what_they_assume(person: APIClient, reader: APIClient) -> None:
    upload(person, "ws-ada", fixture_text(RTX6000))
    fingerprint = Snapshot.objects.get().topology_class.fingerprint
    response = reader.get(f"/api/v1/topology-classes/{fingerprint}/export/nccl-xml")
    assert response.status_code == 200
    assert "placeholders" in response["X-Topoweb-Assumptions"]
    assert ncclxml.parse(response.content.decode()).gpus
    labels = reader.get(f"/api/v1/topology-classes/{fingerprint}/export/k8s-labels").json()
    assert labels["topoweb.io/topology-class"] == fingerprint[:16]
    kubectl = reader.get("/api/v1/servers/ws-ada/export/kubectl").content.decode()
    assert kubectl.startswith("kubectl label node ws-ada --overwrite ")


def test_an_unknown_export_is_a_json_404(person: APIClient, reader: APIClient) -> None:
    upload(person, "ws-ada", fixture_text(RTX6000))
    response = reader.get("/api/v1/servers/ws-ada/export/pdf")
    assert response.status_code == 404 and "nccl-xml" in response.json()["error"]["message"]


def test_topology_conf_blocks_servers_sharing_an_nvlink_clique(
    collector_client: Any, reader: APIClient
) -> None:
    def nvml(clique: int) -> dict[str, Any]:
        fabric = {"state": "completed", "status": 0, "clique_id": clique,
                  "cluster_uuid": "5b0f3c52-9a1e-4c55-8d1e-0c5a3f9e7b21"}  # fmt: skip
        return {"available": True, "gpus": [{"index": i, "fabric": fabric} for i in range(4)]}

    for host, clique in (("gb-01", 1), ("gb-02", 1), ("gb-03", 2), ("gb-04", 2)):
        body = report(host, RTX6000, nvml=nvml(clique))
        assert (
            collector_client(host).post("/api/v1/reports", body, format="json").status_code == 201
        )
    text = reader.get("/api/v1/exports/topology.conf").content.decode()
    assert "BlockName=block1 Nodes=gb-[01-02]" in text
    assert "BlockName=block2 Nodes=gb-[03-04]" in text


def test_the_server_page_links_its_exports(person: APIClient) -> None:
    upload(person, "ws-ada", fixture_text(RTX6000))
    html = person.get("/servers/ws-ada/").content.decode()
    assert 'href="/api/v1/servers/ws-ada/export/gres/"' in html
