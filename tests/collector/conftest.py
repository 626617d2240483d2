"""The edges a GPU host gives the collector, faked: NVML, nvidia-smi on PATH, the topoweb server."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


# ---------------------------------------------------------------- fake NVML


def _words(cpulist: str, count: int) -> list[int]:
    words = [0] * count
    for part in cpulist.split(","):
        low, _, high = part.partition("-")
        for cpu in range(int(low), int(high or low) + 1):
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


@dataclass
class FakeHandle:
    index: int


@dataclass
class FakeStruct:
    """What the binding returns for PCI and memory queries: only the fields read are set."""

    busId: str = ""
    pciDeviceId: int = 0
    total: int = 0


class FakeNvml:
    """pynvml's module functions answered from a profile (see nvml_profiles.py)."""

    FUNCTIONS = (
        "nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion",
        "nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkVersion",
        "nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNvLinkRemotePciInfo",
        "nvmlDeviceGetP2PStatus", "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo",
    )  # fmt: skip

    def __init__(self, profile: dict[str, Any]) -> None:
        self.profile = profile
        self.calls: list[str] = []
        self.initialised = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in self.FUNCTIONS:
            monkeypatch.setattr(pynvml, name, self._entry(name))

    def _entry(self, name: str) -> Callable[..., Any]:
        method = getattr(self, "_" + name)

        def call(*args: Any) -> Any:
            self.calls.append(name)
            if name in self.profile["missing"]:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return method(*args)

        return call

    def _gpu(self, handle: FakeHandle) -> dict[str, Any]:
        return dict(self.profile["gpus"][handle.index])

    @staticmethod
    def _fail(code: int) -> Any:
        raise pynvml.NVMLError(code)

    def _nvmlInit(self) -> None:
        self.initialised += 1

    def _nvmlShutdown(self) -> None:
        self.initialised -= 1

    def _nvmlSystemGetDriverVersion(self) -> str:
        return str(self.profile["driver_version"])

    def _nvmlSystemGetNVMLVersion(self) -> str:
        return str(self.profile["nvml_version"])

    def _nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.profile["cuda"])

    def _nvmlDeviceGetCount(self) -> int:
        return len(self.profile["gpus"])

    def _nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        return FakeHandle(index)

    def _nvmlDeviceGetName(self, h: FakeHandle) -> str:
        return str(self._gpu(h)["name"])

    def _nvmlDeviceGetUUID(self, h: FakeHandle) -> str:
        return str(self._gpu(h)["uuid"])

    def _nvmlDeviceGetPciInfo(self, h: FakeHandle) -> FakeStruct:
        gpu = self._gpu(h)
        return FakeStruct(busId=gpu["bus_id"], pciDeviceId=gpu["device_id"])

    def _nvmlDeviceGetMemoryInfo(self, h: FakeHandle) -> FakeStruct:
        return FakeStruct(total=self._gpu(h)["memory_total"])

    def _nvmlDeviceGetNumaNodeId(self, h: FakeHandle) -> int:
        return self._fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # x86: GPU memory is no NUMA node

    def _nvmlDeviceGetMemoryAffinity(self, h: FakeHandle, size: int, scope: int) -> list[int]:
        assert scope == pynvml.NVML_AFFINITY_SCOPE_NODE
        return _words(self._gpu(h)["numa_nodes"], size)

    def _nvmlDeviceGetCpuAffinity(self, h: FakeHandle, size: int) -> list[int]:
        return _words(self._gpu(h)["cpus"], size)

    def _nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeHandle) -> int:
        return int(self._gpu(h)["pcie"][0])

    def _nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeHandle) -> int:
        return int(self._gpu(h)["pcie"][1])

    def _nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeHandle) -> int:
        return int(self._gpu(h)["pcie"][2])

    def _nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeHandle) -> int:
        return int(self._gpu(h)["pcie"][3])

    def _link(self, h: FakeHandle, link: int) -> dict[str, Any]:
        gpu = self._gpu(h)
        if not gpu["nvlinks"]:
            self._fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a PCIe card, for every link index
        if link >= gpu["nvlink_slots"]:
            self._fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return dict(gpu["nvlinks"][link])

    def _nvmlDeviceGetNvLinkState(self, h: FakeHandle, link: int) -> int:
        return int(self._link(h, link)["state"])

    def _nvmlDeviceGetNvLinkVersion(self, h: FakeHandle, link: int) -> int:
        return int(self._link(h, link)["version"])

    def _nvmlDeviceGetNvLinkRemoteDeviceType(self, h: FakeHandle, link: int) -> int:
        return int(self._link(h, link)["remote_type"])

    def _nvmlDeviceGetNvLinkRemotePciInfo(self, h: FakeHandle, link: int) -> FakeStruct:
        return FakeStruct(busId=self._link(h, link)["remote_bus_id"])

    def _nvmlDeviceGetP2PStatus(self, a: FakeHandle, b: FakeHandle, cap: int) -> int:
        assert isinstance(cap, int), "the caps index must be an int, not the binding's (0,)"
        return int(self.profile["p2p"](a.index, b.index, cap))

    def _fabric(self, h: FakeHandle, ref: Any) -> int:
        fabric = self._gpu(h)["fabric"]
        if fabric is None:
            self._fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = ref._obj  # the struct behind ctypes.byref(), as the C library would fill it
        info.state = fabric["state"]
        info.cliqueId = fabric["clique"]
        info.status = pynvml.NVML_SUCCESS
        for k, byte in enumerate(fabric.get("cluster_uuid", b"\0" * 16)):
            info.clusterUuid[k] = byte
        return int(pynvml.NVML_SUCCESS)

    def _nvmlDeviceGetGpuFabricInfoV(self, h: FakeHandle, ref: Any) -> int:
        return self._fabric(h, ref)

    def _nvmlDeviceGetGpuFabricInfo(self, h: FakeHandle, ref: Any) -> int:
        return self._fabric(h, ref)


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, Any]], FakeNvml]:
    def install(profile: dict[str, Any]) -> FakeNvml:
        fake = FakeNvml(profile)
        fake.install(monkeypatch)
        return fake

    return install


