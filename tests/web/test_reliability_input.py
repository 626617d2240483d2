"""Structured facts and times at the ingest boundary (issue 15, holes 4 and 6): `nvml` and
`host` are checked against their shape (400 naming the field and the path inside it), health
judges a server whose stored facts it cannot read on everything else, and a capture time from
the future is refused instead of pinning the server's current topology."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import FIXTURES, report
from topoweb.fleet.models import Server, Snapshot
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
V100 = "topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt"
DRY_RUN = "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json"


def real_body() -> dict[str, Any]:
    """The body a real collector built on a leased H200 (its nvml and host facts included)."""
    body: dict[str, Any] = json.loads((FIXTURES / DRY_RUN).read_text(encoding="utf-8"))
    return body


def post(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/reports", body, format="json")


def unreadable_nvml(response: Any, *words: str) -> None:
    """Refused by the NVML facts reader, which names the place inside them."""
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert error["message"].startswith("NVML facts: ")
    for word in words:
        assert word in error["message"]


def invalid(response: Any, field: str, *words: str) -> None:
    assert response.status_code == 400, response.content[:300]
    details = response.json()["error"]["details"]
    assert list(details) == [field]
    for word in words:
        assert word in details[field][0]


def test_a_real_collector_body_with_its_nvml_and_host_facts_is_accepted(
    collector_client: Any,
) -> None:
    body = real_body()

    assert post(collector_client(body["hostname"]), body).status_code == 201


def test_nvml_facts_without_a_gpu_list_answer_400_naming_them(collector_client: Any) -> None:
    client = collector_client("gpu-a01")

    unreadable_nvml(post(client, report("gpu-a01", H200, nvml={"foo": 1})), "expected {'gpus'")
    unreadable_nvml(
        post(client, report("gpu-a01", H200, nvml={"gpus": {"0": {}}})), "expected {'gpus'"
    )
    assert not Snapshot.objects.exists()


def test_a_wrong_value_deep_in_the_nvml_facts_is_named_by_its_path(collector_client: Any) -> None:
    body = real_body()
    wrong = copy.deepcopy(body)
    wrong["nvml"]["gpus"][0]["pcie"]["max_width"] = [16]
    links = copy.deepcopy(body)
    links["nvml"]["gpus"][0]["nvlinks"] = [{"link": 0, "state": {"up": True}}]
    client = collector_client(body["hostname"])

    unreadable_nvml(post(client, wrong), "gpus[0].pcie.max_width", "expected an integer")
    unreadable_nvml(post(client, links), "gpus[0].nvlinks[0].state")
    assert not Snapshot.objects.exists()


def test_values_the_driver_could_not_give_are_accepted_as_the_collector_writes_them(
    collector_client: Any,
) -> None:
    body = real_body()
    gpu = body["nvml"]["gpus"][0]
    gpu["pcie"]["max_width"] = "error: Unknown Error"
    gpu["nvlinks"] = "unsupported"
    gpu["name"] = None
    body["nvml"]["new_key_from_a_newer_collector"] = {"anything": [1, 2]}

    assert post(collector_client(body["hostname"]), body).status_code == 201


def test_host_facts_of_the_wrong_shape_answer_400_naming_the_field(collector_client: Any) -> None:
    body = real_body()
    body["host"]["rdma_nics"] = [{"device": "mlx5_0", "numa_node": "zero"}]
    product = real_body()
    product["host"]["product_name"] = {"name": "DGX"}
    client = collector_client(body["hostname"])

    invalid(post(client, body), "host", "rdma_nics[0].numa_node")
    invalid(post(client, product), "host", "product_name", "expected a string")


def test_nvml_facts_stored_before_the_check_do_not_break_health_or_the_acceptance_report(
    collector_client: Any, reader: APIClient
) -> None:
    assert post(collector_client("gpu-a01"), report("gpu-a01", H200)).status_code == 201
    server = Server.objects.get(hostname="gpu-a01")
    Snapshot.objects.filter(pk=server.latest_snapshot_id).update(nvml={"foo": 1})

    health = evaluate_server(server.pk)
    response = reader.get("/api/v1/servers/gpu-a01/acceptance")

    assert health is not None
    assert health.acceptance["unread_facts"] == [
        "NVML facts not read: NVML facts: expected {'gpus': [{...}, ...]}"
    ]
    assert response.status_code == 200
    assert response.json()["verdict"] in ("pass", "fail", "incomplete")


def test_a_capture_from_year_9999_is_refused_and_later_genuine_reports_become_current(
    collector_client: Any,
) -> None:
    client = collector_client("gpu-a01")
    future = report("gpu-a01", H200, captured_at="9999-01-01T00:00:00Z")

    refused = post(client, future)
    genuine = post(client, report("gpu-a01", V100))

    invalid(refused, "captured_at", "TOPOWEB_MAX_CLOCK_SKEW_S")
    assert genuine.status_code == 201
    assert Server.objects.get().latest_snapshot_id == genuine.json()["id"]


def test_a_clock_a_minute_ahead_is_within_the_allowed_skew(collector_client: Any) -> None:
    ahead = (timezone.now() + timedelta(minutes=1)).isoformat()

    assert (
        post(collector_client("gpu-a01"), report("gpu-a01", H200, captured_at=ahead)).status_code
        == 201
    )
