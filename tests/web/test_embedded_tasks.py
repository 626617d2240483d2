"""The embedded default (no broker: Celery eager) runs tasks off the request, in a background
thread of the web process, so an upload answers at once there too (issue 24 item 11)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.test import override_settings

from tests.web.conftest import collector_client_for, report
from topoweb.config.celery_app import wait_for_background
from topoweb.health import services as health_services
from topoweb.health.models import ServerHealth


@pytest.mark.django_db(transaction=True)
def test_without_a_broker_a_report_answers_before_its_evaluation_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    started = threading.Event()
    real = health_services.evaluate_server

    def slow_evaluation(server_id: int) -> Any:
        started.set()
        assert release.wait(30), "the test never let the evaluation finish"
        return real(server_id)

    monkeypatch.setattr(health_services, "evaluate_server", slow_evaluation)
    client = collector_client_for("embedded-01")
    with override_settings(CELERY_TASK_ALWAYS_EAGER=True):
        response = client.post("/api/v1/reports", report("embedded-01"), format="json")
        # Answered while the evaluation it asked for is still running (or not yet started).
        assert response.status_code == 201
        assert not ServerHealth.objects.exists()
        assert started.wait(30)
        release.set()
        assert wait_for_background(60)
    assert ServerHealth.objects.filter(server__hostname="embedded-01").exists()
