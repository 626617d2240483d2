"""Pages and exports at the largest accepted sizes (issue 24 item 6): a 576-GPU NVLink domain
and an 8-GPU server with 600 NICs, each assessed by the health worker first (as after its
report), then every page, export and document about it read through Django's request path.
Prints each read's wall time, answer size and "under 2 s", and the worker's assessment time
beside them; asserts nothing. A throwaway SQLite database, no Redis.

    .venv/bin/python bench/pages.py [--cases nv18-576,nics-600] [--only export] [--profile]

--only keeps the reads whose path contains the text (with exports alone, the worker's drawings
replace the whole assessment); --profile prints each read's cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import sqlite_env  # noqa: E402
from tests import synthetic  # noqa: E402

PAGE_S = 2.0
CASES = {
    "nv18-576": lambda: synthetic.nvswitch_domain(576),
    "nics-600": lambda: synthetic.many_nics(8, 600),
}
READS = (
    "/servers/{h}/",
    "/api/v1/servers/{h}/page/",
    "/api/v1/servers/{h}/",
    "/api/v1/servers/{h}/graph/",
    "/servers/{h}/graph.svg",
    "/servers/{h}/matrix.csv",
    "/servers/{h}/matrix.csv?mode=ratio",
    "/api/v1/servers/{h}/acceptance/",
    "/servers/{h}/acceptance/",
    "/api/v1/servers/{h}/export/nccl-xml/",
    "/api/v1/servers/{h}/export/gres/",
    "/api/v1/topology-classes/{f}/export/nccl-xml/",
    "/api/v1/topology-classes/{f}/export/gres/",
    "/api/v1/topology-classes/{f}/",
    "/api/v1/servers/{h}/snapshots/",
    "/api/v1/snapshots/{s}/",
    "/api/v1/servers/{h}/affinity/",
    "/api/v1/compare/?a={h}&b={h}",
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--only", default="", help="only the reads whose path contains this")
    parser.add_argument("--profile", action="store_true", help="print each read's profile")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="topoweb-bench-pages-"))
    os.environ.update(sqlite_env(work / "bench.sqlite3"))
    os.environ["TOPOWEB_PUBLIC_READ"] = "1"
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.urls import get_resolver
    from django.utils import timezone

    from topoweb.fleet import work
    from topoweb.fleet.drawings import draw_latest
    from topoweb.fleet.models import Source
    from topoweb.fleet.services import ingest_report
    from topoweb.health.services import evaluate_server

    call_command("migrate", "--noinput", verbosity=0)
    # As a gunicorn worker starts (config/wsgi.py): every view imported before the first request.
    get_resolver().url_patterns  # noqa: B018
    # The workers' tasks are run below, one at a time and timed, not as ingest sends them.
    work.enqueue = lambda *a, **k: True  # type: ignore[assignment]
    client = Client(HTTP_HOST="localhost")
    print(f"{'case':<10} {'read':<42} {'seconds':>8} {'MB':>8}   under {PAGE_S:.0f} s")
    for case in args.cases.split(","):
        host = f"bench-{case}"
        done = ingest_report(
            hostname=host,
            topo_text=CASES[case](),
            captured_at=timezone.now(),
            source=Source.COLLECTOR,
        )
        fingerprint = done.snapshot.topology_class.fingerprint
        reads = [path for path in READS if args.only in path]
        if not reads:
            continue
        start = time.perf_counter()
        if any("/export/" not in path for path in reads):
            evaluate_server(done.server.pk)
            what = "worker: the assessment (health.evaluate)"
        else:
            draw_latest(done.server.pk)  # the exports alone, as the assessment stores them
            what = "worker: the drawings (fleet.draw)"
        print(f"{case:<10} {what:<42} {time.perf_counter() - start:8.2f}", flush=True)
        for path in reads:
            url = path.format(h=host, f=fingerprint, s=done.snapshot.pk)
            profiler = cProfile.Profile() if args.profile else None
            start = time.perf_counter()
            if profiler:
                profiler.enable()
            response = client.get(url)
            body = b"".join(response) if response.streaming else response.content
            seconds = time.perf_counter() - start
            if profiler:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
            verdict = "ok" if seconds < PAGE_S and response.status_code < 500 else "SLOW"
            status = "" if response.status_code == 200 else f" ({response.status_code})"
            line = (
                f"{case:<10} {url.replace(host, 'H').replace(fingerprint, 'F') + status:<42} "
                f"{seconds:8.2f} "
                f"{len(body) / 1e6:8.2f}   {verdict}"
            )
            print(line, flush=True)

    preview(client, args.only, args.profile)


# The upload page's preview parses the text and draws its graph in the request, at any size.
PREVIEWS = {
    "nv18-576": lambda: synthetic.nvswitch_domain(576),
    "nics-600": lambda: synthetic.many_nics(8, 600),
    "xml-256x18": lambda: synthetic.nccl_xml(256, nvlinks=18),
}


def preview(client: Any, only: str, profile: bool) -> None:
    if only and only not in "/api/v1/uploads/preview/":
        return
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("bench-uploader"))
    for case, make in PREVIEWS.items():
        text = make()
        profiler = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        response = client.post("/api/v1/uploads/preview/", {"text": text}, "application/json")
        seconds = time.perf_counter() - start
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        verdict = "ok" if seconds < PAGE_S and response.status_code < 500 else "SLOW"
        status = "" if response.status_code == 200 else f" ({response.status_code})"
        line = f"{'POST /api/v1/uploads/preview/' + status:<42} {seconds:8.2f}"
        print(f"{case:<10} {line} {len(response.content) / 1e6:8.2f}   {verdict}", flush=True)


if __name__ == "__main__":
    main()
