"""Publishing tasks on the real Redis broker (topoweb.config.broker): one kept client per
connection pool, a queue declared once per connection, and the messages as Celery sends them."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from django.conf import settings
from kombu import Connection, Queue

from topoweb.config import broker
from topoweb.config.celery_app import app, enqueue, enqueue_together

QUEUE = "celery"


def test_the_app_publishes_through_the_kept_client_transport_and_producer() -> None:
    assert settings.CELERY_BROKER_TRANSPORT == "topoweb.config.broker:Transport"
    with app.connection_for_write() as connection:
        assert isinstance(connection.default_channel, broker.Channel)
    with app.producer_or_acquire() as producer:
        assert isinstance(producer, broker.KeptDeclarations)


def test_tasks_sent_together_go_out_in_one_pipeline_as_celery_sends_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What reaches Redis, caught at the pipeline (a live worker of another test would take
    # the messages off the queue first), and not sent: no worker runs tasks 7 and 9.
    sent: list[list[tuple[Any, ...]]] = []

    def execute(self: redis.client.Pipeline, raise_on_error: bool = True) -> list[Any]:
        sent.append([args for args, _ in self.command_stack])
        self.reset()
        return []

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    with enqueue_together():
        assert enqueue("analysis.run", 7)
        assert enqueue("health.evaluate", 9)
    # A connection new to this process first declares the queue (LLEN, SADD): its own pipelines.
    pushed = [stack for stack in sent if any(args[0] == "LPUSH" for args in stack)]
    assert len(pushed) == 1
    assert [(command, key) for command, key, _ in pushed[0]] == [("LPUSH", QUEUE)] * 2
    messages = [json.loads(message) for _, _, message in pushed[0]]
    assert [(m["headers"]["task"], json.loads(_body(m))[0]) for m in messages] == [
        ("analysis.run", [7]),
        ("health.evaluate", [9]),
    ]
    # The task's own limits travel in the message, as apply_async puts them there.
    task = app.tasks["analysis.run"]
    assert messages[0]["headers"]["timelimit"] == [task.time_limit, task.soft_time_limit]
    assert all(m["properties"]["delivery_info"]["routing_key"] == QUEUE for m in messages)


def _body(message: dict[str, Any]) -> str:
    return base64.b64decode(message["body"]).decode()


def test_a_channel_keeps_one_publishing_client_per_connection_pool() -> None:
    with Connection(settings.REDIS_URL, transport=broker.Transport) as connection:
        channel = connection.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        # Consuming keeps kombu's own asynchronous client.
        assert channel._create_client(asynchronous=True) is not first
        channel._pool = None  # as after a disconnect: a new pool, a new client over it
        again = channel._create_client()
        assert again is not first and again.connection_pool is channel.pool


def test_a_queue_is_declared_once_per_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    declared: list[str] = []
    original = Queue.declare

    def declare(self: Queue, *args: Any, **kwargs: Any) -> Any:
        declared.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Queue, "declare", declare)
    queue = Queue("topoweb-test-declared", routing_key="topoweb-test-declared")
    for _ in range(2):  # a new connection declares again
        with Connection(settings.REDIS_URL, transport=broker.Transport) as connection:
            producer = broker.KeptDeclarations(connection)
            for n in range(3):
                producer.publish({"n": n}, routing_key=queue.name, declare=[queue], retry=True)
    assert declared == ["topoweb-test-declared"] * 2
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert client.llen("topoweb-test-declared") == 6
    client.delete("topoweb-test-declared")


def test_celery_sees_a_changed_celery_setting_and_the_old_value_after() -> None:
    """Celery reads Django's CELERY_* settings once (a dict); override_settings empties it."""
    from django.test import override_settings

    from topoweb.config.celery_app import app

    before = app.conf.task_always_eager
    with override_settings(CELERY_TASK_ALWAYS_EAGER=not before):
        assert app.conf.task_always_eager is (not before)
    assert app.conf.task_always_eager is before
