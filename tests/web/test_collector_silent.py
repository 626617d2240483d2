"""collector_silent through the service: the health sweep marks a server whose collector
missed the configured number of reports (judged against a controlled clock), clears it when a
report (even a duplicate) arrives, keeps it through a re-evaluation, and publishes it for
/metrics; the fleet API filters on it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import fixture_text, report
from topoweb.fleet.models import Server, Source
from topoweb.fleet.services import ingest_report
from topoweb.health import tasks
from topoweb.health.models import HealthFinding, ServerHealth
from topoweb.health.services import evaluate_server, sweep_silent_collectors

pytestmark = pytest.mark.django_db

METRICS_TOKEN = "metrics-token-for-silence-tests"
INTERVAL_S = 600.0
MISSED = 3
WINDOW = timedelta(seconds=INTERVAL_S * MISSED)


@pytest.fixture(autouse=True)
def configured(settings: Any) -> None:
    settings.TOPOWEB_COLLECTOR_INTERVAL_S = INTERVAL_S
    settings.TOPOWEB_COLLECTOR_SILENT_AFTER = MISSED
    settings.TOPOWEB_METRICS_TOKEN = METRICS_TOKEN


def reported(collector_client: Any, hostname: str) -> Server:
    response = collector_client(hostname).post("/api/v1/reports", report(hostname), format="json")
    assert response.status_code in (200, 201), response.content
    server = Server.objects.get(hostname=hostname)
    evaluate_server(server.pk)
    return server


def silent_kinds(hostname: str) -> list[str]:
    return list(
        HealthFinding.objects.filter(
            server__hostname=hostname, kind="collector_silent"
        ).values_list("kind", flat=True)
    )


def test_a_server_is_marked_silent_once_it_misses_the_configured_reports(
    collector_client: Any,
) -> None:
    server = reported(collector_client, "gpu-s01")
    last = server.last_seen_at
    warnings = ServerHealth.objects.get(server=server).warning_count

    # The controlled clock: one second short of three missed reports, then past them.
    assert sweep_silent_collectors(last + WINDOW - timedelta(seconds=1)) == ([], [])
    assert silent_kinds("gpu-s01") == []
    assert sweep_silent_collectors(last + WINDOW + timedelta(seconds=1)) == (["gpu-s01"], [])
    assert sweep_silent_collectors(last + WINDOW + timedelta(hours=5)) == ([], [])  # once

    assert silent_kinds("gpu-s01") == ["collector_silent"]
    assert ServerHealth.objects.get(server=server).warning_count == warnings + 1
    finding = HealthFinding.objects.get(server=server, kind="collector_silent")
    assert finding.severity == "warning"
    assert finding.evidence["last_report_at"] == last.isoformat()


def test_a_report_even_a_duplicate_clears_it(collector_client: Any) -> None:
    server = reported(collector_client, "gpu-s02")
    warnings = ServerHealth.objects.get(server=server).warning_count
    Server.objects.filter(pk=server.pk).update(last_seen_at=timezone.now() - WINDOW * 2)
    assert sweep_silent_collectors() == (["gpu-s02"], [])

    again = collector_client("gpu-s02").post("/api/v1/reports", report("gpu-s02"), format="json")

    assert again.status_code == 200  # the same content: a duplicate, no new evaluation
    assert sweep_silent_collectors() == ([], ["gpu-s02"])
    assert silent_kinds("gpu-s02") == []
    assert ServerHealth.objects.get(server=server).warning_count == warnings


def test_a_re_evaluation_keeps_it_while_the_silence_lasts(collector_client: Any) -> None:
    server = reported(collector_client, "gpu-s03")
    Server.objects.filter(pk=server.pk).update(last_seen_at=timezone.now() - WINDOW * 2)
    sweep_silent_collectors()
    warnings = ServerHealth.objects.get(server=server).warning_count

    evaluate_server(server.pk)  # as after staff edit the SKU's expectations

    assert silent_kinds("gpu-s03") == ["collector_silent"]
    assert ServerHealth.objects.get(server=server).warning_count == warnings
    assert sweep_silent_collectors() == ([], [])


def test_servers_only_people_upload_to_are_never_silent() -> None:
    ingest_report(
        hostname="ws-upload",
        topo_text=fixture_text("topo_01_h200-8gpu-12nic-numaid.txt"),
        captured_at=timezone.now(),
        source=Source.UPLOAD,
    )
    Server.objects.filter(hostname="ws-upload").update(last_seen_at=timezone.now() - WINDOW * 10)

    assert sweep_silent_collectors() == ([], [])


def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_the_health_sweep_marks_it_publishes_the_metric_and_the_fleet_list_filters_on_it(
    collector_client: Any, client: Any, reader: Any
) -> None:
    quiet = reported(collector_client, "gpu-s04")
    reported(collector_client, "gpu-s05")
    Server.objects.filter(pk=quiet.pk).update(last_seen_at=timezone.now() - WINDOW * 2)

    tasks.sweep()  # what beat runs every TOPOWEB_SWEEP_EVERY_S

    metrics = scrape(client)
    assert metrics[("topoweb_server_collector_silent", (("Hostname", "gpu-s04"),))] == 1
    assert metrics[("topoweb_server_collector_silent", (("Hostname", "gpu-s05"),))] == 0
    listed = reader.get("/api/v1/servers/", {"finding": "collector_silent"}).json()
    assert [row["hostname"] for row in listed["results"]] == ["gpu-s04"]
    assert listed["results"][0]["health"] == "warning"
