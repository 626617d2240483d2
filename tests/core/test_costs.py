"""The cost model: collective times, contention, fidelity to measured fixtures, calibration."""

from __future__ import annotations

import itertools

import pytest

from tests.core import topologies as T
from topoweb.core.costs import (
    COLLECTIVES,
    STANDARD_SIZES,
    build_model,
    calibrate_from_nccl,
    calibrate_from_p2p,
    calibrated,
    collective_cost,
    concurrent_costs,
    curve,
    fit_alpha_beta,
    p2p_matrix,
)
from topoweb.core.model import NcclMeasurement, NcclRank, NcclRow, NcclRun, P2PGpu, P2PResult

MiB = 1 << 20

# tests/fixtures/nccl_06_a100-sxm4-40gb-8gpu-single-proc-g8-full-sweep.txt, out-of-place
# columns (size, time us, busbw GB/s) of lines 40-45: the sizes from 256 MiB up.
NCCL_06_LARGE = [
    (268435456, 2121.9, 221.38),  # line 40
    (536870912, 4208.2, 223.26),  # line 41
    (1073741824, 8166.8, 230.08),  # line 42
    (2147483648, 16232, 231.52),  # line 43
    (4294967296, 32097, 234.17),  # line 44
    (8589934592, 63929, 235.14),  # line 45
]
# The same file, a spread of smaller rows (lines 18, 22, 28, 32, 36, 38) for calibration.
NCCL_06_SMALL = [
    (64, 32.01),
    (1024, 32.03),
    (65536, 35.40),
    (1048576, 76.71),
    (16777216, 245.1),
    (67108864, 589.5),
]


def _nccl_06_run() -> NcclRun:
    rows = tuple(
        NcclRow(
            n,
            n // 4,
            "float",
            "sum",
            -1,
            NcclMeasurement(t, None, None, 0),
            NcclMeasurement(t, None, None, 0),
        )
        for n, t, *_ in NCCL_06_SMALL + NCCL_06_LARGE
    )
    ranks = tuple(
        NcclRank(i, 0, 944, "inst-ks8ls-comp", i, None, "NVIDIA A100-SXM4-40GB") for i in range(8)
    )
    return NcclRun("all_reduce", rows, ranks=ranks, n_gpus=8)


@pytest.mark.parametrize(("size", "measured_busbw"), [(n, b) for n, _, b in NCCL_06_LARGE])
def test_uncalibrated_a100_nvswitch_all_reduce_busbw_is_within_20_percent_of_nccl_06(
    size: int, measured_busbw: float
) -> None:
    # nccl_06 ran on an OCI BM.GPU4.8, an HGX A100 8-GPU NVSwitch board like the DGX A100 of
    # topo_26: same NV12 fabric.
    model = build_model(T.dgx_a100_nv12(), "NVIDIA A100-SXM4-40GB")
    cost = collective_cost(model, "all_reduce", range(8), size)
    assert cost.calibrated is False
    assert abs(cost.busbw_gbps - measured_busbw) / measured_busbw < 0.20
    assert cost.bottleneck.startswith("NVSwitch port of GPU0 (NV12, egress), 240.0 GB/s")


def test_nvswitch_all_reduce_uses_nccls_ring_simple_formula_with_20_gbps_per_nvlink3() -> None:
    model = build_model(T.dgx_a100_nv12(), "NVIDIA A100-SXM4-40GB")
    cost = collective_cost(model, "all_reduce", range(8), 1 << 30)
    # NCCL: 12 links x 20 GB/s = 240 GB/s; Simple latency 8.4 us + 14 steps x 3.4 us (NVLink).
    assert (cost.algorithm, cost.protocol) == ("ring", "Simple")
    assert cost.bandwidth_gbps == pytest.approx(240.0)
    assert cost.time_us == pytest.approx(8.4 + 14 * 3.4 + 1.75 * (1 << 30) / 240e3)
    assert cost.algbw_gbps * 1.75 == pytest.approx(cost.busbw_gbps)
    assert cost.transports[0] == "GPU0->GPU1 NVLink NV12"
    assert any("NCCL Ampere tuning constants" in a for a in cost.assumed)


