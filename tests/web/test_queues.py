"""Celery on the project's settings (`config_from_object`) and its two queues: `analysis` for a
class's analysis, `default` for the light tasks, both consumed by the session's worker, and
tasks sent together published in one Redis pipeline."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest
import redis
from celery.signals import task_postrun
from django.conf import settings
from django.test import override_settings

from tests.web.conftest import wait_for
from topoweb.config.celery_app import app, enqueue, enqueue_together


def test_each_task_is_routed_to_its_queue() -> None:
    assert {queue.name for queue in settings.CELERY_TASK_QUEUES} == {"analysis", "default"}
    routes = {name: app.amqp.router.route({}, name)["queue"].name for name in app.tasks}
    assert routes["analysis.run"] == "analysis"
    assert routes["health.evaluate"] == routes["health.sweep"] == "default"
    assert routes["analysis.sweep"] == "default"  # finds lost work: light


def test_celery_reads_django_settings_as_they_are_now() -> None:
    before = app.conf.task_always_eager
    with override_settings(CELERY_TASK_ALWAYS_EAGER=not before):
        assert app.conf.task_always_eager is (not before)
    assert app.conf.task_always_eager is before


def test_tasks_sent_together_go_out_in_one_pipeline_each_to_its_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What reaches Redis, caught at the pipeline (a live worker of another test would take
    # the messages off the queues first), and not sent: no worker runs tasks 7 and 9.
    sent: list[list[tuple[Any, ...]]] = []

    def execute(self: redis.client.Pipeline, raise_on_error: bool = True) -> list[Any]:
        sent.append([args for args, _ in self.command_stack])
        self.reset()
        return []

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    with enqueue_together():
        assert enqueue("analysis.run", 7)
        assert enqueue("health.evaluate", 9)
    # A connection new to this process first declares its queues: pipelines of their own.
    pushed = [stack for stack in sent if any(args[0] == "LPUSH" for args in stack)]
    assert len(pushed) == 1
    assert [(command, key) for command, key, _ in pushed[0]] == [
        ("LPUSH", "analysis"),
        ("LPUSH", "default"),
    ]
    messages = [json.loads(message) for _, _, message in pushed[0]]
    assert [(m["headers"]["task"], json.loads(_body(m))[0]) for m in messages] == [
        ("analysis.run", [7]),
        ("health.evaluate", [9]),
    ]
    # The task's own limits travel in the message, as apply_async puts them there.
    task = app.tasks["analysis.run"]
    assert messages[0]["headers"]["timelimit"] == [task.time_limit, task.soft_time_limit]


def _body(message: dict[str, Any]) -> str:
    return base64.b64decode(message["body"]).decode()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_session_worker_consumes_both_queues(celery_worker: Any) -> None:
    # The sweeps find nothing to do on an empty database: a cheap task to send anywhere.
    seen: list[str] = []
    lock = threading.Lock()

    def done(task: Any = None, **_: Any) -> None:
        with lock:
            seen.append(task.request.delivery_info.get("routing_key", ""))

    task_postrun.connect(done, weak=False)
    try:
        app.tasks["analysis.sweep"].apply_async(queue="analysis")
        app.tasks["health.sweep"].apply_async()  # routed to default
        wait_for(lambda: {"analysis", "default"} <= set(seen), 30)
    finally:
        task_postrun.disconnect(done)
