"""Host facts for a report (nvidia-smi topology, DMI/CPU/kernel, RDMA NICs) and its JSON body."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collector import __version__
from collector.nvml import UNSUPPORTED


class GatherError(Exception):
    """nvidia-smi could not give the topology: there is no usable GPU/driver. One-line message."""


def run_nvidia_smi(nvidia_smi: str, args: Sequence[str], timeout_s: float) -> str:
    """stdout of `nvidia-smi ARGS`, exactly as printed; GatherError naming the failure otherwise."""
    command = " ".join(["nvidia-smi", *args])
    try:
        proc = subprocess.run(
            [nvidia_smi, *args], capture_output=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise GatherError(f"{nvidia_smi} not found (no NVIDIA driver installed?)") from None
    except subprocess.TimeoutExpired:
        raise GatherError(f"`{command}` did not finish within {timeout_s:g} s") from None
    except OSError as err:
        raise GatherError(f"cannot run {nvidia_smi}: {err.strerror}") from None
    # nvidia-smi prints ASCII; a stray byte must not cost the whole report.
    out = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        said = (out.strip() or proc.stderr.decode("utf-8", errors="replace").strip()).splitlines()
        detail = said[0].strip() if said else "no output"
        raise GatherError(f"`{command}` failed (exit {proc.returncode}): {detail}")
    return out


def ibnetdiscover(command: str, timeout_s: float) -> str:
    """`ibnetdiscover` output verbatim (the whole fabric, seen from this host's HCA); GatherError
    naming the failure otherwise."""
    try:
        proc = subprocess.run([command], capture_output=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise GatherError(f"{command} not found (install infiniband-diags)") from None
    except subprocess.TimeoutExpired:
        raise GatherError(f"`{command}` did not finish within {timeout_s:g} s") from None
    except OSError as err:
        raise GatherError(f"cannot run {command}: {err.strerror}") from None
    out = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
        detail = said[0].strip() if said else "no output"
        raise GatherError(f"`{command}` failed (exit {proc.returncode}): {detail}")
    return out


def topo_matrix(nvidia_smi: str, timeout_s: float) -> str:
    """The `nvidia-smi topo -m` text, verbatim: the server parses it, so nothing is trimmed."""
    text = run_nvidia_smi(nvidia_smi, ["topo", "-m"], timeout_s)
    if not text.strip():
        raise GatherError("`nvidia-smi topo -m` printed nothing")
    return text


def topo_p2p(nvidia_smi: str, timeout_s: float) -> dict[str, str]:
    """`nvidia-smi topo -p2p r` (P2P read status matrix) where this nvidia-smi knows it."""
    try:
        return {"read": run_nvidia_smi(nvidia_smi, ["topo", "-p2p", "r"], timeout_s)}
    except GatherError:
        return {"read": UNSUPPORTED}  # older drivers have no -p2p; the matrix is optional


def gpu_count_from_topo(topo_text: str) -> int:
    """How many GPU rows `topo -m` shows (for benchmark flags when NVML is unavailable)."""
    rows = {int(m.group(1)) for m in re.finditer(r"^\s*GPU(\d+)\s+(?!GPU)\S", topo_text, re.M)}
    return len(rows)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None  # absent in VMs/containers, or root-only on some hosts


def _cpu_model(cpuinfo: Path) -> str | None:
    text = _read(cpuinfo) or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return None  # Arm hosts (Grace) name no model in /proc/cpuinfo


def rdma_nics(sys_root: Path) -> list[dict[str, Any]]:
    """Every RDMA device port under SYS_ROOT/class/infiniband with its rate, state and PCI place."""
    nics: list[dict[str, Any]] = []
    base = sys_root / "class" / "infiniband"
    if not base.is_dir():
        return nics
    for device in sorted(base.iterdir()):
        pci_dir = device / "device"
        pci_bus_id = os.path.basename(os.path.realpath(pci_dir)) if pci_dir.exists() else None
        numa = _read(pci_dir / "numa_node")
        # The HCA's node GUID (`e09d:7303:007a:4bd8`): ibnetdiscover prints it, so the server
        # finds this host in a fabric capture even when the HCA's NodeDescription was never set.
        node_guid = _read(device / "node_guid")
        ports_dir = device / "ports"
        ports = (
            sorted(ports_dir.iterdir(), key=lambda p: (len(p.name), p.name))
            if ports_dir.is_dir()
            else []
        )
        for port in ports:
            rate = _read(port / "rate")
            gbps = re.match(r"([\d.]+)\s*Gb/sec", rate or "")
            state = _read(port / "state")
            nics.append(
                {
                    "device": device.name,
                    "port": int(port.name) if port.name.isdigit() else port.name,
                    "rate": rate,
                    "rate_gbps": float(gbps.group(1)) if gbps else None,
                    # sysfs says "4: ACTIVE"; the number is only the enum value of the name.
                    "state": (state.partition(": ")[2] or state) if state else None,
                    "link_layer": _read(port / "link_layer"),
                    "pci_bus_id": pci_bus_id,
                    "numa_node": int(numa) if numa and re.fullmatch(r"-?\d+", numa) else None,
                    "node_guid": node_guid,
                }
            )
    return nics


def host_facts(root: Path = Path("/")) -> dict[str, Any]:
    """DMI product name and vendor (the SKU), CPU model, kernel, RDMA NICs of the host at ROOT."""
    dmi = root / "sys" / "class" / "dmi" / "id"
    return {
        "product_name": _read(dmi / "product_name"),
        "sys_vendor": _read(dmi / "sys_vendor"),
        "cpu_model": _cpu_model(root / "proc" / "cpuinfo"),
        # Containers share the host's kernel, so this is right inside a DaemonSet too.
        "kernel": os.uname().release,
        "rdma_nics": rdma_nics(root / "sys"),
    }


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_report(
    *,
    hostname: str,
    captured_at: datetime,
    topo_text: str,
    nvml: dict[str, Any] | None,
    host: dict[str, Any] | None,
    benchmarks: Sequence[dict[str, str]] = (),
    nccl_xml: str | None = None,
) -> dict[str, Any]:
    """The body of `POST /api/v1/reports`, as the server's contract names its fields."""
    report: dict[str, Any] = {
        "hostname": hostname,
        "captured_at": captured_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "collector_version": __version__,
        "topo_text": topo_text,
    }
    if nvml is not None:
        report["nvml"] = nvml
    if host is not None:
        report["host"] = host
    if benchmarks:
        report["benchmarks"] = list(benchmarks)
    if nccl_xml:
        report["nccl_xml"] = nccl_xml
    return report


def read_nccl_topology(path: Path) -> str | None:
    """An NCCL topology XML someone already dumped (NCCL_TOPO_DUMP_FILE) or wrote
    (NCCL_TOPO_FILE); None, logged by the caller, when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text if text.strip() else None


def encode_report(report: dict[str, Any]) -> bytes:
    """The exact bytes sent, spooled and printed by --dry-run (encoded once per capture)."""
    return json.dumps(report, ensure_ascii=True, separators=(",", ":")).encode("ascii")
