"""Celery tasks of the health app: thin wrappers over health.services, taking ids only."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from topoweb.fleet import work
from topoweb.health import services


@shared_task(
    name="health.evaluate",
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=5,
    soft_time_limit=60,
    time_limit=90,
)
def evaluate_server_task(server_id: int) -> bool:
    return services.run_evaluation(server_id)


@shared_task(name="health.sweep", soft_time_limit=120, time_limit=150)
def sweep() -> list[int]:
    """Queue the servers whose evaluation is missing or older than their latest snapshot; mark
    and clear collector_silent; publish the fleet's gauges for /metrics."""
    with work.one_at_a_time("health.sweep", 150) as mine:
        if not mine:
            return []
        stale = services.stale_servers()
        sent = [pk for pk in stale if services.enqueue_health(pk)]
        services.sweep_silent_collectors()
        services.publish_fleet_gauges()
        return sent
