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
from topoweb.fleet.access import create_collector_token
from topoweb.fleet.models import FabricCapture

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


def test_a_host_whose_hcas_kept_the_default_description_is_found_by_its_collectors_guids(
    live_server: Any, tmp_path: Path, fake_nvidia_smi: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ibnet_01's a06-p1-dgx-02-c06 left its four HCAs' NodeDescription at the firmware's
    default (port 6 of its unit's four rail leaves). Its real collector reads the node GUIDs
    from /sys/class/infiniband/*/node_guid and reports them; another host's collector sends the
    fabric; the analysis names the host, its server and its rails from those GUIDs."""
    import pynvml

    from collector.cli import Settings, run_once
    from collector.upload import Backoff
    from topoweb.core.fabric import build_fabric
    from topoweb.core.formats.ibnet import parse
    from topoweb.fleet import fabric_services
    from topoweb.fleet.fabric_selectors import fabric_detail, server_rails

    host = "a06-p1-dgx-02-c06"
    plain = build_fabric(parse(fixture_text(IBNET_01)))
    on_port_6 = {
        plain.name(h.hcas[0].switch or ""): h.hcas[0].guid
        for h in plain.hosts
        if h.hostname is None and h.hcas[0].port == 6
    }
    devices = {"mlx5_0": "01-02", "mlx5_1": "02-02", "mlx5_4": "03-02", "mlx5_5": "04-02"}
    root = tmp_path / "root"
    for device, leaf in devices.items():
        guid = on_port_6[f"A09-P1-IBLEAF-{leaf}"]
        ib = root / "sys" / "class" / "infiniband" / device
        (ib / "ports" / "1").mkdir(parents=True)
        (ib / "node_guid").write_text(":".join(guid[i : i + 4] for i in range(0, 16, 4)) + "\n")
        (ib / "ports" / "1" / "rate").write_text("400 Gb/sec (4X NDR)\n")

    def no_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    script = fake_nvidia_smi(fixture_text("topo_01_h200-8gpu-12nic-numaid.txt"))
    sent = run_once(
        live_server.url, create_collector_token(host), spool_dir=tmp_path / "spool",
        settings=Settings(nvidia_smi=str(script), hostname=host, host_root=root),
        retry_for_s=5, backoff=Backoff(0.01, 0.05),
    )  # fmt: skip
    assert [d.status for d in sent.deliveries] == [201]
    ibnet = fake_ibnetdiscover(tmp_path, fixture_text(IBNET_01))
    assert cli.send_fabric(
        live_server.url, create_collector_token("gpu-a01"), name="ndr", command=str(ibnet)
    )
    assert fabric_services.analyse_capture(FabricCapture.objects.get().pk) == "done"

    every = fabric_detail("ndr")["analysis"]["hosts"]
    hosts = {h["hostname"]: h for h in every}
    assert hosts[host]["server"] == host
    assert [(c["name"], c["switch"], c["port"], c["rail"]) for c in hosts[host]["hcas"]] == [
        (device, f"A09-P1-IBLEAF-{leaf}", 6, rail)
        for rail, (device, leaf) in enumerate(devices.items())
    ]
    # The four left the 69 HCAs no one names.
    unnamed = [c["guid"] for h in every if h["hostname"] is None for c in h["hcas"]]
    assert len(unnamed) == sum(h.hostname is None for h in plain.hosts) - 4 == 65
    assert not set(unnamed) & {on_port_6[f"A09-P1-IBLEAF-{x}"] for x in devices.values()}
    (rails,) = server_rails(host)
    assert {c["switch"] for c in rails["hcas"]} == {f"A09-P1-IBLEAF-{x}" for x in devices.values()}
