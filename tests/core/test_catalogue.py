"""The link catalogue: which generation a GPU name means, and the per-direction figures the
cost model runs on (effective) beside the line rates vendors quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from topoweb.core.catalogue import (
    infer_generation,
    pcie_p2p_share,
    resolve_hardware,
)
from topoweb.core.formats import parse_text
from topoweb.core.model import Topology

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def topo(name: str) -> Topology:
    parsed = parse_text((FIXTURES / name).read_text())
    assert isinstance(parsed, Topology)
    return parsed


H100_BOX = topo("topo_22_h100-8gpu-nv18-no-nic-no-legend-epyc9654.txt")
V100_MESH = topo("topo_12_v100sxm2-32gb-8gpu-nv1nv2-node-indented.txt")


@pytest.mark.parametrize(
    ("name", "generation", "nvlink", "links_per_gpu"),
    [
        ("NVIDIA H100 80GB HBM3", "Hopper", "NVLink4", 18),
        ("NVIDIA H800", "Hopper-H800", "NVLink4", 8),
        ("NVIDIA A100-SXM4-40GB", "Ampere", "NVLink3", 12),
        ("Tesla V100-SXM2-32GB", "Volta", "NVLink2", 6),
        ("NVIDIA GeForce RTX 3090", "Ampere-sm86", "NVLink3-bridge", 4),
        ("NVIDIA B200", "Blackwell", "NVLink5", 18),
    ],
)
def test_a_gpu_name_names_its_generation(
    name: str, generation: str, nvlink: str, links_per_gpu: int
) -> None:
    choice = infer_generation(H100_BOX, name)

    assert (choice.generation.name, choice.generation.nvlink) == (generation, nvlink)
    assert choice.generation.links_per_gpu == links_per_gpu
    assert choice.assumption == f"{name!r} is {generation}"


def test_without_a_name_the_generation_is_guessed_from_the_bundles_and_says_so() -> None:
    assert infer_generation(H100_BOX, None).assumption == (
        "no GPU name given; assuming Hopper (NVLink4, PCIe Gen5) from NV18 bundles"
    )
    assert infer_generation(V100_MESH, None).generation.nvlink == "NVLink2"


def test_figures_are_per_direction_effective_beside_the_line_rate() -> None:
    hopper = resolve_hardware(H100_BOX, "NVIDIA H100 80GB HBM3").describe()
    # DOMAIN.md s2: NVLink4 is 25 GB/s per link per direction; NCCL plans with 20.6.
    assert hopper["nvlink_line_rate_per_link_gbps_per_direction"] == 25.0
    assert hopper["nvlink_per_link_gbps_per_direction"] == 20.6
    # PCIe Gen5 x16: 32 GT/s x 16 lanes with 128b/130b encoding, about 63 GB/s raw; NCCL
    # plans with width x 240 / 80 = 48, a P2P copy reaches 86 % of line rate (p2pmark).
    assert hopper["pcie"] == "Gen5 x16"
    assert hopper["pcie_line_rate_gbps_per_direction"] == 63.02
    assert hopper["pcie_gbps_per_direction"] == 48.0
    assert hopper["pcie_copy_gbps_per_direction"] == pytest.approx(
        63.02 * pcie_p2p_share(5).share, abs=0.01
    )
    assert hopper["efficiency"]["pcie_p2p"] == 0.86
    # Hopper's copy engines reach 83 % of NVLink's line rate (HGX H100, nccl issue 1264).
    assert hopper["efficiency"]["nvlink_copy"] == 0.83
    assert any("nccl/issues/1264" in s for s in hopper["copy_sources"])
    assert hopper["nvls"] is True


def test_a_known_pcie_width_overrides_the_default_x16() -> None:
    narrow = resolve_hardware(V100_MESH, "Tesla V100-SXM2-32GB", pcie_gen=3, pcie_width=8)
    wide = resolve_hardware(V100_MESH, "Tesla V100-SXM2-32GB", pcie_gen=3)
    assert narrow.describe()["pcie"] == "Gen3 x8"
    assert narrow.pcie_gbps == pytest.approx(wide.pcie_gbps / 2)


def test_an_unknown_socket_link_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown socket link 'QPI-9000'"):
        resolve_hardware(H100_BOX, None, socket_link="QPI-9000")
