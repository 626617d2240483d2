"""Hostile and unlucky input, round two (issue 24): every accepted value is checked for shape
and range at ingest (a 400 naming the field), limits are checked on the raw text before any
parsing (413 naming the setting), and nothing accepted breaks a later read."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests import synthetic
from tests.web.conftest import fixture_text, report
from topoweb.core.formats import ncclxml, topo
from topoweb.fleet.models import Snapshot

pytestmark = pytest.mark.django_db


def refused(response: Any, status: int, *words: str) -> None:
    assert response.status_code == status, response.content[:400]
    message = response.json()["error"]["message"]
    for word in words:
        assert word in message, message


@pytest.fixture
def unparsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any parse of a topology fails the test: what is refused must be refused before it."""

    def never(text: str) -> Any:
        raise AssertionError("parsed before it was refused")

    monkeypatch.setattr(ncclxml, "parse", never)
    monkeypatch.setattr(topo, "parse", never)


def test_an_xml_of_2000_gpus_is_refused_before_it_is_parsed(
    collector_client: Any, person: APIClient, unparsed: None
) -> None:
    text = synthetic.nccl_xml(2000, nvlinks=0)
    client = collector_client("xml-2000")

    refused(
        client.post("/api/v1/reports", report("xml-2000", topo_text=text), format="json"),
        413,
        "2000 GPUs",
        "TOPOWEB_MAX_GPUS",
    )
    body = report("xml-2000", nccl_xml=text)
    refused(client.post("/api/v1/reports", body, format="json"), 413, "nccl_xml", "2000 GPUs")
    refused(person.post("/api/v1/uploads/preview", {"text": text}), 413, "TOPOWEB_MAX_GPUS")
    refused(
        person.post("/api/v1/uploads", {"hostname": "xml-2000", "text": text, "create": True}),
        413,
        "TOPOWEB_MAX_GPUS",
    )
    assert not Snapshot.objects.exists()


def test_a_matrix_of_577_gpus_is_refused_before_it_is_parsed(
    collector_client: Any, settings: Any, unparsed: None
) -> None:
    settings.TOPOWEB_MAX_GPUS = 64  # the same check; a smaller matrix to build
    client = collector_client("big")
    body = report("big", topo_text=synthetic.nvswitch_domain(65))

    refused(client.post("/api/v1/reports", body, format="json"), 413, "65 GPUs")
    body = report("big", topo_text=synthetic.many_nics(8, 700))
    refused(client.post("/api/v1/reports", body, format="json"), 413, "TOPOWEB_MAX_DEVICES")


H200 = "topo_01_h200-8gpu-12nic-numaid.txt"


def h200(old: str, new: str, count: int = 1) -> str:
    text = fixture_text(H200)
    assert old in text
    return text.replace(old, new, count)


def parse_refused(response: Any, line: int, *words: str) -> None:
    assert response.status_code == 400, response.content[:400]
    error = response.json()["error"]
    assert error["code"] == "parse_error" and error["line"] == line, error
    for word in words:
        assert word in error["message"], error["message"]


def test_a_cpu_affinity_past_any_machine_is_refused_naming_the_field_and_line(
    collector_client: Any,
) -> None:
    client = collector_client("aff")
    body = report("aff", topo_text=h200("0-55,112-167", "0-999999999999"))
    parse_refused(client.post("/api/v1/reports", body, format="json"), 3, "CPU Affinity", "GPU0")
    body = report("aff", topo_text=h200("\t0\t\tN/A", "\t99999\t\tN/A"))
    parse_refused(client.post("/api/v1/reports", body, format="json"), 3, "NUMA Affinity")
    assert not Snapshot.objects.exists()


def test_a_stored_affinity_from_before_the_check_does_not_hold_the_gres_export(
    collector_client: Any, reader: APIClient
) -> None:
    client = collector_client("aff")
    assert client.post("/api/v1/reports", report("aff", H200), format="json").status_code == 201
    snapshot = Snapshot.objects.get()
    document = snapshot.document
    for device in document["devices"]:
        if device["kind"] == "gpu":
            device["cpu_affinity"] = "0-999999999999"
    Snapshot.objects.filter(pk=snapshot.pk).update(document=document)

    for fmt in ("gres", "nccl-xml"):
        response = reader.get(f"/api/v1/servers/aff/export/{fmt}/")
        assert response.status_code == 200, (fmt, response.content[:300])
    gres = reader.get("/api/v1/servers/aff/export/gres/").content.decode()
    assert not [line for line in gres.splitlines() if line.startswith("Name=") and "Cores=" in line]


@pytest.mark.parametrize(
    ("old", "new", "line", "words"),
    [
        ("NIC0: mlx5_0", "NIC0: <mlx5_0>", 36, ("NIC legend", "NIC0")),
        ("NIC0: mlx5_0", "NIC0: " + "m" * 10_000, 36, ("10000 characters",)),
        ("NIC11\t", "<b>x</b>\t", 22, ("device",)),
    ],
)
def test_names_and_cells_an_export_cannot_carry_are_refused_at_ingest(
    collector_client: Any, old: str, new: str, line: int, words: tuple[str, ...]
) -> None:
    client = collector_client("names")
    body = report("names", topo_text=h200(old, new, 2))
    parse_refused(client.post("/api/v1/reports", body, format="json"), line, *words)
    assert not Snapshot.objects.exists()


