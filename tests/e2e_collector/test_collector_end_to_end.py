"""The real collector uploading to a live topoweb (PostgreSQL behind it), with a real collector
token: stored once, deduplicated, spooled while the server is away, refused for another host."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml
import pytest

from collector import __version__, cli, gather
from collector.cli import Settings, run_once
from collector.upload import Backoff, FlushResult, Outcome
from tests.collector.conftest import fixture_text
from tests.collector.nvml_profiles import h100_nvswitch
from topoweb.fleet.access import create_collector_token
from topoweb.fleet.models import Server, Snapshot

pytestmark = pytest.mark.django_db(transaction=True)

H200 = "topo_01_h200-8gpu-12nic-numaid.txt"
H100 = "topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt"
NVML_MISSING = {
    "available": False,
    "error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found",
}
FAST = Backoff(0.01, 0.05)


def at(hour: int, minute: int = 0) -> Callable[[], datetime]:
    return lambda: datetime(2026, 11, 29, hour, minute, tzinfo=UTC)


def make_host_root(
    root: Path, product: str = "HGX H200 8-GPU", nic_state: str = "4: ACTIVE", rate: int = 400
) -> Path:
    """A host's /sys as the collector reads it: DMI product name and one RDMA port."""
    dmi = root / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True, exist_ok=True)
    (dmi / "product_name").write_text(product + "\n")
    (dmi / "sys_vendor").write_text("Supermicro\n")
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True, exist_ok=True)
    (port / "rate").write_text(f"{rate} Gb/sec (4X NDR)\n")
    (port / "state").write_text(nic_state + "\n")
    (port / "link_layer").write_text("InfiniBand\n")
    return root


def nothing_listening() -> str:
    """A local URL where no server listens: connections are refused, as when topoweb is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML cannot be loaded (nvidia-smi works): forced, so a host with a driver behaves alike."""

    def missing_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing_library)


@pytest.fixture
def h200_host(fake_nvidia_smi: Any, no_nvml: None, tmp_path: Path) -> Settings:
    """gpu-a01: an H200 box whose nvidia-smi replays topo_01, without NVML."""
    script = fake_nvidia_smi(fixture_text(H200))
    return Settings(
        nvidia_smi=str(script), hostname="gpu-a01", host_root=make_host_root(tmp_path / "root")
    )


def statuses(result: FlushResult) -> list[int | None]:
    return [d.status for d in result.deliveries]


def pending(spool: Path) -> list[str]:
    return sorted(p.name for p in (spool / "pending").glob("*.json"))


def test_a_report_is_stored_once_and_the_same_capture_again_is_a_duplicate(
    live_server: Any, h200_host: Settings, tmp_path: Path
) -> None:
    token = create_collector_token("gpu-a01")
    spool = tmp_path / "spool"

    first = run_once(live_server.url, token, spool_dir=spool, settings=h200_host,
                     retry_for_s=5, backoff=FAST, now=at(10))  # fmt: skip

    assert statuses(first) == [201]
    assert first.remaining == 0 and pending(spool) == []
    server = Server.objects.get()
    snapshot = Snapshot.objects.get()
    assert first.deliveries[0].response == {
        "id": snapshot.pk,
        "kind": "topology",
        "hostname": "gpu-a01",
        "created": True,
        "warnings": [],
    }
    assert server.hostname == "gpu-a01"
    assert server.sku_name == "HGX H200 8-GPU"  # the DMI product name names the SKU
    assert server.latest_snapshot_id == snapshot.pk
    assert (snapshot.gpu_count, snapshot.nic_count) == (8, 12)
    assert snapshot.nvlink_summary == "NV18 x28"
    assert snapshot.raw_text == fixture_text(H200)
    assert snapshot.source == "collector"
    assert snapshot.collector_version == __version__
    assert snapshot.captured_at == at(10)()
    assert snapshot.host["rdma_nics"][0]["rate_gbps"] == 400.0

    # An hour later nothing changed on the host: the server keeps the first capture.
    again = run_once(live_server.url, token, spool_dir=spool, settings=h200_host,
                     retry_for_s=5, backoff=FAST, now=at(11))  # fmt: skip

    assert statuses(again) == [200]
    assert again.deliveries[0].response == {
        "id": snapshot.pk,
        "kind": "topology",
        "hostname": "gpu-a01",
        "created": False,
        "warnings": [],
    }
    assert Snapshot.objects.count() == 1 and Server.objects.count() == 1
    assert Snapshot.objects.get().captured_at == at(10)()
    assert pending(spool) == []


