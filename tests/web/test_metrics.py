"""/metrics in Prometheus text format: ingest outcomes, analyses by status (as the sweep
publishes them), request latency."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import report
from topoweb.analysis.services import publish_analysis_counts

pytestmark = pytest.mark.django_db


TOKEN = "metrics-token-for-tests"


@pytest.fixture(autouse=True)
def metrics_token(settings: Any) -> None:
    settings.TOPOWEB_METRICS_TOKEN = TOKEN


def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_healthz_and_readyz_answer_ok_when_the_database_and_redis_do(client: Any) -> None:
    for probe in ("/healthz", "/readyz"):
        response = client.get(probe)

        assert (response.status_code, response.json()) == (200, {"status": "ok"}), probe


def test_healthz_does_no_io_and_readyz_names_what_is_down(
    client: Any, settings: Any, django_assert_num_queries: Any
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    with django_assert_num_queries(0):
        assert client.get("/healthz").status_code == 200

    response = client.get("/readyz")

    assert response.status_code == 503
    assert list(response.json()["problems"]) == ["redis"]


def test_metrics_count_ingest_outcomes_and_analyses(client: Any, collector_client: Any) -> None:
    before = scrape(client)
    api = collector_client("gpu-a01")
    api.post("/api/v1/reports", report("gpu-a01"), format="json")
    api.post("/api/v1/reports", report("gpu-a01"), format="json")
    api.post("/api/v1/reports", report("gpu-b01"), format="json")  # another host: rejected
    publish_analysis_counts()  # what the beat's analysis sweep does every minute
    after = scrape(client)

    def delta(outcome: str) -> float:
        key = ("topoweb_reports_total", (("outcome", outcome),))
        return after[key] - before[key]

    assert (delta("new"), delta("duplicate"), delta("rejected")) == (1, 1, 1)
    assert after[("topoweb_analyses", (("status", "pending"),))] == 1
    assert after[("topoweb_analyses", (("status", "done"),))] == 0
    latency = (
        "django_http_requests_latency_seconds_by_view_method_count",
        (("method", "POST"), ("view", "api:reports")),
    )
    assert after[latency] - before.get(latency, 0) == 3
    by_status = {
        status: after[key] - before.get(key, 0)
        for status in ("200", "201", "403")
        for key in [
            (
                "django_http_responses_total_by_status_view_method_total",
                (("method", "POST"), ("status", status), ("view", "api:reports")),
            )
        ]
    }
    assert by_status == {"200": 1, "201": 1, "403": 1}