# p2pBandwidthLatencyTest figures compared (GB/s), with the topology each machine printed:
# p2p_05 (topo_09, RTX 6000 Ada, Gen4): unidirectional P2P=Enabled lines 37-40, every
#   off-diagonal cell is 26.32-26.33; bidirectional P2P=Enabled lines 49-52, 52.10-52.12.
# p2p_06 (topo_10): unidirectional line 21 cell [0][1] 26.32, bidirectional line 29 52.11.
# p2p_01 (topo_04, GTX 1070s on PCIe x1 risers, "pcie-x1" in INDEX.tsv): unidirectional
#   P2P=Enabled lines 75-81: 0.81-0.82 between PIX pairs, 0.73 between PHB pairs.
# p2p_11 (topo_32, RTX 2080 Ti, P2P not supported, copies staged in host memory):
#   unidirectional P2P=Enabled line 21 cell [0][1] 5.72, bidirectional line 29 6.10.
P2P_CASES = [
    (
        "p2p_05",
        T.rtx6000ada_4gpu,
        "NVIDIA RTX 6000 Ada Generation",
        16,
        True,
        {(0, 1): 26.32, (0, 2): 26.32, (0, 3): 26.32, (1, 2): 26.32, (2, 3): 26.32},
        {(0, 1): 52.10, (0, 2): 52.10, (2, 3): 52.12},
    ),
    (
        "p2p_06",
        T.rtx6000ada_2gpu,
        "NVIDIA RTX 6000 Ada Generation",
        16,
        True,
        {(0, 1): 26.32},
        {(0, 1): 52.11},
    ),
    (
        "p2p_01",
        T.gtx1070_7gpu,
        "GeForce GTX 1070",
        1,
        True,
        {(0, 1): 0.82, (0, 2): 0.81, (3, 4): 0.82, (0, 3): 0.73, (2, 6): 0.73},
        {(0, 1): 1.64},
    ),
    (
        "p2p_11",
        T.rtx2080ti_pix_pair,
        "NVIDIA GeForce RTX 2080 Ti",
        16,
        False,
        {(0, 1): 5.72},
        {(0, 1): 6.10},
    ),
]


@pytest.mark.parametrize(
    ("name", "build", "gpu", "width", "p2p", "uni", "bi"), P2P_CASES, ids=[c[0] for c in P2P_CASES]
)
def test_predicted_p2p_bandwidth_is_within_25_percent_of_the_measured_matrix(
    name: str,
    build: object,
    gpu: str,
    width: int,
    p2p: bool,
    uni: dict[tuple[int, int], float],
    bi: dict[tuple[int, int], float],
) -> None:
    model = build_model(build(), gpu, pcie_width=width, p2p_enabled=p2p)  # type: ignore[operator]
    predicted = p2p_matrix(model)
    for (a, b), measured in uni.items():
        got = predicted["unidirectional_gbps"][a][b]
        assert got is not None and abs(got - measured) / measured < 0.25, (a, b, got)
    for (a, b), measured in bi.items():
        got = predicted["bidirectional_gbps"][a][b]
        assert got is not None and abs(got - measured) / measured < 0.25, (a, b, got)


def test_a_pcie_only_box_and_an_nvswitch_box_of_eight_gpus_differ_for_the_same_collective() -> None:
    nvswitch = build_model(T.h100_nv18_no_nic(), "NVIDIA H100 80GB HBM3")
    pcie = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe")
    fast = collective_cost(nvswitch, "all_reduce", range(8), 256 * MiB)
    slow = collective_cost(pcie, "all_reduce", range(8), 256 * MiB)
    # NVLink SHARP: 16 channels x 20 GB/s (the ladder speed an NV18 port of 370.8 fits)
    # x 0.85 x 15/16 x 2 = 510 GB/s bus bandwidth, above the ring's 370.8.
    assert (fast.algorithm, fast.bandwidth_gbps) == ("nvls", pytest.approx(510.0))
    assert fast.alternatives["ring"] > fast.time_us
    assert slow.bottleneck_class == "socket"
    assert "Sapphire Rapids" in slow.bottleneck
    assert slow.time_us > 10 * fast.time_us