# ---------------------------------------------------------------- fake nvidia-smi


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """An `nvidia-smi` first on PATH that prints a fixture for `topo -m` (and, if given, a
    text for `topo -p2p r`), like the real one; anything else fails as an unknown option."""

    def make(topo: str, p2p: str | None = None, exit_code: int = 0, sleep_s: float = 0) -> Path:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        data = tmp_path / "nvidia-smi-data"
        data.mkdir(exist_ok=True)
        (data / "topo").write_bytes(topo.encode())
        if p2p is not None:
            (data / "p2p").write_bytes(p2p.encode())
        script = bin_dir / "nvidia-smi"
        script.write_text(
            f"""#!{sys.executable}
import sys, time, pathlib
data = pathlib.Path({str(data)!r})
time.sleep({sleep_s!r})
if {exit_code!r}:
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    sys.exit({exit_code!r})
args = sys.argv[1:]
if args == ["topo", "-m"]:
    sys.stdout.buffer.write((data / "topo").read_bytes())
elif args == ["topo", "-p2p", "r"] and (data / "p2p").exists():
    sys.stdout.buffer.write((data / "p2p").read_bytes())
else:
    print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    sys.exit(2)
"""
        )
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        return script

    return make


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- topoweb stand-in


@dataclass
class ReportServer:
    """A local stand-in for `POST /api/v1/reports`: dedupes by body sha256 like the real one,
    and answers scripted statuses first (503 while "down", 400, 429...)."""

    url: str = ""
    token: str = "s3cret-token"
    script: list[int] = field(default_factory=list)  # statuses to answer before storing
    down: bool = False
    stored: list[bytes] = field(default_factory=list)  # each distinct body, in arrival order
    requests: list[tuple[int, bytes]] = field(default_factory=list)  # (answer, body) of each
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: bytes, auth: str | None) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.down:
                status, data = 503, {"error": "maintenance"}
            elif self.script:
                status = self.script.pop(0)
                data = {"error": f"scripted {status}"}
            elif auth != f"Bearer {self.token}":
                status, data = 401, {"error": "bad token"}
            else:
                digest = hashlib.sha256(body).hexdigest()
                known = [hashlib.sha256(b).hexdigest() for b in self.stored]
                if digest in known:
                    status, data = 200, {"id": known.index(digest) + 1, "created": False}
                else:
                    self.stored.append(body)
                    status, data = 201, {"id": len(self.stored), "created": True}
            self.requests.append((status, body))
            return status, data


@pytest.fixture
def report_server() -> Iterator[ReportServer]:
    state = ReportServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.headers.append(dict(self.headers))
            if self.path != "/api/v1/reports":
                status, data = 404, {"error": "not found"}
            else:
                status, data = state.answer(body, self.headers.get("Authorization"))
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
