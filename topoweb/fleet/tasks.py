"""Celery tasks of the fleet app: the fabric worker, thin wrappers over fleet.fabric_services
taking ids only."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from topoweb.config.celery_app import enqueue
from topoweb.fleet import fabric_services


@shared_task(
    name=fabric_services.ANALYSE_TASK,
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=5,
    soft_time_limit=300,
    time_limit=360,
)
def analyse_fabric(capture_id: int) -> str:
    return fabric_services.analyse_capture(capture_id)


@shared_task(name="fleet.sweep_fabrics", soft_time_limit=120, time_limit=150)
def sweep_fabrics() -> list[int]:
    """Send the latest captures whose analysis never ran (broker down), failed with tries
    left, or was made before the servers' collectors sent other HCA GUIDs."""
    return [
        pk for pk in fabric_services.stale_captures() if enqueue(fabric_services.ANALYSE_TASK, pk)
    ]
