"""Celery tasks of the analysis app: thin wrappers over analysis.services, taking ids only."""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from topoweb.analysis import services


@shared_task(
    name="analysis.run",
    autoretry_for=(DatabaseError,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=5,
    soft_time_limit=120,
    time_limit=150,
)
def run_analysis(analysis_id: int) -> str:
    return services.run_analysis(analysis_id)


@shared_task(name="analysis.sweep", soft_time_limit=120, time_limit=150)
def sweep() -> list[int]:
    return services.sweep()
