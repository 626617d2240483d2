"""One name per GPU part in lists (issue 27 item 9), whatever way a capture or person wrote it."""

from __future__ import annotations

from topoweb.core.gpunames import gpu_family


def test_the_ways_an_a100_is_written_read_as_one_part() -> None:
    names = ["A100", "A100 SXM4", "A100-SXM-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe"]
    assert {gpu_family(n) for n in names} == {"A100"}


def test_near_names_stay_apart_and_an_unknown_part_loses_only_its_vendor_words() -> None:
    assert [gpu_family(n) for n in ("NVIDIA H200", "NVIDIA H20", "NVIDIA L40S", "NVIDIA L40")] == [
        "H200",
        "H20",
        "L40S",
        "L40",
    ]
    assert gpu_family("Tesla V100-SXM2-32GB") == "V100"
    assert gpu_family("NVIDIA GeForce GTX 1080 Ti") == "GTX 1080 Ti"
    assert gpu_family("NVIDIA Quadro X9000") == "X9000"
    assert gpu_family("") == gpu_family(None) == ""
