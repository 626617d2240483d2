"""Background analyses on a real Celery worker (Redis broker): computed after the ingest
commits, recovered by the sweep when the broker was down or a worker died, never duplicated."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from tests.web.conftest import keep_tasks_here, report, wait_for
from topoweb.analysis import services
from topoweb.analysis.models import Analysis
from topoweb.analysis.tasks import run_analysis, sweep
from topoweb.fleet.models import QueuedWork

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"


def done_analysis() -> Analysis | None:
    return Analysis.objects.filter(status="done").first()


def test_an_ingest_is_analysed_by_the_worker_after_commit(
    celery_worker: Any, collector_client: Any
) -> None:
    response = collector_client("gpu-a01").post(
        "/api/v1/reports", report("gpu-a01", H200), format="json"
    )
    assert response.status_code == 201

    analysis = wait_for(done_analysis)
    summary = analysis.result["summary"]
    assert (summary["gpu_count"], summary["nic_count"]) == (8, 12)
    assert summary["gpu_pair_classes"] == {"NV18": 28}
    assert summary["largest_nvlink_domain"] == 8
    assert analysis.cost_model_version == services.COST_MODEL_VERSION
    assert analysis.attempts == 1
    assert analysis.claimed_at is not None and analysis.finished_at is not None


def test_with_the_broker_down_ingest_succeeds_and_the_sweep_completes_the_analysis(
    celery_worker: Any, collector_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    with monkeypatch.context() as patch:
        patch.setattr(run_analysis, "apply_async", broker_down)
        response = collector_client("gpu-a01").post(
            "/api/v1/reports", report("gpu-a01", H200), format="json"
        )
    assert response.status_code == 201
    analysis = Analysis.objects.get()
    assert analysis.status == "pending"

    # Nothing is due until the work has waited long enough; then the sweep sends it.
    assert services.sweep() == []
    Analysis.objects.filter(pk=analysis.pk).update(
        updated_at=timezone.now() - timedelta(minutes=10)
    )
    sweep.delay()  # the sweep itself runs on the worker, as beat would send it

    finished = wait_for(done_analysis)
    assert finished.pk == analysis.pk
    assert finished.result["summary"]["gpu_count"] == 8


def test_running_a_task_again_keeps_one_result(celery_worker: Any, collector_client: Any) -> None:
    collector_client("gpu-a01").post("/api/v1/reports", report("gpu-a01", H200), format="json")
    first = wait_for(done_analysis)

    assert services.run_analysis(first.pk) == "skipped"  # a duplicate message changes nothing
    # A worker killed mid-task leaves the row running under an old claim: the sweep re-runs it.
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Analysis.objects.filter(pk=first.pk).update(
        status="running", result=None, claimed_at=an_hour_ago, heartbeat_at=an_hour_ago
    )
    sweep.delay()

    again = wait_for(done_analysis)
    assert Analysis.objects.count() == 1
    assert again.pk == first.pk
    assert again.result == first.result
    assert again.attempts == 2


def test_only_one_claim_wins(celery_worker: Any, collector_client: Any) -> None:
    collector_client("gpu-a01").post("/api/v1/reports", report("gpu-a01", H200), format="json")
    analysis = wait_for(done_analysis)
    Analysis.objects.filter(pk=analysis.pk).update(status="pending")

    assert services.claim_analysis(analysis.pk) is not None
    assert services.claim_analysis(analysis.pk) is None


def test_an_analysis_that_times_out_every_time_fails_after_its_tries(
    collector_client: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    settings.TOPOWEB_ANALYSIS_MAX_ATTEMPTS = 2
    keep_tasks_here(monkeypatch)
    collector_client("gpu-a01").post("/api/v1/reports", report("gpu-a01", H200), format="json")
    analysis = Analysis.objects.get()

    def too_slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise SoftTimeLimitExceeded("soft time limit exceeded")

    monkeypatch.setattr(services, "analyse", too_slow)
    with pytest.raises(SoftTimeLimitExceeded):
        services.run_analysis(analysis.pk)
    analysis.refresh_from_db()
    assert (analysis.status, analysis.attempts) == ("pending", 1)

    with pytest.raises(SoftTimeLimitExceeded):
        services.run_analysis(analysis.pk)
    analysis.refresh_from_db()
    assert (analysis.status, analysis.attempts) == ("failed", 2)
    assert analysis.error.startswith("gave up after 2 attempts: SoftTimeLimitExceeded")
    assert services.sweep() == []  # failed work is not sent again


def test_the_sweep_fails_work_whose_worker_died_on_every_try(
    collector_client: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    keep_tasks_here(monkeypatch)
    collector_client("gpu-a01").post("/api/v1/reports", report("gpu-a01", H200), format="json")
    long_ago = timezone.now() - timedelta(seconds=settings.TOPOWEB_STALE_CLAIM_AFTER_S + 60)
    Analysis.objects.update(status="running", claimed_at=long_ago, attempts=2)
    QueuedWork.objects.update(queued_at=None)  # a worker took the report's message, then died

    assert len(services.sweep()) == 1  # one try left: back to pending and sent
    assert Analysis.objects.get().status == "pending"

    Analysis.objects.update(
        status="running", claimed_at=long_ago, attempts=settings.TOPOWEB_ANALYSIS_MAX_ATTEMPTS
    )
    assert services.sweep() == []
    failed = Analysis.objects.get()
    assert failed.status == "failed"
    assert failed.error == "gave up: the worker stopped before finishing on every attempt"
