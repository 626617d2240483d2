"""Celery tasks of the analysis app: thin wrappers over analysis.services, taking ids only."""

from __future__ import annotations

from celery import Task, shared_task
from django.conf import settings
from django.db import DatabaseError

from topoweb.analysis import services
from topoweb.fleet import work


@shared_task(
    name="analysis.run",
    bind=True,
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
    soft_time_limit=120,
    time_limit=150,
)
def run_analysis(self: Task, analysis_id: int) -> str:
    outcome = services.run_attempt(analysis_id)
    if outcome == "busy" and not self.request.is_eager:
        # Another claim is running: a live worker (then the retry finds it done and skips) or
        # one killed mid-task, whose message came back here (acks late, rejected on worker
        # loss). Its heartbeat stops, so the retry takes the work over once the claim is stale.
        raise self.retry(countdown=settings.TOPOWEB_STALE_CLAIM_AFTER_S + 5)
    return outcome


@shared_task(name="analysis.sweep", soft_time_limit=120, time_limit=150)
def sweep() -> list[int]:
    with work.one_at_a_time("analysis.sweep", 150) as mine:
        if not mine:
            return []
        sent = services.sweep()
        services.publish_analysis_counts()
        return sent
