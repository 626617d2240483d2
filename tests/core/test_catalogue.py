"""The link catalogue: which generation a GPU name means, and the per-direction figures the
cost model runs on (effective) beside the line rates vendors quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from topoweb.core.catalogue import (
    infer_generation,
    pcie_p2p_share,
    resolve_hardware,
    socket_link_of_cpu,
)
from topoweb.core.costs import build_model
from topoweb.core.export import graph_document
from topoweb.core.formats import parse_text
from topoweb.core.formats.ncclxml import HostFacts, to_nccl_xml
from topoweb.core.health import expectations_from_model
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


# /proc/cpuinfo's model names of well-known GPU servers (the vendors' published specifications:
# DGX-1, DGX-2, DGX A100, DGX H100, DGX B200; AWS p4d/p5; Azure NDv2 and NDv4; Supermicro
# AS-8125GS (EPYC 9004/9005)).
@pytest.mark.parametrize(
    ("cpu_model", "link"),
    [
        ("Intel(R) Xeon(R) CPU E5-2698 v4 @ 2.20GHz", "Intel QPI (Broadwell)"),
        ("Intel(R) Xeon(R) Platinum 8168 CPU @ 2.70GHz", "Intel UPI (Skylake)"),
        ("Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz", "Intel UPI (Skylake)"),
        ("Intel(R) Xeon(R) Platinum 8480C", "Intel UPI (Sapphire Rapids)"),
        ("INTEL(R) XEON(R) PLATINUM 8570", "Intel UPI (Emerald Rapids)"),
        ("Intel(R) Xeon(R) 6960P", "Intel UPI (Sapphire Rapids)"),
        ("AMD EPYC 7742 64-Core Processor", "AMD xGMI (Zen1-2)"),
        ("AMD EPYC 7V12 64-Core Processor", "AMD xGMI (Zen1-2)"),
        ("AMD EPYC 7R13 48-Core Processor", "AMD xGMI (Zen3-4)"),
        ("AMD EPYC 9654 96-Core Processor", "AMD xGMI (Zen3-4)"),
        ("AMD EPYC 9575F 64-Core Processor", "AMD xGMI (Zen5)"),
        ("AMD Ryzen Threadripper PRO 7985WX 64-Cores", None),  # one socket: no link
        ("Neoverse-V2", None),
    ],
)
def test_a_cpu_model_names_its_socket_link(cpu_model: str, link: str | None) -> None:
    assert socket_link_of_cpu(cpu_model) == link


@pytest.mark.parametrize(
    ("fixture", "link"),
    [
        # NCCL's dumps write AMD's family as base + (extended << 4): Zen3's 19h as 175.
        ("ncclxml_01_azure-ncv4-a100pcie-4gpu-nvlink-pairs-topofile.xml", "AMD xGMI (Zen3-4)"),
        # Files written by hand give x86's family: Zen2's 17h as 23.
        ("ncclxml_02_azure-ndv4-a100-8gpu-8ib-topofile.xml", "AMD xGMI (Zen1-2)"),
        ("ncclxml_04_azure-ndv2-v100-8gpu-1ib-topofile.xml", "Intel UPI (Skylake)"),
        ("ncclxml_05_h200-baremetal-dump-hosthash-pcie-switch-TRUNCATED.xml",
         "Intel UPI (Emerald Rapids)"),
        ("ncclxml_08_ibmcloud-h100-vsi-8gpu-8nic-full-dump.xml", "Intel UPI (Sapphire Rapids)"),
    ],
)  # fmt: skip
def test_the_cpus_an_nccl_xml_names_give_the_socket_link_not_the_gpu_generation(
    fixture: str, link: str
) -> None:
    hw = resolve_hardware(topo(fixture))
    assert hw.socket_link == link and not hw.socket_assumed
    assert hw.socket_source.startswith("the topology XML's CPUs (")
    assert hw.describe()["socket_link_source"] == hw.socket_source


def test_topo_m_names_no_cpu_so_the_socket_link_is_the_generations_and_says_so() -> None:
    hw = resolve_hardware(H100_BOX, "NVIDIA H100 80GB HBM3")
    assert hw.socket_link == "Intel UPI (Sapphire Rapids)" and hw.socket_assumed
    assert hw.socket_source == "assumed: the usual platform of Hopper GPUs"
    given = resolve_hardware(H100_BOX, "NVIDIA H100 80GB HBM3", socket_link="AMD xGMI (Zen3-4)")
    assert given.socket_gbps == 24.0 and not given.socket_assumed


def test_the_same_wiring_on_intel_cpus_stages_its_cross_socket_copies() -> None:
    """The driver carries PCIe P2P across AMD's xGMI but not across Intel's UPI: Azure's NCv4
    file (A100 PCIe on EPYC) with its CPUs renamed Sapphire Rapids prices the same SYS pair
    as a host-staged copy, at the Intel link's figure for collectives."""
    text = (FIXTURES / "ncclxml_01_azure-ncv4-a100pcie-4gpu-nvlink-pairs-topofile.xml").read_text()
    intel = text.replace('vendor="AuthenticAMD" familyid="175" modelid="1"',
                         'vendor="GenuineIntel" familyid="6" modelid="143"')  # fmt: skip
    assert intel != text
    models = {}
    for name, xml in (("amd", text), ("intel", intel)):
        parsed = parse_text(xml)
        assert isinstance(parsed, Topology)
        models[name] = build_model(parsed, "NVIDIA A100 80GB PCIe")
    amd, on_intel = models["amd"], models["intel"]
    (i, j) = next(
        (i, j)
        for i in range(4)
        for j in range(i + 1, 4)
        if amd.topo.link_class(amd.gpu_ids[i], amd.gpu_ids[j]) == "SYS"
    )
    assert amd.copy_transport((i, j)) == "p2p"
    assert on_intel.copy_transport((i, j)) == "staged"
    assert on_intel.hardware.socket_gbps == 22.0 and amd.hardware.socket_gbps == 24.0