def test_a_bundle_of_999999999_nvlinks_is_refused_naming_the_line(collector_client: Any) -> None:
    text = h200("GPU0\t X \tNV18", "GPU0\t X \tNV999999999")
    text = text.replace("GPU1\tNV18", "GPU1\tNV999999999", 1)
    client = collector_client("nv")
    response = client.post("/api/v1/reports", report("nv", topo_text=text), format="json")
    parse_refused(response, 3, "NV999999999")


def test_an_nccl_xml_whose_attributes_nccl_cannot_read_is_refused_naming_the_line(
    collector_client: Any,
) -> None:
    text = synthetic.nccl_xml(2, nvlinks=1).replace('arch="x86_64"', 'arch="&lt;x86&gt;"')
    client = collector_client("xml")
    parse_refused(
        client.post("/api/v1/reports", report("xml", topo_text=text), format="json"), 2, "arch"
    )
    forged = synthetic.nccl_xml(2, nvlinks=1).replace('count="1"', 'count="999999999"')
    response = client.post("/api/v1/reports", report("xml", topo_text=forged), format="json")
    parse_refused(response, 4, "999999999 NVLinks")


A100_NCCL = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"
SWEEP_ROW = "16384          4096     float     sum      -1    32.48    0.50    0.88"


def nvml(**gpu: Any) -> dict[str, Any]:
    """The collector's NVML facts for the H200 capture, GPU 0 changed as given."""
    gpus = [
        {"index": i, "name": "NVIDIA H200", "memory_total_bytes": 150754820096} for i in range(8)
    ]
    gpus[0] |= gpu
    return {"available": True, "driver_version": "580.159.04", "gpus": gpus}


def nccl_with(old: str, new: str) -> list[dict[str, str]]:
    text = fixture_text(A100_NCCL)
    assert old in text
    return [{"kind": "nccl-tests", "text": text.replace(old, new, 1)}]


BAD_VALUES = {
    "year 0001": ({"captured_at": "0001-01-01T00:00:00Z"}, "captured_at"),
    "no time zone": ({"captured_at": "2026-11-29T10:00:00"}, "captured_at"),
    "2^80 bytes": ({"nvml": nvml(memory_total_bytes=2**80)}, "gpus[0].memory_total_bytes"),
    "negative memory": ({"nvml": nvml(memory_total_bytes=-1)}, "gpus[0].memory_total_bytes"),
    "fractional memory": ({"nvml": nvml(memory_total_bytes=1.5)}, "memory_total_bytes"),
    "duplicate indexes": (
        {"nvml": {"gpus": [{"index": 0}, {"index": 1}, {"index": 1}]}},
        "gpus[2].index",
    ),
    "1000 NVML GPUs": (
        {"nvml": {"gpus": [{"index": i % 8} for i in range(1000)]}},
        "gpus",
    ),
    "an index past the topology": ({"nvml": {"gpus": [{"index": 8}]}}, "gpus[0].index"),
    "PCIe width -16": ({"nvml": nvml(pcie={"current_width": -16})}, "pcie.current_width"),
    "a bus id with markup": ({"nvml": nvml(pci_bus_id="<b>")}, "gpus[0].pci_bus_id"),
    "negative nccl size": (
        {"benchmarks": nccl_with(SWEEP_ROW, "-" + SWEEP_ROW)},
        "size '-16384'",
    ),
    "negative busbw": (
        {"benchmarks": nccl_with(SWEEP_ROW, SWEEP_ROW.replace("0.88", "-0.88"))},
        "busbw '-0.88'",
    ),
    "10,000 rdma_nics": ({"host": {"rdma_nics": [{"device": "mlx5_0"}] * 10_000}}, "rdma_nics"),
    "a 10,000-character product name": ({"host": {"product_name": "x" * 10_000}}, "product_name"),
    "a NUMA node of 10^12": (
        {"host": {"rdma_nics": [{"device": "mlx5_0", "numa_node": 10**12}]}},
        "rdma_nics[0].numa_node",
    ),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_a_value_no_machine_has_is_refused_with_400_naming_the_field(
    collector_client: Any, case: str
) -> None:
    extra, field = BAD_VALUES[case]
    client = collector_client("bad")
    response = client.post("/api/v1/reports", report("bad", H200, **extra), format="json")
    assert response.status_code == 400, (case, response.content[:300])
    assert field in response.content.decode(), (case, response.content[:300])
    assert not Snapshot.objects.exists()


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/", "/api/redoc/"])
def test_the_schema_and_docs_follow_the_apis_read_rule(
    path: str, client: Any, reader: APIClient, settings: Any
) -> None:
    settings.TOPOWEB_PUBLIC_READ = False
    assert client.get(path).status_code in (401, 403)
    assert reader.get(path).status_code == 200
    settings.TOPOWEB_PUBLIC_READ = True
    assert client.get(path).status_code == 200
