"""The Celery application; configuration comes from Django settings (CELERY_* names)."""

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from django.core.signals import setting_changed

from topoweb.config.broker import KeptDeclarations

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")


class _AMQP(AMQP):  # type: ignore[misc]
    """Celery's, with producers that skip re-declaring a queue their connection declared."""

    @property
    def producer_pool(self) -> Any:
        pool = super().producer_pool
        pool.Producer = KeptDeclarations  # read when the pool makes a producer
        return pool


class _CelerySettings(Mapping[str, Any]):
    """The CELERY_* names of Django's settings, read once, when Celery first reads its
    configuration (after Django's settings are set up). Celery looks a setting up under several
    spellings through every source before its default: through Django's settings object each
    miss raised and caught an AttributeError, 15-50 us a lookup, 16 lookups per pair of task
    messages; in a dict a miss is a KeyError in C. A changed CELERY_* setting (tests'
    override_settings) empties the dict, as Django's own cached settings do."""

    def __init__(self) -> None:
        self._names: dict[str, Any] | None = None
        setting_changed.connect(self._forget, weak=False)

    def _forget(self, *, setting: str, **_: Any) -> None:
        if setting.startswith("CELERY_"):
            self._names = None

    def _read(self) -> dict[str, Any]:
        if self._names is None:
            from django.conf import settings

            self._names = {
                n: getattr(settings, n) for n in dir(settings) if n.startswith("CELERY_")
            }
        return self._names

    def __getitem__(self, key: str) -> Any:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


app = Celery("topoweb", amqp=_AMQP)
app.config_from_object(_CelerySettings(), namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)

# The tasks `enqueue` was asked for inside `enqueue_together`, per thread; None outside.
_together = threading.local()


def enqueue(task_name: str, *args: Any) -> bool:
    """Send a task by its registered name (run at once in eager mode), so that services need
    not import the tasks that wrap them. A broker that is down is logged, not raised: the row
    records what is pending and a periodic sweep sends it later. Inside `enqueue_together` the
    task is sent when that block ends (True: it will be tried then)."""
    pending: list[tuple[str, tuple[Any, ...]]] | None = getattr(_together, "pending", None)
    if pending is not None:
        pending.append((task_name, args))
        return True
    try:
        task = app.tasks[task_name]
        if app.conf.task_always_eager:
            # Run here: apply_async would still open a broker connection for nothing (and kombu
            # warns "No hostname was supplied" about the memory:// one).
            task.apply(args=args)
        else:
            task.apply_async(args=args)
    except Exception:  # kombu and redis raise several unrelated types for "broker down"
        log.warning("%s%s not queued: the broker refused it", task_name, args, exc_info=True)
        return False
    return True


@contextmanager
def enqueue_together() -> Iterator[None]:
    """The tasks enqueued inside this block (by the on-commit hooks of a transaction that
    commits in it) are sent when it ends, all in one broker round trip: one Redis pipeline, and
    one Redis client where kombu builds one per message. A new report asks for two (its
    analysis and its server's health). What is sent, and to which queue, does not change; a
    broker that is down is logged for each task, as `enqueue` does. Nested blocks send with the
    outermost; in eager mode tasks run at once, as `enqueue` runs them."""
    if getattr(_together, "pending", None) is not None or app.conf.task_always_eager:
        yield
        return
    pending: list[tuple[str, tuple[Any, ...]]] = []
    _together.pending = pending
    try:
        yield
    finally:
        _together.pending = None
        if pending:
            _send(pending)


def _send(pending: list[tuple[str, tuple[Any, ...]]]) -> None:
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            for task_name, args in pending:
                app.tasks[task_name].apply_async(args=args, producer=producer)
    except Exception:  # as in enqueue: a batch that fails is sent by none of its tasks
        for task_name, args in pending:
            log.warning("%s%s not queued: the broker refused it", task_name, args, exc_info=True)
