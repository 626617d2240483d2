"""Background analyses on a real Celery worker (Redis broker): computed after the ingest
commits, recovered by the sweep when the broker was down or a worker died, never duplicated."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from tests.web.conftest import report, wait_for
from topoweb.analysis import services
from topoweb.analysis.models import Analysis
from topoweb.analysis.tasks import run_analysis, sweep

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
    Analysis.objects.filter(pk=first.pk).update(
        status="running", result=None, claimed_at=timezone.now() - timedelta(hours=1)
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