def test_an_exported_xml_names_the_hosts_cpu_as_nccl_and_this_reader_read_it() -> None:
    """The host's CPU model goes out as the <cpu> ids NCCL plans its socket link from, and
    reads back as the same link (an Ice Lake host was written as Sapphire Rapids before)."""
    h200 = topo("topo_01_h200-8gpu-12nic-numaid.txt")
    for cpu_model in (
        "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz",
        "AMD EPYC 9575F 64-Core Processor",
        "Intel(R) Xeon(R) Platinum 8480C",
    ):
        body, _ = to_nccl_xml(h200, HostFacts(cpu_model=cpu_model))
        again = parse_text(body)
        assert isinstance(again, Topology)
        assert resolve_hardware(again).socket_link == socket_link_of_cpu(cpu_model)


def test_the_hosts_cpu_decides_whether_a_cross_socket_pair_is_expected_at_p2p_or_staged() -> None:
    """An L40S box (topo -m names no CPU: Ada's usual platform is AMD) on Sapphire Rapids, as
    its collector's /proc/cpuinfo says: its SYS pairs are expected at a host-staged copy's
    rate, not at P2P across xGMI, and the basis says where the link came from."""
    l40s = topo("topo_36_l40s-4gpu-node-sys-2nic-redacted-email-prompt.txt")
    sys_pair = next(
        (a.index, b.index)
        for a in l40s.gpus
        for b in l40s.gpus
        if a.id != b.id and l40s.link_class(a.id, b.id) == "SYS"
    )
    assumed = expectations_from_model(l40s, "NVIDIA L40S")
    intel = expectations_from_model(
        l40s, "NVIDIA L40S", cpu_model="Intel(R) Xeon(R) Platinum 8480+"
    )
    amd = expectations_from_model(l40s, "NVIDIA L40S", cpu_model="AMD EPYC 9454 48-Core Processor")
    staged = intel.staged_gbps_by_class["SYS"]
    assert intel.figures.p2p_gbps[sys_pair] == staged
    assert amd.figures.p2p_gbps[sys_pair] == assumed.figures.p2p_gbps[sys_pair] > staged
    assert "Intel UPI (Sapphire Rapids) from the host's CPU (Intel(R) Xeon(R)" in intel.basis
    assert "host's CPU" not in assumed.basis
    drawn = graph_document(
        l40s, gpu_model="NVIDIA L40S", cpu_model="AMD EPYC 9454 48-Core Processor"
    )
    labels = {e["data"].get("label") for e in drawn["elements"]}
    assert "AMD xGMI (Zen3-4)" in labels and "AMD xGMI (Zen3-4) (assumed)" not in labels


@pytest.mark.parametrize("ids", ['familyid="0x6" modelid="0x55"', 'familyid="06" modelid="085"'])
def test_cpu_ids_in_hex_or_zero_padded_read_as_nccls_decimal_ones(ids: str) -> None:
    text = (FIXTURES / "ncclxml_04_azure-ndv2-v100-8gpu-1ib-topofile.xml").read_text()
    written = text.replace('familyid="6" modelid="85"', ids)
    assert written != text
    parsed = parse_text(written)
    assert isinstance(parsed, Topology)
    assert resolve_hardware(parsed).socket_link == "Intel UPI (Skylake)"