def test_the_best_ring_on_the_dgx1_mesh_follows_the_nv2_cycle_and_adds_channels() -> None:
    model = build_model(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB")
    cost = collective_cost(model, "all_reduce", range(8), 1 << 30)
    assert cost.order == (0, 1, 5, 4, 6, 7, 3, 2)  # every hop NV2 in topo_12
    # NV2 ring both ways (2 x 40) plus the NV1 ring both ways (2 x 20) = 6 links x 25 x 0.8.
    assert cost.bandwidth_gbps == pytest.approx(120.0)
    assert cost.bottleneck_class == "nvlink"


def test_ring_search_matches_brute_force_over_every_order() -> None:
    for build in (T.dgx1_v100_mesh, T.pcie_only_8gpu, T.gtx1070_7gpu):
        model = build_model(build())
        gpus = tuple(sorted(model.gpu_ids))
        best = max(
            model.solo_rate(
                model.load(((o[i], o[(i + 1) % len(o)]), 1.0) for i in range(len(o)))
            ).gbps
            for o in ((gpus[0],) + p for p in itertools.permutations(gpus[1:]))
        )
        first_ring = model.ring_channels(gpus)[0][0]
        got = model.solo_rate(
            model.load(
                ((first_ring[i], first_ring[(i + 1) % len(first_ring)]), 1.0)
                for i in range(len(first_ring))
            )
        ).gbps
        assert got == pytest.approx(best), build.__name__


def test_concurrent_groups_split_a_shared_socket_link_max_min_fair() -> None:
    model = build_model(T.l40s_4gpu(), "NVIDIA L40S")
    alone = collective_cost(model, "all_reduce", [0, 2], 256 * MiB, algorithm="ring")
    both = concurrent_costs(model, "all_reduce", [[0, 2], [1, 3]], 256 * MiB)
    # NCCL's SHM beyond PXB: the reading GPU's Gen4 x16 leg (24 GB/s / 1.5) limits one pair;
    # two pairs crossing at once split the 24 GB/s xGMI (Zen3-4) socket link.
    assert alone.bandwidth_gbps == pytest.approx(16.0)
    assert "from the CPU" in alone.bottleneck
    assert [c.bandwidth_gbps for c in both] == pytest.approx([12.0, 12.0])
    assert "socket link" in both[0].bottleneck
    # Inside one NUMA node nothing is shared with the other pair.
    local = concurrent_costs(model, "all_reduce", [[0, 1], [2, 3]], 256 * MiB)
    assert [c.bottleneck_class for c in local] == ["pcie", "pcie"]


def test_every_collective_reports_nccl_tests_bus_bandwidth() -> None:
    model = build_model(T.dgx_a100_nv12(), "NVIDIA A100-SXM4-40GB")
    n = 1 << 30
    got = {c: collective_cost(model, c, range(8), n) for c in COLLECTIVES}
    for name, factor in (
        ("reduce_scatter", 7 / 8),
        ("all_gather", 7 / 8),
        ("alltoall", 7 / 8),
        ("broadcast", 1.0),
        ("reduce", 1.0),
        ("sendrecv", 1.0),
    ):
        assert got[name].busbw_gbps == pytest.approx(got[name].algbw_gbps * factor)
        assert 200 < got[name].busbw_gbps <= 240, name
    pair = collective_cost(model, "sendrecv", [3, 5], n)
    assert pair.algorithm == "p2p"


def test_small_messages_take_ll_and_large_ones_simple_as_nccl_chooses() -> None:
    model = build_model(T.dgx_a100_nv12(), "NVIDIA A100-SXM4-40GB")
    small = collective_cost(model, "all_reduce", range(8), 1024)
    # Ring LL: 6.6 us + 14 x 0.6 us beats tree LL: 6.8 + 2 x 7 x 0.6 us.
    assert (small.algorithm, small.protocol) == ("ring", "LL")
    assert small.time_us == pytest.approx(6.6 + 14 * 0.6 + 1024 / (87.7 * 8 / 14 * 1e3))
    assert set(small.alternatives) >= {"ring/LL", "ring/LL128", "tree/Simple", "tree/LL"}
    large = collective_cost(model, "all_reduce", range(8), 1 << 30)
    assert (large.algorithm, large.protocol) == ("ring", "Simple")


def test_nccl_goes_through_host_memory_beyond_pxb_and_prices_that_path() -> None:
    model = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe")
    cost = collective_cost(model, "all_reduce", range(8), 1 << 30)
    assert cost.algorithm == "ring"
    assert any("host shared memory" in t for t in cost.transports)
    forced = build_model(T.pcie_only_8gpu(), "NVIDIA H100 PCIe", p2p="on")
    assert collective_cost(forced, "all_reduce", range(8), 1 << 30).transports != cost.transports


def test_the_curve_covers_8_bytes_to_8_gib_with_growing_time() -> None:
    model = build_model(T.rtx3090_nv4_pair(), "NVIDIA GeForce RTX 3090")
    points = curve(model, "all_reduce", [0, 1])
    assert [p.bytes for p in points][:2] == [8, 16]
    assert points[-1].bytes == 8 << 30 == STANDARD_SIZES[-1]
    times = [p.time_us for p in points]
    assert times == sorted(times)
    assert points[-1].bandwidth_gbps == pytest.approx(4 * 12.0)  # NCCL's sm86 figure, NV4


def test_bad_requests_name_the_problem() -> None:
    model = build_model(T.l40s_4gpu())
    with pytest.raises(ValueError, match="unknown GPU index 7"):
        collective_cost(model, "all_reduce", [0, 7], 1024)
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        collective_cost(model, "allreduce", [0, 1], 1024)
    with pytest.raises(ValueError, match="at least two GPUs"):
        collective_cost(model, "all_reduce", [1], 1024)
    with pytest.raises(ValueError, match="repeats"):
        collective_cost(model, "all_reduce", [1, 1], 1024)


def test_fit_alpha_beta_recovers_a_known_line() -> None:
    points = [(n, 5.0 + n / 100e3) for n in (1024, 1 << 20, 1 << 26, 1 << 30)]
    a, b = fit_alpha_beta(points)
    assert a == pytest.approx(5.0)
    assert b == pytest.approx(100.0)


def test_calibrating_on_nccl_06_brings_large_sizes_within_5_percent_and_marks_it() -> None:
    model = build_model(T.dgx_a100_nv12(), "NVIDIA A100-SXM4-40GB")
    cal = calibrate_from_nccl(model, _nccl_06_run())
    assert set(cal.scale) == {"nvlink"}
    tuned = calibrated(model, cal)
    for size, measured_us, _ in NCCL_06_LARGE:
        cost = collective_cost(tuned, "all_reduce", range(8), size)
        assert cost.calibrated is True
        assert abs(cost.time_us - measured_us) / measured_us < 0.05, size


def test_calibrating_on_p2p_05_scales_pcie_to_the_measured_copies() -> None:
    # tests/fixtures/p2p_05: unidirectional P2P=Enabled (lines 37-40), GPU latency (67-70).
    uni = (
        (0.0, 26.33, 26.32, 26.32),
        (26.32, 0.0, 26.32, 26.32),
        (26.32, 26.32, 0.0, 26.32),
        (26.33, 26.33, 26.33, 0.0),
    )
    lat = (
        (1.36, 1.24, 1.34, 1.32),
        (1.21, 1.37, 1.29, 1.32),
        (1.42, 1.40, 1.35, 1.34),
        (1.44, 1.43, 1.35, 1.40),
    )
    result = P2PResult(
        tuple(P2PGpu(i, "NVIDIA RTX 6000 Ada Generation", None) for i in range(4)),
        None,
        {"unidirectional_p2p_enabled_gbps": uni, "latency_gpu_p2p_enabled_us": lat},
    )
    model = build_model(T.rtx6000ada_4gpu(), "NVIDIA RTX 6000 Ada Generation")
    tuned = calibrated(model, calibrate_from_p2p(model, result))
    matrix = p2p_matrix(tuned)["unidirectional_gbps"]
    assert matrix[0][1] == pytest.approx(26.32, abs=0.02)  # NODE pair: PCIe class
    assert matrix[0][2] == pytest.approx(26.32, abs=0.02)  # SYS pair: socket class


def test_an_all_sys_box_shares_one_socket_link_per_numa_node_as_its_affinity_column_says() -> None:
    # Eight PCIe cards printed SYS to one another (as on an 8x RTX 4090 box), four per NUMA
    # node: the matrix alone would give every GPU its own socket link.
    box = T.from_function(8, lambda i, j: "SYS", lambda i: i // 4)
    model = build_model(box, "NVIDIA GeForce RTX 4090")
    groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    alone = collective_cost(model, "all_reduce", [0, 4], 256 * MiB)
    together = concurrent_costs(model, "all_reduce", groups, 256 * MiB)
    assert alone.transports == ("GPU0->GPU4 host shared memory (SYS, no P2P)",)
    # Four pairs cross the one 24 GB/s xGMI link of NUMA node 0 at once: 6 GB/s each.
    assert [c.bandwidth_gbps for c in together] == pytest.approx([6.0] * 4)
    assert all("socket link" in c.bottleneck for c in together)


def test_an_h800_capture_showing_nv18_is_followed_with_a_warning() -> None:
    model = build_model(T.h100_nv18_no_nic(), "NVIDIA H800")
    cost = collective_cost(model, "all_reduce", range(8), 1 << 30, algorithm="ring")
    assert cost.bandwidth_gbps == pytest.approx(18 * 20.6)
    assert any("8 NVLinks per GPU but the capture shows NV18" in a for a in cost.assumed)
    nv8 = T.from_function(8, lambda i, j: "NV8", lambda i: i // 4)
    plain = build_model(nv8, "NVIDIA H800")
    assert not plain.hardware.warnings
    assert collective_cost(plain, "broadcast", range(8), 1 << 30).bandwidth_gbps == pytest.approx(
        8 * 20.6
    )


def test_a_turing_nvlink_bridge_is_p2p_although_its_pcie_is_not() -> None:
    bridged = T.from_function(2, lambda i, j: "NV2", lambda i: 0)
    model = build_model(bridged, "NVIDIA GeForce RTX 2080 Ti")
    cost = collective_cost(model, "all_reduce", [0, 1], 1 << 30)
    assert cost.transports == ("GPU0->GPU1 NVLink NV2",)
    assert cost.bandwidth_gbps == pytest.approx(2 * 20.0)  # NCCL's sm75 (Volta) figure
    assert not model.hardware.pcie_p2p


def test_a_dgx1v_crosses_sockets_over_broadwell_qpi_and_dgx2_over_skylake_upi() -> None:
    assert build_model(T.dgx1_v100_mesh(), "Tesla V100-SXM2-32GB").hardware.socket_gbps == 6.0
    dgx2 = build_model(T.nvswitch_16gpu(), "Tesla V100-SXM3-32GB").hardware
    assert (dgx2.socket_link, dgx2.socket_gbps) == ("Intel UPI (Skylake)", 10.0)


@pytest.mark.parametrize(("width", "gbps"), [(1, 0.75), (4, 3.0), (8, 6.0), (16, 12.0)])
def test_narrow_pcie_links_are_priced_by_width(width: int, gbps: float) -> None:
    model = build_model(T.gtx1070_7gpu(), "GeForce GTX 1070", pcie_width=width)
    cost = collective_cost(model, "all_reduce", [0, 1], 1 << 30, algorithm="ring")
    # NCCL: width x 60 / 80 on Gen3; the PIX pair's ring is bound by one GPU's own link.
    assert cost.bandwidth_gbps == pytest.approx(gbps)


def test_h100_nodes_use_nccls_nvls_tree_bounded_by_their_nics() -> None:
    one = build_model(T.h100_nv18_no_nic(), "NVIDIA H100 80GB HBM3", nodes=4, nic_gbits=400)
    cost = collective_cost(one, "all_reduce", range(32), 8 << 30)
    # Four or more nodes: the NICs (8 x 400 Gb/s x 0.92 = 368 GB/s a node) set the pace.
    assert cost.algorithm == "nvls_tree"
    assert cost.bandwidth_gbps == pytest.approx(8 * 50 * 0.92)
    assert cost.bottleneck_class == "network"
    assert any("no NICs in the capture" in a for a in cost.assumed)


def test_gb200_trays_of_one_nvlink_clique_talk_over_nvlink_not_their_nics() -> None:
    tray = T.from_function(4, lambda i, j: "NV18", lambda i: i // 2)  # one GB200 compute tray
    over_nics = build_model(tray, "NVIDIA GB200", nodes=18, nic_gbits=400)
    rack = build_model(tray, "NVIDIA GB200", nodes=18, nvlink_nodes=True)
    by_nic = collective_cost(over_nics, "all_reduce", range(72), 1 << 30)
    by_nvlink = collective_cost(rack, "all_reduce", range(72), 1 << 30)
    assert by_nic.bottleneck_class == "network"
    assert by_nvlink.bottleneck_class == "nvlink"
    assert by_nvlink.algorithm == "nvls"  # one NVSwitch domain of 72 GPUs
    assert by_nvlink.time_us < by_nic.time_us / 2
    assert by_nvlink.transports[0] == "GPU0->GPU1 NVLink NV18"


def test_a_collectors_facts_set_p2p_pcie_and_nics_for_the_server() -> None:
    from topoweb.core.costs import options_from_facts, with_options
    from topoweb.core.formats.nvml import read_host, read_nvml

    pcie = {"current_generation": 1, "max_generation": 4, "current_width": 8, "max_width": 16}
    nvml = read_nvml(
        {
            "available": True,
            "gpus": [{"index": i, "name": "NVIDIA L40S", "pcie": pcie} for i in range(4)],
            "p2p": [
                {"from": i, "to": j, "read": "OK" if {i, j} != {0, 1} else "CNS"}
                for i in range(4)
                for j in range(4)
                if i != j
            ],
        }
    )
    host = read_host(
        {
            "rdma_nics": [
                {"device": f"mlx5_{k}", "rate_gbps": 200, "state": "ACTIVE"} for k in (0, 1)
            ]
        }
    )
    options = options_from_facts(nvml, host)
    # An idle link reports Gen1: the link's maximum generation counts, with its current width.
    assert (options["pcie_gen"], options["pcie_width"]) == (4, 8)
    assert options["p2p_status"][(0, 1)] is False and options["p2p_status"][(2, 3)] is True
    assert (options["nic_gbits"], options["nics_per_node"]) == (200, 2)
    model = with_options(build_model(T.l40s_4gpu(), "NVIDIA L40S"), **options, nodes=2)
    assert model.hardware.nccl_pcie_gbps == 12.0  # Gen4 x8: 8 x 120 / 80
    assert model.copy_transport((0, 1)) == "staged"
    assert "PCIe Gen4 x16 assumed" not in model.hardware.assumption
