"""Worker tasks sent at most once at a time per object, tried a bounded number of times, and
given up with a reason the pages show: the one mechanism every task kind goes through.

New input (a report, a benchmark, staff's edit) resets the attempts and sends the task once
its transaction commits, unless a message for the same object is already out (`request`);
the sweeps send only what is not out and not given up (`send`). The worker marks the start
of each attempt (`begin`: the message is consumed, the attempt counted, refused past
TOPOWEB_TASK_MAX_ATTEMPTS), then `finish` or `fail`. A worker killed mid-task records
nothing: its attempt was counted at the start, so a task that kills its worker every time is
given up too. Periodic tasks (the sweeps) run one at a time (`one_at_a_time`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from topoweb.config.celery_app import enqueue
from topoweb.fleet.models import QueuedWork
from topoweb.fleet.statements import column_name, table_name

GAVE_UP_DIED = "the worker stopped before finishing each time (killed, or past its time limit)"


def request(kind: str, keys: Sequence[int], task_name: str, *, renew: bool) -> None:
    """New input for these objects (`renew`: their work gets its full tries again; a report,
    a benchmark, staff's edit), or only a wish that their pending work runs: each one's task
    is sent once the caller's transaction commits, unless a message for it is already out or
    it was given up. The claim is written in the caller's transaction, with its input, in one
    statement: a transaction that rolls back takes it along, and a process that dies between
    the commit and the send leaves a claim the sweep counts as lost after
    TOPOWEB_QUEUED_LOST_AFTER_S and sends again."""
    if not keys:
        return
    now = timezone.now()
    claimed = _claim(kind, keys, now, renew=renew)
    if claimed:
        transaction.on_commit(functools.partial(_send_claimed, kind, claimed, now, task_name))


def send(kind: str, key: int, task_name: str) -> bool:
    """Send the task now unless a message for this object is already out or it was given up
    (the sweeps, a read that finds a drawing missing); whether one was sent."""
    now = timezone.now()
    if not _claim(kind, [key], now, renew=False):
        return False
    return _send_claimed(kind, [key], now, task_name)


def _send_claimed(kind: str, keys: list[int], claimed_at: datetime, task_name: str) -> bool:
    sent = True
    for key in keys:

        def refused(key: int = key) -> None:  # the broker is down: the sweep sends it later
            QueuedWork.objects.filter(kind=kind, key=key, queued_at=claimed_at).update(
                queued_at=None
            )

        sent = enqueue(task_name, key, on_refused=refused) and sent
    return sent


def _claim(kind: str, keys: Sequence[int], now: datetime, *, renew: bool) -> list[int]:
    """Of these objects, those whose message this caller sends: one statement that makes
    each one's row if it has none, renews its tries (`renew`), and marks a message out from
    `now` where none is (or the last is lost: out longer than TOPOWEB_QUEUED_LOST_AFTER_S)
    and the work was not given up (renewing takes that back). The row stays locked to the
    caller's transaction, so two requests at once send one message."""
    lost = now - timedelta(seconds=settings.TOPOWEB_QUEUED_LOST_AFTER_S)
    adapt = connection.ops.adapt_datetimefield_value
    at, before = adapt(now), adapt(lost)
    chosen = sorted(set(keys))  # in one order: two callers never wait on each other's rows
    claimed: list[int] = []
    with connection.cursor() as cursor:
        # A SKU's thousands of servers in statements of a bounded number of parameters.
        for start in range(0, len(chosen), _CLAIM_ROWS):
            part = chosen[start : start + _CLAIM_ROWS]
            values = [v for key in part for v in (kind, key, at, at)]
            rows = ", ".join(["(%s, %s, %s, 0, '', %s)"] * len(part))
            sql = _claim_sql().format(rows=rows)
            cursor.execute(sql, [*values, renew, renew, renew, before, at])
            claimed += [key for key, out_now in cursor.fetchall() if out_now]
    return claimed


_CLAIM_ROWS = 1000


@functools.cache
def _claim_sql() -> str:
    """The claim's statement (PostgreSQL and SQLite both have upserts with RETURNING), its
    names from the model. In DO UPDATE the table's columns are the row before the statement."""
    table = table_name(QueuedWork)
    kind, key, queued_at, attempts, gave_up, updated_at = (
        column_name(QueuedWork, f)
        for f in ("kind", "key", "queued_at", "attempts", "gave_up", "updated_at")
    )
    return f"""
INSERT INTO {table} ({kind}, {key}, {queued_at}, {attempts}, {gave_up}, {updated_at})
VALUES {{rows}}
ON CONFLICT ({kind}, {key}) DO UPDATE SET
  {attempts} = CASE WHEN %s THEN 0 ELSE {table}.{attempts} END,
  {gave_up} = CASE WHEN %s THEN '' ELSE {table}.{gave_up} END,
  {queued_at} = CASE
    WHEN (%s OR {table}.{gave_up} = '')
      AND ({table}.{queued_at} IS NULL OR {table}.{queued_at} < %s)
    THEN excluded.{queued_at} ELSE {table}.{queued_at} END,
  {updated_at} = excluded.{updated_at}
RETURNING {key}, {queued_at} = %s
"""


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
