"""The Celery application; configuration comes from Django settings (CELERY_* names), read by
Celery's own `config_from_object`. Two queues: `analysis` (a topology class's analysis, heavy)
and `default` (health evaluations and the sweeps, light), each with its own worker in
production, so a quick health check never waits behind a long analysis."""

import collections
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")

app = Celery("topoweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)

# The tasks `enqueue` was asked for inside `enqueue_together`, per thread; None outside.
_together = threading.local()
_Pending = tuple[str, tuple[Any, ...], "Callable[[], object] | None"]


def enqueue(task_name: str, *args: Any, on_refused: Callable[[], object] | None = None) -> bool:
    """Send a task by its registered name (run at once in eager mode), so that services need
    not import the tasks that wrap them. A broker that is down is logged, not raised: the row
    records what is pending and a periodic sweep sends it later; `on_refused` is called then
    (fleet.work forgets that a message is out). Inside `enqueue_together` the task is sent
    when that block ends (True: it will be tried then)."""
    pending: list[_Pending] | None = getattr(_together, "pending", None)
    if pending is not None:
        pending.append((task_name, args, on_refused))
        return True
    try:
        task = app.tasks[task_name]
        if app.conf.task_always_eager:
            # No broker (the embedded default): run in this process, off the caller's thread,
            # so a request answers at once. apply_async would still open a broker connection
            # for nothing (and kombu warns "No hostname was supplied" about the memory:// one).
            _in_background(task_name, args)
        else:
            task.apply_async(args=args)
    except Exception:  # kombu and redis raise several unrelated types for "broker down"
        log.warning("%s%s not queued: the broker refused it", task_name, args, exc_info=True)
        if on_refused is not None:
            on_refused()
        return False
    return True


# Eager mode's tasks, run one at a time in the order asked by one thread of the process, started
# when there is work and ending when there is none. Not a daemon: a process that ends (a
# management command) first finishes what it asked for.
_backlog: collections.deque[tuple[str, tuple[Any, ...]]] = collections.deque()
_backlog_lock = threading.Condition()
_runner: threading.Thread | None = None


def _in_background(task_name: str, args: tuple[Any, ...]) -> None:
    global _runner
    with _backlog_lock:
        _backlog.append((task_name, args))
        if _runner is None:
            _runner = threading.Thread(target=_run_backlog, name="topoweb-tasks")
            _runner.start()


def _run_backlog() -> None:
    global _runner
    from django.db import connections

    while True:
        with _backlog_lock:
            if not _backlog:
                _runner = None
                _backlog_lock.notify_all()
                return
            task_name, args = _backlog.popleft()
        try:
            app.tasks[task_name].apply(args=args, throw=True)
        except Exception:
            log.exception("%s%s failed", task_name, args)
        finally:
            connections.close_all()  # this thread's own connections


def wait_for_background(timeout: float | None = None) -> bool:
    """Wait until eager mode's background tasks (and those they asked for) have run; whether
    they had within `timeout`. For commands and tests that read what the tasks wrote."""
    with _backlog_lock:
        return _backlog_lock.wait_for(lambda: _runner is None, timeout)


@contextmanager
def enqueue_together() -> Iterator[None]:
    """The tasks enqueued inside this block (by the on-commit hooks of a transaction that
    commits in it) are sent when it ends, all in one broker round trip: one Redis pipeline
    (kombu's `Producer.batch`), or as `enqueue` sends it when there is one. A new report asks
    for one or two (its server's health; its class's analysis when the class or its runs are
    new). What is sent, and to which queue, does not change; a
    broker that is down is logged for each task, as `enqueue` does. Nested blocks send with the
    outermost; in eager mode tasks run at once, as `enqueue` runs them."""
    if getattr(_together, "pending", None) is not None or app.conf.task_always_eager:
        yield
        return
    pending: list[_Pending] = []
    _together.pending = pending
    try:
        yield
    finally:
        _together.pending = None
        if pending:
            _send(pending)


def _send(pending: list[_Pending]) -> None:
    if len(pending) == 1:  # a batch would set up a pipeline of its own for one message
        task_name, args, on_refused = pending[0]
        enqueue(task_name, *args, on_refused=on_refused)
        return
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            for task_name, args, _ in pending:
                app.tasks[task_name].apply_async(args=args, producer=producer)
    except Exception:  # as in enqueue: a batch that fails is sent by none of its tasks
        for task_name, args, on_refused in pending:
            log.warning("%s%s not queued: the broker refused it", task_name, args, exc_info=True)
            if on_refused is not None:
                on_refused()
