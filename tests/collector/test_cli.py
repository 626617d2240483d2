"""The command line: dry-run prints what upload sends; one line without a GPU; interval mode."""

from __future__ import annotations

import errno
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from collector import __version__, cli, gather
from collector.upload import Backoff
from tests.collector.conftest import ReportServer, fixture_text
from tests.collector.nvml_profiles import h100_nvswitch

H100_TOPO = "topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"
FIXED = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gather, "utc_now", lambda: FIXED)


def test_dry_run_prints_exactly_the_body_that_upload_sends(
    fake_nvidia_smi: Any,
    fake_nvml: Any,
    fixed_clock: None,
    report_server: ReportServer,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    fake_nvidia_smi(fixture_text(H100_TOPO))
    fake_nvml(h100_nvswitch())
    token = tmp_path / "token"
    token.write_text(report_server.token)
    common = ["--hostname", "gpu-a01", "--host-root", str(tmp_path / "root")]

    assert cli.main(["--dry-run", *common]) == 0
    printed = capsysbinary.readouterr().out
    assert cli.main(["--once", "--server", report_server.url, "--token-file", str(token),
                     "--spool-dir", str(tmp_path / "spool"), *common]) == 0  # fmt: skip

    assert report_server.stored == [printed]
    report = json.loads(printed)
    assert list(report) == ["hostname", "captured_at", "collector_version", "topo_text", "nvml",
                            "host"]  # fmt: skip
    assert report["hostname"] == "gpu-a01"
    assert report["captured_at"] == "2026-11-29T10:00:00Z"
    assert report["collector_version"] == __version__
    assert report["topo_text"] == fixture_text(H100_TOPO)
    assert report["nvml"]["gpus"][7]["nvlinks"][17]["remote_device_type"] == "SWITCH"
    assert report["host"]["topo_p2p"] == {"read": "unsupported"}


def test_without_nvml_the_report_is_still_made_and_says_so(
    fake_nvidia_smi: Any, fixed_clock: None, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # No fake NVML: the real binding finds no libnvidia-ml.so.1 on this machine.
    fake_nvidia_smi(fixture_text("topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt"))

    assert cli.main(["--dry-run", "--hostname", "gpu-b07"]) == 0

    report = json.loads(capsysbinary.readouterr().out)
    assert report["nvml"] == {
        "available": False,
        "error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found",
    }
    assert report["topo_text"].startswith("(miss-alignment) ***@***.*** rln5_2d3]$ nvidia-smi")


def test_without_a_gpu_it_says_so_in_one_line_and_exits_non_zero(
    fake_nvidia_smi: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_nvidia_smi("", exit_code=9)
    monkeypatch.setenv("TOPOWEB_TOKEN", "s3cret")

    status = cli.main(["--once", "--server", "https://topoweb.example.org",
                       "--spool-dir", str(tmp_path)])  # fmt: skip

    captured = capsys.readouterr()
    assert status == cli.EXIT_NO_GPU
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith("topoweb-collector: no usable NVIDIA GPU/driver: ")


def test_without_a_token_it_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TOPOWEB_TOKEN", raising=False)

    status = cli.main(["--server", "https://topoweb.example.org", "--spool-dir", str(tmp_path)])

    assert status == cli.EXIT_USAGE
    assert "no token: give --token-file or set TOPOWEB_TOKEN" in capsys.readouterr().err


def test_interval_mode_keeps_trying_at_the_interval_without_a_gpu(
    fake_nvidia_smi: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_nvidia_smi("", exit_code=9)
    sleeps: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    cli.run_interval("http://127.0.0.1:9", "t", spool_dir=tmp_path, interval_s=60, cycles=3,
                     sleep=sleep, clock=lambda: now[0], jitter=lambda spread: 0.0)  # fmt: skip

    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 3
    assert all("trying again in 60 s" in line for line in errors)
    assert sleeps == [3, 60, 60, 60]  # the middle of the start spread (a tenth), then 60 s


def test_interval_mode_spreads_captures_so_a_fleet_does_not_report_in_lockstep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = iter([-150.0, 40.0, -10.0, 150.0])
    now = [0.0]
    starts: list[float] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def capture(settings: Any) -> bytes:
        starts.append(now[0])
        raise cli.gather.GatherError("no GPU")

    monkeypatch.setattr(cli, "capture", capture)

    cli.run_interval("http://127.0.0.1:9", "t", spool_dir=tmp_path, interval_s=3600, cycles=3,
                     sleep=sleep, clock=lambda: now[0],
                     jitter=lambda spread: next(offsets))  # fmt: skip

    # Spread: a tenth of the hour capped at 300 s; the start at 150 - 150 s, then 3600 + offset.
    assert starts == [0.0, 3640.0, 7230.0]


def test_the_default_jitter_differs_between_hosts_and_stays_within_the_spread() -> None:
    spread = cli.jitter_spread(3600)
    offsets = [cli.random_jitter(spread) for _ in range(200)]

    assert spread == 300
    assert all(-150 <= offset <= 150 for offset in offsets)
    assert len(set(offsets)) > 150
    assert min(offsets) < -100 and max(offsets) > 100


def test_interval_mode_captures_and_delivers_each_time(
    fake_nvidia_smi: Any,
    fake_nvml: Any,
    report_server: ReportServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_nvidia_smi(fixture_text(H100_TOPO))
    fake_nvml(h100_nvswitch())
    stamps = iter(datetime(2026, 11, 29, 10, minute, tzinfo=UTC) for minute in range(3))
    monkeypatch.setattr(gather, "utc_now", lambda: next(stamps))

    cli.run_interval(report_server.url, report_server.token, spool_dir=tmp_path, interval_s=0.01,
                     cycles=3, backoff=Backoff(0.001, 0.002),
                     settings=cli.Settings(hostname="gpu-a01"))  # fmt: skip

    captured = [json.loads(b)["captured_at"] for b in report_server.stored]
    assert captured == ["2026-11-29T10:00:00Z", "2026-11-29T10:01:00Z", "2026-11-29T10:02:00Z"]
    assert list((tmp_path / "pending").iterdir()) == []


def test_a_full_disk_still_delivers_the_report_and_leaves_no_partial_spool_file(
    fake_nvidia_smi: Any,
    fake_nvml: Any,
    fixed_clock: None,
    report_server: ReportServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_nvidia_smi(fixture_text(H100_TOPO))
    fake_nvml(h100_nvswitch())
    token = tmp_path / "token"
    token.write_text(report_server.token)
    full_disk(monkeypatch)

    status = cli.main(["--once", "--server", report_server.url, "--token-file", str(token),
                       "--spool-dir", str(tmp_path / "spool"), "--hostname", "gpu-a01",
                       "--host-root", str(tmp_path / "root")])  # fmt: skip

    assert status == 0
    assert len(report_server.stored) == 1
    assert json.loads(report_server.stored[0])["hostname"] == "gpu-a01"
    assert list((tmp_path / "spool" / "tmp").iterdir()) == []
    assert list((tmp_path / "spool" / "pending").iterdir()) == []


def test_interval_mode_on_a_full_disk_still_delivers_each_capture(
    fake_nvidia_smi: Any,
    fake_nvml: Any,
    report_server: ReportServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_nvidia_smi(fixture_text(H100_TOPO))
    fake_nvml(h100_nvswitch())
    stamps = iter(datetime(2026, 11, 29, 10, minute, tzinfo=UTC) for minute in range(2))
    monkeypatch.setattr(gather, "utc_now", lambda: next(stamps))
    full_disk(monkeypatch)

    cli.run_interval(report_server.url, report_server.token, spool_dir=tmp_path, interval_s=0.01,
                     cycles=2, backoff=Backoff(0.001, 0.002),
                     settings=cli.Settings(hostname="gpu-a01"))  # fmt: skip

    captured = [json.loads(b)["captured_at"] for b in report_server.stored]
    assert captured == ["2026-11-29T10:00:00Z", "2026-11-29T10:01:00Z"]
    assert list((tmp_path / "tmp").iterdir()) == []


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file write fails at fsync with ENOSPC, as on a full disk; directories still sync."""
    real_fsync = os.fsync

    def disk_full(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            real_fsync(fd)
            return
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
