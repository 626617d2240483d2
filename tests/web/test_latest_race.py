"""Reports of one host arriving in parallel (issue 24 item 7): the server's current snapshot
is the newest capture, whatever order the requests commit in."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from tests.web.conftest import collector_client_for, report
from topoweb.fleet.models import Server, Snapshot

START = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def burst(hostname: str, count: int, round_: int) -> list[int]:
    """`count` distinct reports of one host posted at once, each from its own thread and
    database connection; their status codes."""
    client = collector_client_for(hostname)
    ready = threading.Barrier(count)
    codes: list[int] = []

    def post(n: int) -> None:
        captured = START + timedelta(minutes=100 * round_ + n)
        body = report(
            hostname,
            captured_at=captured.isoformat().replace("+00:00", "Z"),
            host={"kernel": f"6.8.0-{round_}-{n}"},  # distinct content: no duplicate
        )
        ready.wait()
        try:
            codes.append(client.post("/api/v1/reports", body, format="json").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


@pytest.mark.django_db(transaction=True)
def test_twenty_parallel_reports_leave_the_newest_capture_current() -> None:
    for round_ in range(3):
        codes = burst("race-01", 20, round_)
        assert codes == [201] * 20, codes
        server = Server.objects.select_related("latest_snapshot").get(hostname="race-01")
        newest = Snapshot.objects.filter(server=server).order_by("-captured_at").first()
        assert newest is not None
        assert server.latest_snapshot_id == newest.pk, (
            f"round {round_}: current {server.latest_snapshot.captured_at}, "
            f"newest {newest.captured_at}"
        )
        assert server.topology_class_id == newest.topology_class_id
