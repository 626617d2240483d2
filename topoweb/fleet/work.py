"""Worker tasks sent at most once at a time per object, tried a bounded number of times, and
given up with a reason the pages show: the one mechanism every task kind goes through.

New input (a report, a benchmark, staff's edit) resets the attempts (`renew`); the task is
then sent unless a message for the same object is already out (`send`), and the sweep sends
only what is not out and not given up. The worker marks the start of each attempt
(`begin`: the message is consumed, the attempt counted, refused past
TOPOWEB_TASK_MAX_ATTEMPTS), then `finish` or `fail`. A worker killed mid-task records
nothing: its attempt was counted at the start, so a task that kills its worker every time is
given up too. Periodic tasks (the sweeps) run one at a time (`one_at_a_time`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from topoweb.config.celery_app import enqueue
from topoweb.fleet.models import QueuedWork

GAVE_UP_DIED = "the worker stopped before finishing each time (killed, or past its time limit)"


def renew(kind: str, key: int) -> None:
    """New input for this object (a report, a benchmark, staff's edit): its work gets its full
    tries again. Called inside the transaction that stores the input; the caller then sends
    the task once it commits (`send`)."""
    QueuedWork.objects.filter(kind=kind, key=key).exclude(attempts=0, gave_up="").update(
        attempts=0, gave_up=""
    )


def send(kind: str, key: int, task_name: str) -> bool:
    """Send the task unless a message for this object is already out or it was given up;
    whether one was sent. A message out for longer than TOPOWEB_QUEUED_LOST_AFTER_S counts
    as lost (a broker that lost its queue)."""
    now = timezone.now()
    _ensure(kind, key)
    rows = QueuedWork.objects.filter(kind=kind, key=key)
    lost = now - timedelta(seconds=settings.TOPOWEB_QUEUED_LOST_AFTER_S)
    claimed = (
        rows.filter(gave_up="")
        .filter(Q(queued_at__isnull=True) | Q(queued_at__lt=lost))
        .update(queued_at=now)
    )
    if not claimed:
        return False

    def refused() -> None:  # the broker is down: the sweep sends it later
        rows.filter(queued_at=now).update(queued_at=None)

    return enqueue(task_name, key, on_refused=refused)


def _ensure(kind: str, key: int) -> None:
    if not QueuedWork.objects.filter(kind=kind, key=key).exists():
        try:
            with transaction.atomic():
                QueuedWork.objects.create(kind=kind, key=key)
        except IntegrityError:
            pass  # made by a request at the same moment


def begin(kind: str, key: int) -> bool:
    """A worker starts an attempt: the message is consumed (a new request may send another)
    and the attempt counted. False when the work was given up, or has now had its tries."""
    _ensure(kind, key)
    rows = QueuedWork.objects.filter(kind=kind, key=key)
    rows.update(queued_at=None, attempts=F("attempts") + 1)
    row = rows.values("attempts", "gave_up").get()
    if row["gave_up"]:
        return False
    if row["attempts"] > settings.TOPOWEB_TASK_MAX_ATTEMPTS:
        rows.update(gave_up=f"gave up after {row['attempts'] - 1} attempts: {GAVE_UP_DIED}")
        return False
    return True


def finish(kind: str, key: int) -> None:
    """The attempt succeeded: the next request starts from no attempts."""
    QueuedWork.objects.filter(kind=kind, key=key).update(attempts=0, gave_up="")


def fail(kind: str, key: int, reason: str) -> None:
    """The attempt failed with `reason`: given up once it was the last try."""
    rows = QueuedWork.objects.filter(
        kind=kind, key=key, attempts__gte=settings.TOPOWEB_TASK_MAX_ATTEMPTS
    )
    attempts = settings.TOPOWEB_TASK_MAX_ATTEMPTS
    rows.update(gave_up=f"gave up after {attempts} attempts: {reason}"[:2000])


def attempt(kind: str, key: int, body: Callable[[], object]) -> object | None:
    """Run `body` as one attempt of this work: None without running it when it was given up
    (or has had its tries); an exception is recorded (`fail`) and raised again."""
    if not begin(kind, key):
        return None
    try:
        result = body()
    except BaseException as exc:
        fail(kind, key, f"{type(exc).__name__}: {exc}")
        raise
    finish(kind, key)
    return result


def given_up(kind: str, keys: list[int]) -> dict[int, str]:
    """Why each of these objects' work was given up (only those given up)."""
    return dict(
        QueuedWork.objects.filter(kind=kind, key__in=keys)
        .exclude(gave_up="")
        .values_list("key", "gave_up")
    )


def given_up_keys(kind: str) -> QuerySet[QueuedWork, int]:
    """The ids whose work of this kind was given up, as a subquery for a sweep to exclude."""
    return QueuedWork.objects.filter(kind=kind).exclude(gave_up="").values_list("key", flat=True)


@contextmanager
def one_at_a_time(name: str, seconds: int) -> Iterator[bool]:
    """Whether this run of a periodic task (a sweep) is the only one: beat sends one every
    interval whether or not the last has finished, and two at once would send the same work
    twice. Held in the shared cache for at most `seconds` (the task's time limit), so a
    killed run does not hold it longer."""
    key = f"topoweb:running:{name}"
    mine = cache.add(key, 1, timeout=seconds)
    try:
        yield mine
    finally:
        if mine:
            cache.delete(key)
