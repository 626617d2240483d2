"""One name per GPU part in lists (issue 27 item 9), whatever way a capture or person wrote it."""

from __future__ import annotations

from topoweb.core.gpunames import count_models, gpu_family, models_from_text, models_text
from topoweb.core.steptime import priced_model


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


def test_a_server_of_several_models_counts_each_and_is_priced_on_its_weakest() -> None:
    names = ["GeForce GTX 1070"] * 3 + ["GeForce GTX 1080"] + ["GeForce GTX 1070"] * 3
    models = count_models(names)
    assert models == [("GeForce GTX 1070", 6), ("GeForce GTX 1080", 1)]
    assert models_text(models) == "6x GeForce GTX 1070 + 1x GeForce GTX 1080"
    assert models_text(models, family=True) == "6x GTX 1070 + 1x GTX 1080"
    # Same 8 GB each: the slower part prices every rank; memory decides first.
    assert priced_model(["GeForce GTX 1080", "GeForce GTX 1070"]) == "GeForce GTX 1070"
    assert priced_model(["NVIDIA H200", "NVIDIA H100 80GB HBM3"]) == "NVIDIA H100 80GB HBM3"
    assert priced_model(["Tesla V100-SXM2-32GB", "Tesla V100-SXM2-16GB"]) == "Tesla V100-SXM2-16GB"


def test_a_written_mix_is_read_and_one_model_is_not_a_mix() -> None:
    assert models_from_text("6x GeForce GTX 1070 + 1x GTX 1080") == [
        ("GeForce GTX 1070", 6),
        ("GTX 1080", 1),
    ]
    assert models_from_text("NVIDIA H200") == []
    assert models_from_text("8x NVIDIA H200") == []
