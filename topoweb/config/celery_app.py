"""The Celery application; configuration comes from Django settings (CELERY_* names)."""

import logging
import os
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "topoweb.config.settings")

app = Celery("topoweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)


def enqueue(task_name: str, *args: Any) -> bool:
    """Send a task by its registered name (run at once in eager mode), so that services need
    not import the tasks that wrap them. A broker that is down is logged, not raised: the row
    records what is pending and a periodic sweep sends it later."""
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
