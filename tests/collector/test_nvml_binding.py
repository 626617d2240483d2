"""Contract test: nvidia-ml-py's real ctypes code talks to a tiny C libnvidia-ml.so.1 built here.

The fake library plays a 2x RTX 3090 box joined by an NVLink bridge (NV4, CPUs 0-23, NUMA 0),
as in tests/fixtures/topo_17_rtx3090-2gpu-nv4-bridge-numaid-trailing-prompt.txt. Like an older
driver it lacks nvmlDeviceGetNumaNodeId and the fabric functions, so the binding raises
NVMLError_FunctionNotFound for them and the collector must record "unsupported".
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from collector import nvml

FAKE_LIBRARY = r"""
#include <string.h>

typedef struct { int index; } device_t;
static device_t devices[2] = {{0}, {1}};
static int initialised = 0;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct { unsigned long long total, free, used; } memory_t;

static const char *bus_ids[2] = {"00000000:01:00.0", "00000000:21:00.0"};

static int copy(char *out, unsigned int size, const char *text) {
    if (strlen(text) + 1 > size) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(out, text);
    return 0;
}
static int dev(device_t *d) { return (d == &devices[0] || d == &devices[1]) ? d->index : -1; }

int nvmlInitWithFlags(unsigned int flags) { (void)flags; initialised++; return 0; }
int nvmlInit_v2(void) { initialised++; return 0; }
int nvmlShutdown(void) { if (!initialised) return 1; initialised--; return 0; }
const char *nvmlErrorString(int r) {
    return r == 2 ? "Invalid Argument" : r == 3 ? "Not Supported" : "Unknown Error";
}
int fake_initialised(void) { return initialised; }

int nvmlSystemGetDriverVersion(char *v, unsigned int n) { return copy(v, n, "535.183.01"); }
int nvmlSystemGetNVMLVersion(char *v, unsigned int n) { return copy(v, n, "12.535.183.01"); }
int nvmlSystemGetCudaDriverVersion(int *v) { *v = 12020; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, device_t **d) {
    if (i > 1) return 2;
    *d = &devices[i];
    return 0;
}
int nvmlDeviceGetName(device_t *d, char *name, unsigned int n) {
    if (dev(d) < 0) return 2;
    return copy(name, n, "NVIDIA GeForce RTX 3090");
}
int nvmlDeviceGetUUID(device_t *d, char *uuid, unsigned int n) {
    return copy(uuid, n, dev(d) == 0 ? "GPU-6f0d2c1e-0000-0000-0000-000000000000"
                                     : "GPU-6f0d2c1e-1111-1111-1111-111111111111");
}
int nvmlDeviceGetPciInfo_v3(device_t *d, pci_t *p) {
    memset(p, 0, sizeof *p);
    strcpy(p->busId, bus_ids[dev(d)]);
    p->pciDeviceId = 0x220410DE;
    return 0;
}
int nvmlDeviceGetMemoryInfo(device_t *d, memory_t *m) {
    (void)d; m->total = 25769803776ULL; m->free = m->total; m->used = 0; return 0;
}
int nvmlDeviceGetCpuAffinity(device_t *d, unsigned int size, unsigned long *set) {
    (void)d;
    for (unsigned int k = 0; k < size; k++) set[k] = 0;
    set[0] = (1UL << 24) - 1; /* CPUs 0-23 */
    return 0;
}
int nvmlDeviceGetMemoryAffinity(device_t *d, unsigned int size, unsigned long *set, int scope) {
    (void)d;
    if (scope != 0) return 2;
    for (unsigned int k = 0; k < size; k++) set[k] = 0;
    set[0] = 1; /* NUMA node 0 */
    return 0;
}
int nvmlDeviceGetCurrPcieLinkGeneration(device_t *d, unsigned int *v) { (void)d; *v = 4; return 0; }
int nvmlDeviceGetMaxPcieLinkGeneration(device_t *d, unsigned int *v) { (void)d; *v = 4; return 0; }
int nvmlDeviceGetCurrPcieLinkWidth(device_t *d, unsigned int *v) { (void)d; *v = 16; return 0; }
int nvmlDeviceGetMaxPcieLinkWidth(device_t *d, unsigned int *v) { (void)d; *v = 16; return 0; }

