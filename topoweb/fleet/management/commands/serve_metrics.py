"""`manage.py serve_metrics [--bind 127.0.0.1:9100]`: the Prometheus metrics of the web
workers on their own (internal) address, summed over the processes that write to
PROMETHEUS_MULTIPROC_DIR. Reads no database; for operators who keep /metrics off the public
address instead of giving Prometheus a TOPOWEB_METRICS_TOKEN."""

from __future__ import annotations

import os
from typing import Any
from wsgiref.simple_server import make_server

from django.core.management.base import BaseCommand, CommandError, CommandParser

from topoweb.config.metrics import exposition


def application(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    from prometheus_client import CONTENT_TYPE_LATEST

    if environ.get("PATH_INFO") not in ("/", "/metrics"):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not found: scrape /metrics\n"]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
    return [exposition()]


class Command(BaseCommand):
    help = "Serve /metrics on a separate address (needs PROMETHEUS_MULTIPROC_DIR)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1:9100", help="host:port")

    def handle(self, *args: Any, **options: Any) -> None:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            raise CommandError(
                "Set PROMETHEUS_MULTIPROC_DIR to the directory the gunicorn workers write to."
            )
        host, _, port = options["bind"].rpartition(":")
        with make_server(host or "127.0.0.1", int(port), application) as server:
            self.stderr.write(f"Serving metrics on http://{options['bind']}/metrics")
            server.serve_forever()
