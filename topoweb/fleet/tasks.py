"""Celery tasks of the fleet app: the fabric worker and a snapshot's drawings, thin wrappers
over fleet.fabric_services and fleet.drawings taking ids only."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from topoweb.fleet import drawings, fabric_services, retention, selectors, work

FABRIC = fabric_services.FABRIC_WORK  # the kind of work, in fleet.work


@shared_task(
    name=fabric_services.ANALYSE_TASK,
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=5,
    soft_time_limit=300,
    time_limit=360,
)
def analyse_fabric(capture_id: int) -> str:
    outcome = work.attempt(FABRIC, capture_id, lambda: fabric_services.analyse_capture(capture_id))
    return "given-up" if outcome is None else str(outcome)


@shared_task(
    name=selectors.DRAW_TASK,
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    max_retries=5,
    soft_time_limit=300,
    time_limit=360,
)
def draw(server_id: int) -> str:
    """Draw the server's latest graph and exports again (a request found them missing)."""
    outcome = work.attempt(selectors.DRAWING, server_id, lambda: drawings.draw_latest(server_id))
    return "given-up" if outcome is None else str(outcome)


@shared_task(name="fleet.sweep_fabrics", soft_time_limit=120, time_limit=150)
def sweep_fabrics() -> list[int]:
    """Send the latest captures whose analysis never ran (broker down), failed with tries
    left, or was made before the servers' collectors sent other HCA GUIDs."""
    with work.one_at_a_time("fleet.sweep_fabrics", 150) as mine:
        if not mine:
            return []
        return [pk for pk in fabric_services.stale_captures() if fabric_services.send_analysis(pk)]


@shared_task(name="fleet.prune_snapshots", soft_time_limit=600, time_limit=660)
def prune_snapshots() -> int:
    """The retention policy's periodic prune (fleet.retention)."""
    return retention.prune_snapshots()
