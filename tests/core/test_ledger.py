"""The training communication ledger (DOMAIN.md s4) and its price on two servers."""

from __future__ import annotations

import pytest

from tests.core import topologies as T
from topoweb.core.costs import build_model
from topoweb.core.ledger import PRESETS, Layout, ModelShape, ledger, price, step_comm_us
from topoweb.core.placement import rank_groups


def test_it_reproduces_the_gpt3_175b_tp_all_reduce_of_201_mb_384_times_per_step() -> None:
    (entry,) = ledger(PRESETS["gpt3-175b"], Layout(8, 1, 1))
    assert (entry.dimension, entry.collective) == ("tp", "all_reduce")
    assert entry.bytes == 4 * 2048 * 12288 * 2 == 201_326_592
    assert entry.count == 384


def test_gpt3_step_on_an_nvswitch_h100_is_far_cheaper_than_on_a_pcie_only_h100_box() -> None:
    entries = ledger(PRESETS["gpt3-175b"], Layout(8, 1, 1))
    groups = rank_groups(tuple(range(8)), Layout(8, 1, 1))
    nvswitch = price(build_model(T.h100_nv18_no_nic(), "NVIDIA H100 80GB HBM3"), entries, groups)
    pcie = price(build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe"), entries, groups)
    # 201 MB NVLS all_reduce: 25 us + 201.3 MB / (510 GB/s busbw x 8/14) = 0.716 ms, x 384.
    assert nvswitch[0].each_us == pytest.approx(25 + 201_326_592 / (510 * 8 / 14 * 1e3))
    assert step_comm_us(nvswitch) == pytest.approx(384 * nvswitch[0].each_us, rel=1e-3)
    # Ring Simple through a 22 GB/s Sapphire Rapids UPI link: 8.4 + 14 x (5.7 us PCIe hop +
    # 2.5 us socket link, every step waiting on the hop across sockets) + 1.75 x 201.3 MB /
    # 22 GB/s = ~16.1 ms each, ~6.2 s per step.
    assert pcie[0].bottleneck_class == "socket"
    assert pcie[0].each_us == pytest.approx(8.4 + 14 * (5.7 + 2.5) + 1.75 * 201_326_592 / 22e3)
    assert step_comm_us(pcie) / step_comm_us(nvswitch) > 15


def test_every_dimension_gets_its_collectives() -> None:
    shape = ModelShape("moe", 32, 4096, 4096, 1, 8, 47e9, moe_layers=32, top_k=2)
    entries = {e.dimension: e for e in ledger(shape, Layout(2, 4, 4, ep=2))}
    assert entries["tp"].count == 4 * 8 * 8  # 8 layers per stage, 8 micro-batches
    assert (entries["pp"].collective, entries["pp"].count) == ("sendrecv", 16)
    assert entries["dp"].bytes == int(47e9 * 2 / 8)
    assert (entries["ep"].collective, entries["ep"].bytes) == ("alltoall", 4096 * 4096 * 2 * 2)


def test_sequence_parallel_swaps_the_all_reduce_for_gather_and_scatter() -> None:
    shape = ModelShape("sp", 96, 12288, 2048, 4, 1, 175e9, sequence_parallel=True)
    assert [e.collective for e in ledger(shape, Layout(8, 1, 1))] == [
        "all_gather",
        "reduce_scatter",
    ]


def test_bad_shapes_and_layouts_are_refused() -> None:
    with pytest.raises(ValueError, match="hidden must be at least 1"):
        ModelShape("x", 1, 0, 1, 1, 1, 1.0)
    with pytest.raises(ValueError, match="EP 3 must divide DP 4"):
        Layout(1, 1, 4, ep=3)
