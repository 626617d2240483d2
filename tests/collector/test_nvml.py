"""NVML gathering with the fake NVML fed by real machine profiles, and with no library at all."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pynvml
import pytest

from collector import nvml
from tests.collector.conftest import fixture_text
from tests.collector.nvml_profiles import dgx1_links, dgx1_v100_mesh, h100_nvswitch, l40s_pcie


def topo_rows(name: str) -> dict[str, list[str]]:
    """GPU rows of a topo -m fixture, split on whitespace: {"GPU0": ["X", "NV18", ...]}."""
    rows = {}
    for line in fixture_text(name).splitlines():
        cells = line.split()
        if len(cells) > 2 and cells[0].startswith("GPU") and not cells[1].startswith("GPU"):
            rows[cells[0]] = cells[1:]
    return rows


def test_it_describes_an_h100_nvswitch_box_as_its_topology_shows(fake_nvml: Any) -> None:
    fake = fake_nvml(h100_nvswitch())

    report = nvml.gather_nvml()

    assert report["available"] is True
    assert report["driver_version"] == "550.54.15"
    assert report["cuda_driver_version"] == "12.4"
    gpus = report["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[4]["pci_bus_id"] == "00000000:9A:00.0"
    assert gpus[0]["pci_device_id"] == "0x233010DE"
    assert gpus[0]["memory_total_bytes"] == 85520809984
    # CPU and NUMA affinity agree with the CPU Affinity / NUMA Affinity columns of topo -m.
    rows = topo_rows("topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt")
    for gpu in gpus:
        row = rows[f"GPU{gpu['index']}"]
        assert (gpu["cpu_affinity"], gpu["numa_affinity"]) == (row[8], row[9])
    assert gpus[7]["cpu_affinity"] == "96-191,288-383"
    assert gpus[0]["gpu_numa_id"] == "unsupported"  # topo -m: GPU NUMA ID N/A
    assert gpus[2]["pcie"] == {
        "current_generation": 5, "max_generation": 5, "current_width": 16, "max_width": 16,
    }  # fmt: skip
    # NV18 in every cell: 18 active links per GPU, every one to an NVSwitch.
    links = gpus[5]["nvlinks"]
    assert len(links) == 18
    assert {(lk["state"], lk["remote_device_type"]) for lk in links} == {("active", "SWITCH")}
    assert links[0]["version"] == pynvml.NVML_NVLINK_VERSION_4_0
    assert Counter(lk["remote_pci_bus_id"] for lk in links) == {
        "00000000:05:00.0": 5, "00000000:06:00.0": 4, "00000000:07:00.0": 4, "00000000:08:00.0": 5,
    }  # fmt: skip
    assert gpus[0]["fabric"]["state"] == "NOT_SUPPORTED"
    assert len(report["p2p"]) == 8 * 7
    assert report["p2p"][0] == {
        "from": 0, "to": 1, "read": "OK", "write": "OK", "nvlink": "OK", "atomics": "OK",
        "prop": "OK",
    }  # fmt: skip
    assert fake.initialised == 0  # nvmlShutdown balanced nvmlInit


def test_it_counts_the_dgx1_mesh_links_per_peer_like_the_nv_cells(fake_nvml: Any) -> None:
    fake_nvml(dgx1_v100_mesh())

    report = nvml.gather_nvml()

    gpus = report["gpus"]
    bus_to_index = {g["pci_bus_id"]: g["index"] for g in gpus}
    rows = topo_rows("topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt")
    for gpu in gpus:
        per_peer = Counter(bus_to_index[lk["remote_pci_bus_id"]] for lk in gpu["nvlinks"])
        expected = {
            j: int(cell[2:]) for j, cell in enumerate(rows[f"GPU{gpu['index']}"][:8])
            if cell.startswith("NV")
        }  # fmt: skip
        assert per_peer == expected
        assert len(gpu["nvlinks"]) == 6
    assert dgx1_links()[0] == [1, 1, 2, 2, 3, 4]
    # The older driver lacks these functions: recorded, not fatal.
    assert gpus[0]["nvlinks"][0]["remote_device_type"] == "unsupported"
    assert gpus[0]["numa_affinity"] == "unsupported"
    assert gpus[0]["fabric"] == "unsupported"
    assert gpus[0]["cpu_affinity"] == "0-19"
    assert report["cuda_driver_version"] == "10.1"
    pairs = {(p["from"], p["to"]): p for p in report["p2p"]}
    assert pairs[(0, 1)]["read"] == "OK"
    assert pairs[(0, 5)]["read"] == "IOH_TOPOLOGY_NOT_SUPPORTED"
    assert pairs[(0, 5)]["nvlink"] == "NOT_SUPPORTED"


def test_it_reports_a_pcie_only_box_with_no_nvlinks_and_a_downtrained_link(
    fake_nvml: Any,
) -> None:
    fake_nvml(l40s_pcie())

    report = nvml.gather_nvml()

    gpus = report["gpus"]
    assert [g["nvlinks"] for g in gpus] == [[], [], [], []]
    assert gpus[3]["pcie"] == {
        "current_generation": 4, "max_generation": 4, "current_width": 8, "max_width": 16,
    }  # fmt: skip
    rows = topo_rows("topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt")
    assert [g["cpu_affinity"] for g in gpus] == [rows[f"GPU{i}"][6] for i in range(4)]
    assert [g["numa_affinity"] for g in gpus] == ["0", "0", "1", "1"]
    pairs = {(p["from"], p["to"]): p for p in report["p2p"]}
    assert (pairs[(0, 1)]["read"], pairs[(0, 2)]["read"]) == ("OK", "CHIPSET_NOT_SUPPORTED")
    assert gpus[1]["fabric"] == "unsupported"


def test_it_records_an_nvml_failure_other_than_unsupported_as_an_error(
    fake_nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml(l40s_pcie())

    def no_permission(handle: Any) -> str:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", no_permission)

    report = nvml.gather_nvml()

    assert report["gpus"][0]["uuid"] == "error: Insufficient Permissions"
    assert report["gpus"][0]["name"] == "NVIDIA L40S"


def test_it_reads_a_multi_node_nvlink_clique_from_the_fabric_info(fake_nvml: Any) -> None:
    profile = h100_nvswitch()
    for gpu in profile["gpus"]:
        gpu["fabric"] = {
            "state": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
            "clique": 32766,
            "cluster_uuid": bytes(range(16)),
        }
    fake_nvml(profile)

    fabric = nvml.gather_nvml()["gpus"][3]["fabric"]

    assert fabric["state"] == "COMPLETED"
    assert fabric["clique_id"] == 32766
    assert fabric["cluster_uuid"] == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert fabric["status"] == pynvml.NVML_SUCCESS


def test_it_falls_back_to_the_older_fabric_struct_when_the_driver_wants_it(
    fake_nvml: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_nvml(h100_nvswitch())
    seen: list[str] = []

    def versioned(handle: Any, ref: Any) -> int:
        seen.append(type(ref._obj).__name__)
        if isinstance(ref._obj, pynvml.c_nvmlGpuFabricInfo_v3_t):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return fake._fabric(handle, ref)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuFabricInfoV", versioned)

    fabric = nvml.gather_nvml()["gpus"][0]["fabric"]

    assert seen[:2] == ["c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"]
    assert fabric["state"] == "NOT_SUPPORTED"
    assert "health_mask" in fabric


def test_it_marks_nvml_unavailable_when_the_library_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The real binding on this machine: no libnvidia-ml.so.1 to load.
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})

    report = nvml.gather_nvml()

    assert report == {
        "available": False,
        "error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found",
    }


def test_it_writes_cpu_masks_as_the_cpulists_topo_prints() -> None:
    assert nvml.cpulist([0b1011]) == "0-1,3"
    assert nvml.cpulist([0, 1]) == "64"
    assert nvml.cpulist([(1 << 64) - 1, (1 << 32) - 1]) == "0-95"
    assert nvml.cpulist([0, 0]) == ""
