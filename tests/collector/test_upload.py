"""Spool and delivery against a local stand-in server: down for a while, refusing, throttling."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.upload import Backoff, Outcome, Spool, SpoolError, Uploader
from tests.collector.conftest import ReportServer, fixture_text

TINY = Backoff(base_s=0.001, cap_s=0.005)
REPO = Path(__file__).resolve().parents[2]


def body(n: int) -> bytes:
    return json.dumps({"hostname": "gpu-a01", "captured_at": f"2026-11-29T10:0{n}:00Z"}).encode()


def uploader(server: ReportServer, spool: Spool, **kwargs: Any) -> Uploader:
    return Uploader(server.url, server.token, spool, timeout_s=5, backoff=TINY, **kwargs)


def test_reports_spooled_while_the_server_is_down_arrive_once_oldest_first_after_a_restart(
    report_server: ReportServer, tmp_path: Path, fake_nvidia_smi: Any
) -> None:
    spool_dir = tmp_path / "spool"
    report_server.down = True
    with Spool(spool_dir) as spool:
        agent = uploader(report_server, spool)
        for n in range(3):
            spool.add(body(n))
            agent.drain(until=agent.clock() + 0.02)  # gives up while the server is down
        assert len(spool.pending()) == 3
    assert report_server.stored == []
    assert {status for status, _ in report_server.requests} == {503}

    # The server comes back; a new agent process starts on the same spool and captures once more.
    report_server.down = False
    token_file = tmp_path / "token"
    token_file.write_text(report_server.token + "\n")
    fake_nvidia_smi(fixture_text("topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"))
    agent_run = subprocess.run(
        [sys.executable, "-m", "collector", "--once", "--server", report_server.url,
         "--token-file", str(token_file), "--spool-dir", str(spool_dir), "--hostname", "gpu-a01"],
        cwd=REPO, env=os.environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert agent_run.returncode == 0, agent_run.stderr
    assert report_server.stored[:3] == [body(0), body(1), body(2)]
    assert len(report_server.stored) == 4
    fourth = json.loads(report_server.stored[3])
    assert fourth["topo_text"].startswith("        GPU0    GPU1    GPU2")
    assert [status for status, _ in report_server.requests[-4:]] == [201, 201, 201, 201]
    assert list((spool_dir / "pending").iterdir()) == []


def test_a_report_resent_after_a_crash_is_stored_once(
    report_server: ReportServer, tmp_path: Path
) -> None:
    with Spool(tmp_path) as spool:
        path = spool.add(body(1))
        kept = path.read_bytes()
        uploader(report_server, spool).drain()
        # A crash between the server's 201 and the unlink: the file is still there on restart.
        spool.add(kept)
        result = uploader(report_server, spool).drain()

    assert [status for status, _ in report_server.requests] == [201, 200]
    assert report_server.stored == [body(1)]
    assert result.delivered[0].response == {"id": 1, "created": False}


def test_a_server_answering_503_for_a_while_gets_everything_once(
    report_server: ReportServer, tmp_path: Path
) -> None:
    report_server.script = [503, 503, 502, 503]
    waits: list[float] = []
    with Spool(tmp_path) as spool:
        for n in range(3):
            spool.add(body(n))
        result = uploader(report_server, spool, sleep=waits.append).drain()

    assert report_server.stored == [body(0), body(1), body(2)]
    assert [d.outcome for d in result.deliveries].count(Outcome.RETRY) == 4
    assert len(waits) == 4 and all(0.0005 <= w <= 0.005 for w in waits)
    assert result.remaining == 0


def test_a_refused_report_is_moved_aside_with_the_reason_and_not_retried(
    report_server: ReportServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    report_server.script = [400]
    with Spool(tmp_path) as spool:
        first = spool.add(body(0))
        spool.add(body(1))
        result = uploader(report_server, spool).drain()

    assert [(s, b) for s, b in report_server.requests] == [(400, body(0)), (201, body(1))]
    rejected = tmp_path / "rejected" / first.name
    assert rejected.read_bytes() == body(0)
    reason = (tmp_path / "rejected" / (first.stem + ".reason.txt")).read_text()
    assert reason == "HTTP 400: scripted 400\n"
    assert f"server refused report {first.name} (HTTP 400: scripted 400)" in caplog.text
    assert [d.outcome for d in result.deliveries] == [Outcome.REJECTED, Outcome.DELIVERED]


def test_a_throttled_report_is_retried(report_server: ReportServer, tmp_path: Path) -> None:
    report_server.script = [429, 429]
    with Spool(tmp_path) as spool:
        spool.add(body(0))
        result = uploader(report_server, spool).drain()

    assert [s for s, _ in report_server.requests] == [429, 429, 201]
    assert report_server.stored == [body(0)]
    assert result.remaining == 0


def test_a_refused_token_keeps_every_report_and_stops(
    report_server: ReportServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Spool(tmp_path) as spool:
        spool.add(body(0))
        spool.add(body(1))
        agent = Uploader(report_server.url, "wrong", spool, timeout_s=5, backoff=TINY)
        result = agent.drain()

    assert [s for s, _ in report_server.requests] == [401]
    assert result.remaining == 2
    assert "server refused the token (HTTP 401: bad token); 2 report(s) kept" in caplog.text


def test_an_unreachable_server_leaves_reports_spooled_until_the_deadline(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.add(body(0))
        # Port 9 (discard) on loopback: nothing listens, the connection is refused.
        agent = Uploader("http://127.0.0.1:9", "t", spool, timeout_s=2, backoff=TINY)
        result = agent.drain(until=agent.clock() + 0.01)

    assert result.remaining == 1
    assert result.stopped_by is not None
    assert result.stopped_by.detail.startswith("server unreachable (")


def test_it_sends_the_token_the_body_and_its_idempotency_key(
    report_server: ReportServer, tmp_path: Path
) -> None:
    with Spool(tmp_path) as spool:
        spool.add(body(0))
        uploader(report_server, spool).drain()

    headers = report_server.headers[0]
    assert headers["Authorization"] == f"Bearer {report_server.token}"
    assert headers["Content-Type"] == "application/json"
    assert headers["Idempotency-Key"] == (hashlib.sha256(body(0)).hexdigest())


def test_a_second_collector_cannot_share_the_spool(tmp_path: Path) -> None:
    with Spool(tmp_path), pytest.raises(SpoolError, match="another collector is using"):
        Spool(tmp_path)


def test_the_spool_names_sort_oldest_first_and_keep_one_copy_of_a_body(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        paths = [spool.add(body(n)) for n in (3, 1, 2)]
        again = spool.add(body(3))
        assert spool.pending() == paths
        assert again == paths[0]
        assert list((tmp_path / "tmp").iterdir()) == []


def test_a_file_that_is_not_a_spooled_report_is_left_alone(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        stray = spool.pending_dir / "notes.json"
        stray.write_text("{}")
        first = spool.add(body(1))
        assert spool.pending() == [first]
        assert stray.exists()


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(base_s=1, cap_s=30, factor=2)
    rng = random.Random(7)
    delays = [backoff.delay(n, rng) for n in range(1, 8)]

    for n, delay in enumerate(delays, start=1):
        ceiling = min(30, 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert delays[-1] >= 15  # capped at 30, never below half of it
    assert len({round(d, 6) for d in delays}) == len(delays)  # jittered, not lock-step
