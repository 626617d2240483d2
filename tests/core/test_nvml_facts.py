"""The collector's NVML and host facts, read once into typed dataclasses: real dry-run output,
unknown values tolerated, wrong types refused with the place named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from topoweb.core.formats import ParseError
from topoweb.core.formats.nvml import (
    NvmlFactsError,
    read_host,
    read_nvml,
    smallest_gpu_memory,
)

DRY_RUN = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "device_01_h200-1gpu-firecracker-vm-collector-dryrun.json"
)


def dry_run() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DRY_RUN.read_text(encoding="utf-8"))
    return data


def test_a_real_collector_dry_run_reads_into_typed_facts() -> None:
    facts = read_nvml(dry_run()["nvml"])

    assert facts.available and facts.driver_version == "580.159.04"
    (gpu,) = facts.gpus
    assert (gpu.index, gpu.name, gpu.pci_bus_id) == (0, "NVIDIA H200", "00000000:00:06.0")
    assert (gpu.pcie.current_generation, gpu.pcie.max_width) == (5, 16)
    assert not gpu.pcie.slower_generation and not gpu.pcie.narrower
    assert gpu.nvlinks == () and facts.p2p == ()
    assert facts.gpu_names == ["NVIDIA H200"]


def test_the_real_host_facts_read_with_unknown_dmi_as_none() -> None:
    host = read_host(dry_run()["host"])

    assert host.product_name is None  # the VM has no DMI product name
    assert host.cpu_model == "Intel(R) Xeon(R) Processor"
    assert host.rdma_nics == ()


@pytest.mark.parametrize("marker", [None, "unsupported", "N/A", "error: GPU is lost", ""])
def test_values_the_driver_could_not_give_read_as_unknown(marker: Any) -> None:
    facts = read_nvml(
        {
            "gpus": [
                {
                    "index": 0,
                    "name": marker,
                    "pcie": {"current_generation": marker, "max_generation": 5},
                    "nvlinks": [{"link": 0, "state": marker, "version": marker}],
                }
            ],
            "p2p": [{"from": 0, "to": 1, "read": marker, "write": "NS"}],
        }
    )

    (gpu,) = facts.gpus
    assert gpu.name is None and facts.gpu_names == []
    assert gpu.pcie.current_generation is None and not gpu.pcie.slower_generation
    assert (gpu.nvlinks[0].up, gpu.nvlinks[0].version) == (None, None)
    assert facts.p2p is not None and facts.p2p[0].refused() == {"write": "NS"}


def test_older_key_names_and_link_words_are_accepted() -> None:
    facts = read_nvml(
        {
            "gpus": [
                {
                    "index": 1,
                    "pcie": {"current_gen": 3, "max_gen": 4, "current_width": 8, "max_width": 16},
                    "nvlinks": [{"link": 0, "state": "down"}, {"link": 1, "state": True}],
                }
            ]
        }
    )

    (gpu,) = facts.gpus
    assert gpu.pcie.slower_generation and gpu.pcie.narrower
    assert [x.up for x in gpu.nvlinks] == [False, True]
    assert facts.p2p is None  # not sent at all, unlike an empty list


def test_a_collector_without_nvml_reads_as_unavailable_with_nothing_else() -> None:
    facts = read_nvml({"available": False, "error": "NVMLError_LibraryNotFound"})

    assert not facts.available and facts.gpus == ()


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"driver_version": "570.1"}, "expected {'gpus'"),
        ({"gpus": [{"index": "zero"}]}, r"gpus\[0\]\.index is 'zero', expected an integer"),
        ({"gpus": [{"index": 0, "pcie": []}]}, r"gpus\[0\]\.pcie is not an object"),
        ({"gpus": [{"index": 0, "nvlinks": [1]}]}, r"gpus\[0\]\.nvlinks is not a list"),
        (
            {"gpus": [{"index": 0, "nvlinks": [{"link": 0, "state": "sideways"}]}]},
            r"gpus\[0\]\.nvlinks\[0\]\.state is 'sideways'",
        ),
        ({"gpus": [], "p2p": ["OK"]}, "p2p holds something other than objects"),
    ],
)
def test_facts_of_the_wrong_shape_are_refused_naming_the_place(
    doc: dict[str, Any], problem: str
) -> None:
    with pytest.raises(NvmlFactsError, match=problem) as caught:
        read_nvml(doc)
    assert isinstance(caught.value, ParseError)  # answered as a 400 parse_error by the API


def test_host_facts_of_the_wrong_shape_read_as_unknown() -> None:
    host = read_host({"product_name": 42, "rdma_nics": [{"device": "mlx5_0", "numa_node": "x"}]})

    assert host.product_name is None
    assert host.rdma_nics[0].device == "mlx5_0" and host.rdma_nics[0].numa_node is None


def test_the_smallest_gpu_memory_is_read_where_given_and_never_fails() -> None:
    assert smallest_gpu_memory(dry_run()["nvml"]) == 150754820096  # the real H200
    gpus = [{"memory_total_bytes": 80 * 2**30}, {"memory_total_bytes": 40 * 2**30}]
    assert smallest_gpu_memory({"gpus": gpus}) == 40 * 2**30
    # What is not an integer is passed over (the facts stay descriptive here).
    odd = [{"memory_total_bytes": "unsupported"}, {"memory_total_bytes": True}, 7, {}]
    assert smallest_gpu_memory({"gpus": [*odd, gpus[0]]}) == 80 * 2**30
    for nothing in (None, {}, {"available": False}, {"gpus": "x"}, {"gpus": odd}, []):
        assert smallest_gpu_memory(nothing) is None
