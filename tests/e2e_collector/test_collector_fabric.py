"""The real collector's `--ibnetdiscover`: it runs ibnetdiscover (a stand-in on PATH replaying
NVIDIA/topograph's real capture) and delivers the fabric to a live topoweb with its token."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from collector import cli
from tests.collector.conftest import fixture_text
from topoweb.fleet.models import FabricCapture
from topoweb.fleet.services import create_collector_token

pytestmark = pytest.mark.django_db(transaction=True)

IBNET_01 = "ibnet_01_dgx-h100-ndr-fabric-40-switches-582-hcas.txt"


def fake_ibnetdiscover(tmp_path: Path, text: str, exit_code: int = 0) -> Path:
    data = tmp_path / "ibnet.txt"
    data.write_text(text)
    script = tmp_path / "ibnetdiscover"
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"if {exit_code!r}:\n"
        "    sys.stderr.write('ibwarn: [1234] mad_rpc_open_port: can\\'t open UMAD port\\n')\n"
        f"    sys.exit({exit_code!r})\n"
        f"sys.stdout.write(pathlib.Path({str(data)!r}).read_text())\n"
    )
    script.chmod(0o755)
    return script


def test_the_collector_sends_the_fabric_once(live_server: Any, tmp_path: Path) -> None:
    token = create_collector_token("gpu-a01")
    script = fake_ibnetdiscover(tmp_path, fixture_text(IBNET_01))
    when = lambda: datetime(2026, 11, 29, 10, 0, tzinfo=UTC)  # noqa: E731
    for _ in range(2):
        assert cli.send_fabric(live_server.url, token, name="ndr-a", command=str(script), now=when)
    capture = FabricCapture.objects.get()
    assert (capture.fabric.name, capture.hostname, capture.source) == (
        "ndr-a",
        "gpu-a01",
        "collector",
    )
    assert (capture.switch_count, capture.link_count) == (40, 1114)
    assert capture.raw_text == fixture_text(IBNET_01)


def test_a_failing_ibnetdiscover_sends_nothing_and_says_why(
    live_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = create_collector_token("gpu-a01")
    script = fake_ibnetdiscover(tmp_path, "", exit_code=1)
    assert not cli.send_fabric(live_server.url, token, name="ndr-a", command=str(script))
    assert "can't open UMAD port" in caplog.text
    assert not FabricCapture.objects.exists()
