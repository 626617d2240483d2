"""What NVML says about the GPUs, as JSON-ready data; what the driver lacks is "unsupported"."""

from __future__ import annotations

import ctypes
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

# Imported as a module and called as `pynvml.nvmlX` on purpose: tests replace those attributes.
import pynvml

UNSUPPORTED = "unsupported"
"""Recorded in place of a value the driver or GPU does not offer (NOT_SUPPORTED, or a symbol an
older libnvidia-ml.so lacks)."""

T = TypeVar("T")

# NVML's own names for the values it returns as bare integers.
_DEVICE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "GPU",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "IBMNPU",
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "SWITCH",
    pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN: "UNKNOWN",
}
_P2P_STATUS = {
    pynvml.NVML_P2P_STATUS_OK: "OK",
    pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED: "CHIPSET_NOT_SUPPORTED",
    pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED: "GPU_NOT_SUPPORTED",
    pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: "IOH_TOPOLOGY_NOT_SUPPORTED",
    pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY: "DISABLED_BY_REGKEY",
    pynvml.NVML_P2P_STATUS_NOT_SUPPORTED: "NOT_SUPPORTED",
    pynvml.NVML_P2P_STATUS_UNKNOWN: "UNKNOWN",
}
# The binding's NVML_P2P_CAPS_INDEX_READ is the tuple (0,) (a stray comma), so spell the ints out.
_P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3), ("prop", 4))
_FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}

# CPU affinity words requested from NVML: enough for 1024 CPUs, more on bigger hosts.
_MIN_AFFINITY_WORDS = 16


def _is_unsupported(err: Exception) -> bool:
    return isinstance(err, pynvml.NVMLError_NotSupported | pynvml.NVMLError_FunctionNotFound)


def _query(fn: Callable[[], T]) -> T | str:
    """One NVML call: its value, UNSUPPORTED, or "error: <NVML's message>" - never an exception."""
    try:
        return fn()
    except pynvml.NVMLError as err:
        return UNSUPPORTED if _is_unsupported(err) else f"error: {err}"


def cpulist(words: Iterable[int]) -> str:
    """A CPU (or NUMA node) bitmask, 64-bit words lowest first, as Linux list text: "0-95,192-287".

    The same notation as the CPU Affinity column of `nvidia-smi topo -m`, so the two agree.
    """
    cpus = [
        word_index * 64 + bit
        for word_index, word in enumerate(words)
        for bit in range(64)
        if (int(word) >> bit) & 1
    ]
    ranges: list[str] = []
    start = prev = -2
    for cpu in cpus + [-1]:
        if cpu == prev + 1:
            prev = cpu
            continue
        if start >= 0:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def _cuda_version(raw: int | str) -> str:
    # NVML encodes CUDA 12.4 as 12040.
    return raw if isinstance(raw, str) else f"{raw // 1000}.{raw % 1000 // 10}"


def _fabric(handle: Any) -> dict[str, Any] | str:
    """Fabric/clique membership (multi-node NVLink); newest struct first, older drivers after."""
    attempts: list[tuple[str, Callable[[], Any]]] = [
        ("nvmlDeviceGetGpuFabricInfoV", lambda: pynvml.c_nvmlGpuFabricInfo_v3_t()),
        ("nvmlDeviceGetGpuFabricInfoV", lambda: pynvml.c_nvmlGpuFabricInfo_v2_t()),
        ("nvmlDeviceGetGpuFabricInfo", lambda: pynvml.c_nvmlGpuFabricInfo_t()),
    ]
    last: Exception | None = None
    for function_name, make_struct in attempts:
        info = make_struct()
        try:
            getattr(pynvml, function_name)(handle, ctypes.byref(info))
        except (pynvml.NVMLError_ArgumentVersionMismatch, pynvml.NVMLError_FunctionNotFound) as err:
            last = err  # this driver wants an older struct or function: try the next one
            continue
        except pynvml.NVMLError as err:
            return UNSUPPORTED if _is_unsupported(err) else f"error: {err}"
        result: dict[str, Any] = {
            "state": _FABRIC_STATES.get(int(info.state), str(int(info.state))),
            "status": int(info.status),
            "cluster_uuid": str(uuid.UUID(bytes=bytes(info.clusterUuid))),
            "clique_id": int(info.cliqueId),
        }
        if hasattr(info, "healthMask"):
            result["health_mask"] = int(info.healthMask)
        return result
    return UNSUPPORTED if last is None or _is_unsupported(last) else f"error: {last}"