def test_without_nvml_the_report_is_stored_and_says_nvml_was_unavailable(
    live_server: Any, h200_host: Settings, tmp_path: Path
) -> None:
    token = create_collector_token("gpu-a01")

    result = run_once(live_server.url, token, spool_dir=tmp_path / "spool", settings=h200_host,
                      retry_for_s=5, backoff=FAST)  # fmt: skip

    assert statuses(result) == [201]
    snapshot = Snapshot.objects.get()
    assert snapshot.nvml == NVML_MISSING
    assert snapshot.gpu_count == 8  # read from the topology text alone
    assert snapshot.gpu_model == ""  # only NVML names the model; nothing is made up


def test_nvml_facts_from_the_fake_driver_arrive_in_the_snapshot(
    live_server: Any, fake_nvidia_smi: Any, fake_nvml: Any, tmp_path: Path
) -> None:
    fake_nvml(h100_nvswitch())
    settings = Settings(
        nvidia_smi=str(fake_nvidia_smi(fixture_text(H100))),
        hostname="gpu-h07",
        host_root=make_host_root(tmp_path / "root", product="DGX H100"),
    )
    token = create_collector_token("gpu-h07")

    result = run_once(live_server.url, token, spool_dir=tmp_path / "spool", settings=settings,
                      retry_for_s=5, backoff=FAST)  # fmt: skip

    assert statuses(result) == [201]
    snapshot = Snapshot.objects.get()
    nvml = snapshot.nvml
    assert nvml["available"] is True
    assert (nvml["driver_version"], nvml["cuda_driver_version"]) == ("550.54.15", "12.4")
    assert [g["name"] for g in nvml["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 8
    assert nvml["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    assert nvml["gpus"][4]["cpu_affinity"] == "96-191,288-383"
    assert len(nvml["gpus"][7]["nvlinks"]) == 18
    assert nvml["gpus"][7]["nvlinks"][17]["remote_device_type"] == "SWITCH"
    assert nvml["gpus"][7]["nvlinks"][17]["remote_pci_bus_id"] == "00000000:08:00.0"
    assert snapshot.gpu_model == "NVIDIA H100 80GB HBM3"  # NVML's name is authoritative
    assert (snapshot.gpu_count, snapshot.nvlink_summary) == (8, "NV18 x28")
    assert Server.objects.get().sku_name == "DGX H100"


def test_reports_spooled_while_the_server_was_down_each_arrive_once_oldest_first(
    live_server: Any, fake_nvidia_smi: Any, no_nvml: None, tmp_path: Path
) -> None:
    script = str(fake_nvidia_smi(fixture_text(H200)))
    token = create_collector_token("gpu-a01")
    spool = tmp_path / "spool"
    down = nothing_listening()
    # The InfiniBand port changes between captures, so each report is new content.
    ports = [("4: ACTIVE", 400), ("1: DOWN", 400), ("4: ACTIVE", 200), ("4: ACTIVE", 100)]

    def capture(hour: int, server: str) -> FlushResult:
        state, rate = ports[hour - 10]
        root = make_host_root(tmp_path / f"root{hour}", nic_state=state, rate=rate)
        settings = Settings(nvidia_smi=script, hostname="gpu-a01", host_root=root)
        return run_once(server, token, spool_dir=spool, settings=settings, retry_for_s=0.2,
                        http_timeout_s=2, backoff=FAST, now=at(hour))  # fmt: skip

    for hour in (10, 11, 12):
        while_down = capture(hour, down)
        assert while_down.delivered == []
        assert while_down.stopped_by is not None
        assert while_down.stopped_by.outcome is Outcome.RETRY
        assert while_down.stopped_by.detail.startswith("server unreachable")
        assert while_down.remaining == hour - 9
    assert Snapshot.objects.count() == 0

    back = capture(13, live_server.url)

    assert statuses(back) == [201, 201, 201, 201]
    assert back.remaining == 0 and pending(spool) == []
    stored = list(Snapshot.objects.order_by("id"))
    assert [s.captured_at for s in stored] == [at(h)() for h in (10, 11, 12, 13)]
    assert [d.response["id"] for d in back.deliveries] == [s.pk for s in stored]
    assert [s.host["rdma_nics"][0]["state"] for s in stored] == [
        "ACTIVE", "DOWN", "ACTIVE", "ACTIVE"
    ]  # fmt: skip
    assert [s.host["rdma_nics"][0]["rate_gbps"] for s in stored] == [400, 400, 200, 100]
    assert Server.objects.get().latest_snapshot_id == stored[-1].pk


def test_a_token_for_another_host_leaves_the_report_pending_and_stores_nothing(
    live_server: Any, h200_host: Settings, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    other_host = create_collector_token("gpu-b02")

    refused = run_once(live_server.url, other_host, spool_dir=spool, settings=h200_host,
                       retry_for_s=5, backoff=FAST, now=at(10))  # fmt: skip

    assert statuses(refused) == [403]  # one try: a wrong token is not retried in a loop
    assert refused.stopped_by is not None and refused.stopped_by.outcome is Outcome.AUTH
    assert "may write reports for 'gpu-b02' only" in refused.stopped_by.detail
    assert refused.remaining == 1 and len(pending(spool)) == 1
    assert list((spool / "rejected").iterdir()) == []  # kept to send, not set aside

    unknown = run_once(live_server.url, "twc_not-a-token", spool_dir=spool, settings=h200_host,
                       retry_for_s=5, backoff=FAST, now=at(11))  # fmt: skip

    assert statuses(unknown) == [401]  # the oldest report is tried first, and stops the pass
    assert unknown.remaining == 2
    assert Snapshot.objects.count() == 0 and Server.objects.count() == 0

    # The operator installs the right token: the waiting report goes through.
    fixed = run_once(live_server.url, create_collector_token("gpu-a01"), spool_dir=spool,
                     settings=h200_host, retry_for_s=5, backoff=FAST, now=at(12))  # fmt: skip

    # Three captures of an unchanged host: all delivered, one snapshot, the oldest capture's.
    assert statuses(fixed) == [201, 200, 200]
    assert Snapshot.objects.get().captured_at == at(10)()
    assert pending(spool) == []


def test_the_dry_run_body_posted_by_hand_is_the_report_the_agent_uploads(
    live_server: Any,
    fake_nvidia_smi: Any,
    fake_nvml: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    fake_nvml(h100_nvswitch())
    script = str(fake_nvidia_smi(fixture_text(H100)))
    root = make_host_root(tmp_path / "root", product="DGX H100")
    monkeypatch.setattr(gather, "utc_now", at(10))
    token = create_collector_token("gpu-h07")

    assert cli.main(["--dry-run", "--hostname", "gpu-h07", "--nvidia-smi", script,
                     "--host-root", str(root)]) == 0  # fmt: skip
    body = capsysbinary.readouterr().out
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/reports",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        by_hand = (answer.status, json.loads(answer.read()))

    snapshot = Snapshot.objects.get()
    assert by_hand == (
        201,
        {
            "id": snapshot.pk,
            "kind": "topology",
            "hostname": "gpu-h07",
            "created": True,
            "warnings": [],
        },
    )
    sent = json.loads(body)
    assert snapshot.raw_text == sent["topo_text"] == fixture_text(H100)
    assert (snapshot.nvml, snapshot.host) == (sent["nvml"], sent["host"])

    agent = run_once(live_server.url, token, spool_dir=tmp_path / "spool",
                     settings=Settings(nvidia_smi=script, hostname="gpu-h07", host_root=root),
                     retry_for_s=5, backoff=FAST)  # fmt: skip

    # The agent's upload is recognised as the very report already posted by hand.
    assert statuses(agent) == [200]
    assert agent.deliveries[0].response == {
        "id": snapshot.pk,
        "kind": "topology",
        "hostname": "gpu-h07",
        "created": False,
        "warnings": [],
    }
    assert Snapshot.objects.count() == 1
