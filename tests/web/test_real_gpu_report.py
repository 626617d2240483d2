"""A report the collector produced on a real GPU machine (a leased H200, see
tests/fixtures/INDEX.tsv) goes through ingest as any collector's report does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.web.conftest import FIXTURES
from topoweb.fleet.models import Snapshot

REAL_REPORT = "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json"

pytestmark = pytest.mark.django_db


def test_the_real_h200_collector_report_is_stored_with_its_nvml_facts(
    collector_client: Any,
) -> None:
    body = json.loads((FIXTURES / REAL_REPORT).read_text(encoding="utf-8"))
    client = collector_client(body["hostname"])

    response = client.post("/api/v1/reports", body, format="json")

    assert response.status_code == 201, response.content
    snapshot = Snapshot.objects.get()
    assert (snapshot.gpu_count, snapshot.nic_count) == (1, 0)
    assert snapshot.gpu_model == "NVIDIA H200"
    assert snapshot.has_nvlink is False
    assert snapshot.nvml["gpus"][0]["pcie"]["current_generation"] == 5
    # The terminal's underline escapes around the header are not part of any device name.
    assert "\x1b" not in json.dumps(snapshot.document, ensure_ascii=False)
    again = client.post("/api/v1/reports", body, format="json")
    assert again.status_code == 200
