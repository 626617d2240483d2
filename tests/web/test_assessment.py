"""A server's assessment: one stored document per server, computed by the worker, that every
page, export and API answer reads. One GPU pair has one expectation wherever it is shown."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.fleet.models import Server
from topoweb.health.services import evaluate_server

pytestmark = pytest.mark.django_db


def _demo_fleet() -> list[Server]:
    call_command("load_demo", stdout=io.StringIO(), stderr=io.StringIO())
    for pk in Analysis.objects.filter(status=Analysis.Status.PENDING).values_list("pk", flat=True):
        analysis_services.run_analysis(pk)
    servers = list(Server.objects.filter(labels__has_key="fixture").order_by("hostname"))
    for server in servers:
        evaluate_server(server.pk)
    return servers


def _finding_expectations(findings: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Each ordered pair's expected GB/s as a below-expected finding states it."""
    out = {}
    for f in findings:
        if f["kind"] != "below_expected_bandwidth" or "directions" not in f["evidence"]:
            continue
        for pair, ev in f["evidence"]["directions"].items():
            a, b = pair.split("->")
            if ev.get("expected_gbps") is not None:
                out[(a, b)] = ev["expected_gbps"]
    return out


def test_every_gpu_pair_of_every_demo_server_has_one_expectation_on_every_page(
    reader: APIClient,
) -> None:
    compared = 0
    for server in _demo_fleet():
        host = server.hostname
        page = reader.get(f"/api/v1/servers/{host}/page/").json()
        acceptance = reader.get(f"/api/v1/servers/{host}/acceptance/").json()
        rows = {
            tuple(r["devices"]): r
            for r in acceptance["rows"]
            if r["kind"] == "p2p" and r["expected_gbps"] is not None
        }
        for pair, expected in _finding_expectations(page["findings"]).items():
            assert rows[pair]["expected_gbps"] == expected, (host, pair, "finding vs acceptance")
            compared += 1
        matrix = page["matrix"]
        ids = matrix["devices"]
        uni = matrix["directions"].get("uni")
        if uni is None:
            continue
        for (a, b), row in rows.items():
            i, j = ids.index(a), ids.index(b)
            if uni["measured_gbps"][i][j] is None:
                continue
            assert uni["expected_gbps"] is not None, (host, "matrix without expectations")
            assert uni["expected_gbps"][i][j] == row["expected_gbps"], (host, a, b, "matrix")
            assert uni["ratio"][i][j] == row["ratio"], (host, a, b, "matrix ratio")
            compared += 1
    # The demo's measured pairs (the GTX rig, the RTX 6000 Ada servers) were all compared.
    assert compared >= 40
