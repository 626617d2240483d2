"""Hostile and unlucky input, round two (issue 24): every accepted value is checked for shape
and range at ingest (a 400 naming the field), limits are checked on the raw text before any
parsing (413 naming the setting), and nothing accepted breaks a later read."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests import synthetic
from tests.web.conftest import report
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
