"""The fleet's gauges on /metrics, as the health sweep publishes them: per server and per GPU,
labelled as dcgm-exporter labels its series (Hostname, gpu, UUID, modelName) so that PromQL can
join them, from real captured reports; and the work queue's size and age."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import FIXTURES, report
from topoweb.analysis.models import Analysis
from topoweb.analysis.services import publish_analysis_counts
from topoweb.fleet.models import Server
from topoweb.health import tasks
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-for-fleet-tests"
# A collector's dry run on a real H200 (one GPU, a VM): its NVML facts carry the GPU's UUID.
DEVICE = "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json"
DGX_A100 = "topo_26_dgx-a100-8gpu-nv12-12mlx5-named-cols.txt"
A100_ALLREDUCE = "nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt"


@pytest.fixture(autouse=True)
def metrics_token(settings: Any) -> None:
    settings.TOPOWEB_METRICS_TOKEN = TOKEN


def scrape(client: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def posted(collector_client: Any, body: dict[str, Any]) -> Server:
    response = collector_client(body["hostname"]).post("/api/v1/reports", body, format="json")
    assert response.status_code == 201, response.content
    server = Server.objects.get(hostname=body["hostname"])
    evaluate_server(server.pk)  # what the worker does after the report
    return server


def test_gpus_are_labelled_as_dcgm_exporter_labels_them(collector_client: Any, client: Any) -> None:
    body = json.loads((FIXTURES / DEVICE).read_text(encoding="utf-8"))
    server = posted(collector_client, body)

    tasks.sweep()
    found = scrape(client)

    host = {"Hostname": "h200-device-lease"}
    assert found["topoweb_gpu_nvlinks_up"] == [
        (
            host
            | {
                "gpu": "0",
                "UUID": "GPU-5165af39-0648-336e-8215-55181701b5b0",
                "modelName": "NVIDIA H200",
            },
            0.0,  # a VM's single GPU: no NVLink
        )
    ]
    assert (host, 1.0) in found["topoweb_server_gpus"]
    assert (host, 0.0) in found["topoweb_server_nics"]
    assert (host, server.last_seen_at.timestamp()) in found[
        "topoweb_server_last_report_timestamp_seconds"
    ]
    assert (host, 0.0) in found["topoweb_server_collector_silent"]
    states = {labels["state"]: value for labels, value in found["topoweb_server_health"]}
    assert sum(states.values()) == 1 and set(states) == {"ok", "warning", "critical", "unknown"}


def test_findings_health_and_bandwidth_expected_beside_measured(
    collector_client: Any, client: Any
) -> None:
    body = report(
        "dgx-a100-m01",
        DGX_A100,
        benchmarks=[{"kind": "nccl-tests", "text": (FIXTURES / A100_ALLREDUCE).read_text()}],
        host={"product_name": "DGX A100"},
    )
    posted(collector_client, body)
    health = Server.objects.get(hostname="dgx-a100-m01").health
    stored = {(f.kind, f.severity) for f in health.server.health_findings.all()}

    tasks.sweep()
    found = scrape(client)

    host = {"Hostname": "dgx-a100-m01"}
    counted = {
        (labels["kind"], labels["severity"]): value
        for labels, value in found.get("topoweb_server_findings", [])
        if labels["Hostname"] == "dgx-a100-m01"
    }
    assert set(counted) == stored and sum(counted.values()) == health.server.health_findings.count()
    state = "critical" if health.critical_count else "warning" if health.warning_count else "ok"
    assert (host | {"state": state}, 1.0) in found["topoweb_server_health"]
    expected = {
        labels["figure"]: value
        for labels, value in found["topoweb_server_bandwidth_expected_bytes_per_second"]
        if labels["Hostname"] == "dgx-a100-m01"
    }
    measured = {
        labels["figure"]: value
        for labels, value in found["topoweb_server_bandwidth_measured_bytes_per_second"]
        if labels["Hostname"] == "dgx-a100-m01"
    }
    rows = [r for r in health.acceptance["rows"] if r["kind"] == "busbw" and r["measured_gbps"]]
    assert rows, "the all_reduce sweep gives a measured collective figure"
    for row in rows:
        assert measured[row["figure"]] == pytest.approx(row["measured_gbps"] * 1e9)
        if row["expected_gbps"]:
            assert expected[row["figure"]] == pytest.approx(row["expected_gbps"] * 1e9)
    # GPU pairs are one series per link class (NV12 here), not one per pair.
    assert {figure for figure in expected if figure.startswith("p2p ")} == {"p2p NV12"}


def test_the_work_queue_publishes_its_size_and_its_oldest_pending_analysis(
    collector_client: Any, client: Any
) -> None:
    collector_client("gpu-q01").post("/api/v1/reports", report("gpu-q01"), format="json")
    pending = Analysis.objects.get(status=Analysis.Status.PENDING)

    publish_analysis_counts()  # what the analysis sweep does every minute
    found = scrape(client)

    assert ({"status": "pending"}, 1.0) in found["topoweb_analyses"]
    ((_, oldest),) = found["topoweb_analyses_oldest_pending_timestamp_seconds"]
    assert oldest == pytest.approx(pending.created_at.timestamp())
    assert "topoweb_analyses_counted_timestamp_seconds" in found
