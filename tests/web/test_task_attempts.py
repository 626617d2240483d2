"""Every task kind tried a bounded number of times, queued at most once per object, and given
up with a reason the server page shows (issue 24 item 10)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from tests.web.conftest import add, keep_tasks_here
from topoweb.analysis import services as analysis_services
from topoweb.analysis.models import Analysis
from topoweb.fleet import work
from topoweb.fleet.models import QueuedWork
from topoweb.health import services as health_services
from topoweb.health import tasks as health_tasks
from topoweb.health.models import ServerHealth

pytestmark = pytest.mark.django_db

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """What fleet.work hands the broker (nothing reaches a worker: none runs here)."""
    return keep_tasks_here(monkeypatch)


def test_a_server_asked_for_again_and_again_has_one_evaluation_queued(
    sent: list[tuple[str, tuple[Any, ...]]], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        server = add("h200-01", H200).server
    assert sent.count(("health.evaluate", (server.pk,))) == 1
    for _ in range(5):
        health_services.enqueue_health(server.pk)
        health_tasks.sweep()
    assert sent.count(("health.evaluate", (server.pk,))) == 1
    # The worker takes the message: the next request may queue one more.
    assert work.begin(health_services.HEALTH, server.pk)
    health_tasks.sweep()
    assert sent.count(("health.evaluate", (server.pk,))) == 2


def test_an_evaluation_that_fails_every_time_is_given_up_and_the_page_says_why(
    sent: list[tuple[str, tuple[Any, ...]]],
    monkeypatch: pytest.MonkeyPatch,
    reader: APIClient,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.TOPOWEB_TASK_MAX_ATTEMPTS = 3
    server = add("h200-01", H200).server
    calls = []

    def explode(server_id: int) -> None:
        calls.append(server_id)
        raise RuntimeError("the comparison ran past its time limit")

    monkeypatch.setattr(health_services, "evaluate_server", explode)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            health_services.run_evaluation(server.pk)
    assert not health_services.run_evaluation(server.pk)  # not run a fourth time
    assert len(calls) == 3

    reason = work.given_up(health_services.HEALTH, [server.pk])[server.pk]
    assert "gave up after 3 attempts" in reason and "past its time limit" in reason
    sent.clear()
    for _ in range(3):
        assert health_tasks.sweep() == []
    assert sent == []
    page = reader.get("/api/v1/servers/h200-01/page/").json()
    assert page["gave_up"] == {"health": reason}
    assert not ServerHealth.objects.exists()

    # New input (its next report) gives it its tries again.
    monkeypatch.undo()
    with django_capture_on_commit_callbacks(execute=True):
        health_services.request_assessments([server.pk])
    assert work.given_up(health_services.HEALTH, [server.pk]) == {}
    assert health_services.run_evaluation(server.pk)
    assert reader.get("/api/v1/servers/h200-01/page/").json()["gave_up"] == {}


def test_work_that_kills_its_worker_every_time_is_given_up_too(settings: Any) -> None:
    settings.TOPOWEB_TASK_MAX_ATTEMPTS = 2
    for _ in range(2):
        assert work.begin("health", 42)  # then the worker dies: nothing recorded
    assert not work.begin("health", 42)
    assert work.GAVE_UP_DIED in QueuedWork.objects.get(kind="health", key=42).gave_up


def test_an_analysis_given_up_is_marked_failed_with_the_reason(
    sent: list[tuple[str, tuple[Any, ...]]], settings: Any
) -> None:
    settings.TOPOWEB_TASK_MAX_ATTEMPTS = 1
    add("h200-01", H200)
    analysis = Analysis.objects.get()
    assert work.begin(analysis_services.ANALYSIS, analysis.pk)  # a worker died on it
    assert analysis_services.run_attempt(analysis.pk) == "given-up"
    analysis.refresh_from_db()
    assert analysis.status == Analysis.Status.FAILED
    assert "gave up after 1 attempts" in analysis.error


def test_a_sweep_still_running_keeps_the_next_from_starting(
    sent: list[tuple[str, tuple[Any, ...]]], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        server = add("h200-01", H200).server
    assert work.begin(health_services.HEALTH, server.pk)  # a worker took it, then died
    sent.clear()
    with work.one_at_a_time("health.sweep", 60) as mine:
        assert mine
        assert health_tasks.sweep() == []
    assert sent == []
    assert health_tasks.sweep() != []


def test_a_report_rolled_back_leaves_no_claim_and_sends_nothing(
    sent: list[tuple[str, tuple[Any, ...]]], django_capture_on_commit_callbacks: Any
) -> None:
    """A report's claims on its analysis and health check are written in its transaction."""
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            add("h200-01", H200)
            assert QueuedWork.objects.count() == 2  # claimed in the report's transaction
            raise RuntimeError("the commit failed")
    assert not QueuedWork.objects.exists() and sent == []


def test_a_claim_whose_message_never_left_is_sent_by_the_sweep_once_lost(
    sent: list[tuple[str, tuple[Any, ...]]], settings: Any
) -> None:
    """The process died between the report's commit and its send: nothing went out, the
    claim says a message did; once it is older than TOPOWEB_QUEUED_LOST_AFTER_S the sweep
    sends it."""
    server = add("h200-01", H200).server  # committed in effect, never sent (no commit here)
    assert sent == []
    assert health_tasks.sweep() == []  # a message may still be out
    lost = timezone.now() - timedelta(seconds=settings.TOPOWEB_QUEUED_LOST_AFTER_S + 1)
    QueuedWork.objects.update(queued_at=lost)
    assert health_tasks.sweep() == [server.pk]
    assert sent == [("health.evaluate", (server.pk,))]


def test_a_request_for_thousands_of_servers_claims_and_sends_each_once(
    sent: list[tuple[str, tuple[Any, ...]]], django_capture_on_commit_callbacks: Any
) -> None:
    """A SKU's siblings all at once: more rows than one statement's parameters allow."""
    keys = list(range(1, 2501))
    with django_capture_on_commit_callbacks(execute=True):
        work.request("health", keys, "health.evaluate", renew=True)
        work.request("health", keys, "health.evaluate", renew=True)  # already out: none again
    assert sorted(args[0] for _, args in sent) == keys
    assert QueuedWork.objects.filter(kind="health", queued_at__isnull=False).count() == 2500