def _nvlinks(handle: Any) -> list[dict[str, Any]] | str:
    """Every NVLink the GPU has: state, version, what is at the far end."""
    links: list[dict[str, Any]] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError_FunctionNotFound:
            return UNSUPPORTED
        except pynvml.NVMLError_InvalidArgument:
            break  # past the GPU's last link
        except pynvml.NVMLError_NotSupported:
            continue  # no NVLink at this index (a PCIe card answers this for every link)
        except pynvml.NVMLError as err:
            links.append({"link": link, "state": f"error: {err}"})
            continue
        remote_type = _query(partial(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link))
        remote_pci = _query(partial(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link))
        links.append(
            {
                "link": link,
                "state": "active" if state else "inactive",
                # Raw NVML value (nvmlNvlinkVersion_t); the server names it.
                "version": _query(partial(pynvml.nvmlDeviceGetNvLinkVersion, handle, link)),
                "remote_device_type": (
                    _DEVICE_TYPES.get(remote_type, str(remote_type))
                    if isinstance(remote_type, int)
                    else remote_type
                ),
                "remote_pci_bus_id": (
                    remote_pci if isinstance(remote_pci, str) else str(remote_pci.busId)
                ),
            }
        )
    return links


def _gpu(index: int, handle: Any, affinity_words: int) -> dict[str, Any]:
    pci = _query(lambda: pynvml.nvmlDeviceGetPciInfo(handle))
    memory = _query(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    affinity = _query(lambda: pynvml.nvmlDeviceGetCpuAffinity(handle, affinity_words))
    nodes = _query(
        lambda: pynvml.nvmlDeviceGetMemoryAffinity(
            handle, affinity_words, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
    )
    return {
        "index": index,
        "name": _query(lambda: pynvml.nvmlDeviceGetName(handle)),
        "uuid": _query(lambda: pynvml.nvmlDeviceGetUUID(handle)),
        "pci_bus_id": pci if isinstance(pci, str) else str(pci.busId),
        "pci_device_id": pci if isinstance(pci, str) else f"0x{int(pci.pciDeviceId):08X}",
        "memory_total_bytes": memory if isinstance(memory, str) else int(memory.total),
        # The two NUMA columns of `nvidia-smi topo -m`: the node(s) nearest the GPU, and the
        # GPU's own memory as a NUMA node (coherent systems such as Grace; x86 says N/A).
        "numa_affinity": nodes if isinstance(nodes, str) else cpulist(nodes),
        "gpu_numa_id": _query(lambda: pynvml.nvmlDeviceGetNumaNodeId(handle)),
        "cpu_affinity": affinity if isinstance(affinity, str) else cpulist(affinity),
        "pcie": {
            "current_generation": _query(
                lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)
            ),
            "max_generation": _query(lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            "current_width": _query(lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            "max_width": _query(lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        },
        "nvlinks": _nvlinks(handle),
        "fabric": _fabric(handle),
    }


def _p2p(handles: Sequence[Any]) -> list[dict[str, Any]]:
    """P2P status for every ordered GPU pair (NVML answers per direction)."""
    pairs: list[dict[str, Any]] = []
    for i, first in enumerate(handles):
        for j, second in enumerate(handles):
            if i == j:
                continue
            entry: dict[str, Any] = {"from": i, "to": j}
            for cap_name, cap_index in _P2P_CAPS:
                status = _query(partial(pynvml.nvmlDeviceGetP2PStatus, first, second, cap_index))
                entry[cap_name] = (
                    _P2P_STATUS.get(status, str(status)) if isinstance(status, int) else status
                )
            pairs.append(entry)
    return pairs


def gather_nvml() -> dict[str, Any]:
    """Everything NVML tells about the host's GPUs, or {"available": False, "error": ...}.

    Never raises for NVML's sake: a driver without NVML, or without a given function, yields a
    report that says so.
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return {"available": False, "error": f"{type(err).__name__}: {err}"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        affinity_words = max(_MIN_AFFINITY_WORDS, -(-(os.cpu_count() or 1) // 64))
        cuda = _query(pynvml.nvmlSystemGetCudaDriverVersion)
        return {
            "available": True,
            "driver_version": _query(pynvml.nvmlSystemGetDriverVersion),
            "nvml_version": _query(pynvml.nvmlSystemGetNVMLVersion),
            "cuda_driver_version": _cuda_version(cuda),
            "gpus": [_gpu(i, handle, affinity_words) for i, handle in enumerate(handles)],
            "p2p": _p2p(handles),
        }
    except pynvml.NVMLError as err:
        # Without the device list there is nothing per GPU to report.
        return {"available": False, "error": f"{type(err).__name__}: {err}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass  # shutting down a half-initialised library must not lose the report