/* GA102 has 4 NVLinks, all bridged to the other card. */
int nvmlDeviceGetNvLinkState(device_t *d, unsigned int link, unsigned int *active) {
    (void)d; if (link >= 4) return 2; *active = 1; return 0;
}
int nvmlDeviceGetNvLinkVersion(device_t *d, unsigned int link, unsigned int *v) {
    (void)d; if (link >= 4) return 2; *v = 4; return 0;
}
int nvmlDeviceGetNvLinkRemoteDeviceType(device_t *d, unsigned int link, int *t) {
    (void)d; if (link >= 4) return 2; *t = 0; return 0; /* GPU */
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(device_t *d, unsigned int link, pci_t *p) {
    if (link >= 4) return 2;
    memset(p, 0, sizeof *p);
    strcpy(p->busId, bus_ids[1 - dev(d)]);
    return 0;
}
int nvmlDeviceGetP2PStatus(device_t *a, device_t *b, int cap, int *status) {
    if (dev(a) < 0 || dev(b) < 0 || cap < 0 || cap > 4) return 2;
    *status = cap == 3 ? 5 : 0; /* atomics NOT_SUPPORTED, the rest OK */
    return 0;
}
"""


@pytest.fixture(scope="module")
def fake_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required to build the fake libnvidia-ml.so.1")
    build = tmp_path_factory.mktemp("fake-nvml")
    source = build / "fake_nvml.c"
    source.write_text(FAKE_LIBRARY)
    library = build / "libnvidia-ml.so.1"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(library), str(source)],
        check=True,
    )
    return library


@pytest.fixture
def real_binding_on_fake_library(
    fake_library: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ctypes.CDLL]:
    library = ctypes.CDLL(str(fake_library))
    monkeypatch.setattr(pynvml, "nvmlLib", library)
    # Function pointers are cached by name: a clean cache makes every lookup hit this library.
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    yield library


def test_the_real_binding_reads_the_fake_library_through_the_collector(
    real_binding_on_fake_library: ctypes.CDLL,
) -> None:
    report = nvml.gather_nvml()

    assert report["available"] is True
    assert report["driver_version"] == "535.183.01"
    assert report["nvml_version"] == "12.535.183.01"
    assert report["cuda_driver_version"] == "12.2"
    first, second = report["gpus"]
    assert first["name"] == "NVIDIA GeForce RTX 3090"
    assert second["uuid"] == "GPU-6f0d2c1e-1111-1111-1111-111111111111"
    assert (first["pci_bus_id"], first["pci_device_id"]) == ("00000000:01:00.0", "0x220410DE")
    assert first["memory_total_bytes"] == 25769803776
    # The topo -m fixture's CPU Affinity and NUMA Affinity cells for GPU0: "0-23" and "0".
    assert (first["cpu_affinity"], first["numa_affinity"]) == ("0-23", "0")
    assert first["pcie"]["current_generation"] == 4
    # NV4: four links, each to the other card.
    assert [(lk["link"], lk["remote_device_type"]) for lk in first["nvlinks"]] == [
        (0, "GPU"), (1, "GPU"), (2, "GPU"), (3, "GPU"),
    ]  # fmt: skip
    assert {lk["remote_pci_bus_id"] for lk in first["nvlinks"]} == {"00000000:21:00.0"}
    assert {lk["remote_pci_bus_id"] for lk in second["nvlinks"]} == {"00000000:01:00.0"}
    assert report["p2p"][0] == {
        "from": 0, "to": 1, "read": "OK", "write": "OK", "nvlink": "OK",
        "atomics": "NOT_SUPPORTED", "prop": "OK",
    }  # fmt: skip
    # Symbols this "driver" lacks: the binding raises FunctionNotFound, recorded as unsupported.
    assert first["gpu_numa_id"] == "unsupported"
    assert first["fabric"] == "unsupported"
    assert real_binding_on_fake_library.fake_initialised() == 0  # init and shutdown balanced


def test_a_missing_symbol_raises_function_not_found_in_the_binding(
    real_binding_on_fake_library: ctypes.CDLL,
) -> None:
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetNumaNodeId(handle)
    finally:
        pynvml.nvmlShutdown()
