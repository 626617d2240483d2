"""gunicorn settings for topoweb: `gunicorn -c python:topoweb.config.gunicorn
topoweb.config.wsgi:application`. With PROMETHEUS_MULTIPROC_DIR set, the directory is emptied
when the master starts (counters from an earlier run would be summed in otherwise) and a dead
worker's files are marked dead, as prometheus_client's multiprocess mode asks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prometheus_client import multiprocess

bind = os.environ.get("TOPOWEB_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "3"))
accesslog = "-"


def on_starting(server: Any) -> None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        for stale in Path(directory).glob("*.db"):
            stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
