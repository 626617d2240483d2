"""gunicorn settings for topoweb: `gunicorn -c python:topoweb.config.gunicorn
topoweb.config.wsgi:application` (the image's command and compose's).

Metrics are always in prometheus_client's multiprocess mode under gunicorn, so a scrape sums
every worker's counters whichever worker answers it: PROMETHEUS_MULTIPROC_DIR when set (emptied
when the master starts: counters from an earlier run would be summed in otherwise), else a fresh
directory made at start and removed at exit. A dead worker's files are marked dead, as
prometheus_client asks. prometheus_client is imported only in the hooks: it picks its value
store when first imported, which must happen after the directory is in the environment."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

bind = os.environ.get("TOPOWEB_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "3"))
accesslog = "-"

_made: list[Path] = []  # the directory on_starting made (removed on exit)


def on_starting(server: Any) -> None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        for stale in Path(directory).glob("*.db"):
            stale.unlink()
    else:
        made = Path(tempfile.mkdtemp(prefix="topoweb-prometheus-"))
        _made.append(made)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(made)  # the workers inherit it


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    for made in _made:
        shutil.rmtree(made, ignore_errors=True)
