"""NCCL's collectives on a GPU group of one server or of N servers wired alike: every
(algorithm, protocol) NCCL would consider (ring, tree, NVLS, NVLS tree; LL, LL128, Simple),
timed by its published model (`tables`), the fastest chosen; groups running at once share what
they cross; pipeline chains; a calibrated class's fitted line in the ring's form."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from topoweb.core.catalogue import (
    LATENCY_PRIOR_BAND,
    LAUNCH_US_PER_GPU,
    copy_latency_prior,
)
from topoweb.core.costs.copies import copy_variant
from topoweb.core.costs.model import CostModel
from topoweb.core.costs.records import (
    BUSBW_FACTOR,
    COPY_LATENCY_KEY,
    OPERATIONS,
    RING_STEPS,
    STANDARD_SIZES,
    CollectiveCost,
    Flow,
    Rate,
    Variant,
    ring_flows,
    transfer_us,
)
from topoweb.core.costs.tables import (
    BASE_LATENCY_US,
    HOP_LATENCY_US,
    LL_MAX_BW_NODES,
    LL_MAX_BW_ONE_NODE,
    NVLS_CHANNELS,
    NVLS_LATENCY_US,
    NVLS_TREE_NET_LATENCY_US,
    NVLS_TREE_PER_CHANNEL,
    PROTOCOLS,
    SPEED_LADDER,
    TREE_CORRECTION,
)


def _largest(parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    best = parts[0]
    for part in parts[1:]:
        if len(part) > len(best):
            best = part
    return best


def nccl_steps(collective: str, p: int) -> int:
    """The steps of NCCL's ring form of `collective` over p ranks (what its latency pays)."""
    if collective == "all_reduce":
        return 2 * (p - 1)
    if collective in ("reduce_scatter", "all_gather"):
        return p - 1
    return p


def ll_max_gbps(model: CostModel, nodes: int) -> float:
    """NCCL's cap on a ring's LL bus bandwidth: by GPU arch on one node, by CPU vendor and
    node count on several."""
    if nodes == 1:
        return LL_MAX_BW_ONE_NODE.get(model.hardware.generation.arch, 39.0)
    vendor = "amd" if "AMD" in model.hardware.socket_link else "intel"
    return LL_MAX_BW_NODES[vendor][0 if nodes == 2 else 1]


@dataclass(frozen=True)
class Shape:
    """What the algorithms need to know about a group: its nodes, intra-node ring and rates."""

    parts: list[tuple[int, ...]]
    order: tuple[int, ...]
    intra: Rate  # intra-node ring rate (inf with one GPU per node)
    chain: Rate  # open chain of the ring (broadcast / reduce)
    nvlink: bool  # every intra-node hop is NVLink
    socket: bool  # some intra-node hop crosses sockets (each step pays the socket latency)
    net: float  # per-node network rate (inf on one node)
    nic: int  # the network resource (-1 on one node)


def group_shape(model: CostModel, key: tuple[int, ...], rate: Rate | None) -> Shape:
    """A group's nodes, its largest node's ring and rates (`rate`: its share beside others,
    None alone), and the network between its nodes."""
    parts = model.split_nodes(key)
    local = _largest(parts)
    local = tuple(sorted(local))
    if len(local) >= 2:
        order, solo, chain, nvlink, socket = model.ring_shape(local)
        intra = rate or solo
        if rate is not None:
            # Contention slows the open chain (broadcast, reduce) as much as the ring.
            scaled = chain.gbps * rate.gbps / max(solo.gbps, 1e-9)
            chain = Rate(max(rate.gbps, scaled), rate.bottleneck)
    else:
        order, intra, chain, nvlink = local, Rate(math.inf, -1), Rate(math.inf, -1), True
        socket = False
    if len(parts) > 1:
        nic = model.nic_resource(len(local))
        net = model.resources[nic].capacity_gbps
        order = tuple(key) if len(local) < 2 else order
    else:
        nic, net = -1, math.inf
    return Shape(parts, order, intra, chain, nvlink, socket, net, nic)


def _nccl_variants(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    n: int,
    rate: Rate | None = None,
    gpus_per_thread: int = 1,
) -> list[Variant]:
    """Every (algorithm, protocol) NCCL would consider, timed by its published model: latency
    (base + hops x per-hop latency by link type) + bytes / bandwidth, plus the launch."""
    hw = model.hardware
    gen = hw.generation
    p = len(key)
    s = group_shape(model, key, rate)
    nn = len(s.parts)
    ppn = p / nn
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    hop = "nvlink" if s.nvlink else "pcie"
    ll128_ok = s.nvlink and not gen.name.startswith(("Kepler", "Maxwell", "Pascal"))
    ll_max = ll_max_gbps(model, nn)
    amd = "AMD" in hw.socket_link
    # Each step of a ring or tree that crosses sockets waits for its slowest hop.
    sock = model.socket_latency_us() if s.socket else 0.0
    out: list[Variant] = []

    def limit(intra: Rate) -> tuple[float, int]:
        if s.net < intra.gbps:
            return s.net, s.nic
        return intra.gbps, intra.bottleneck

    if collective in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"):
        steps = nccl_steps(collective, p)
        rooted = collective in ("broadcast", "reduce")
        bus, neck = limit(s.chain if rooted else s.intra)
        inter_steps = 0 if nn == 1 else (2 * (nn - 1) if collective == "all_reduce" else nn - 1)
        for i, proto in enumerate(PROTOCOLS):
            if proto == "LL128" and not ll128_ok:
                continue
            busbw = {"LL": min(ll_max, 0.5 * bus), "LL128": 0.92 * bus, "Simple": bus}[proto]
            algbw = busbw * p / steps
            intra_lat = HOP_LATENCY_US[hop]["ring"][i] + sock
            if nn > 1:
                intra_lat = max(intra_lat, (2.0 if amd else 1.0) * (3 if proto == "Simple" else 1))
            inter_lat = HOP_LATENCY_US["net"]["tree" if ppn == 1 else "ring"][i]
            lat = BASE_LATENCY_US["ring"][i]
            if rooted:
                if s.nvlink and nn == 1:
                    lat += intra_lat  # NCCL: same channels, one hop of latency
                else:
                    per = HOP_LATENCY_US[hop]["tree"][i] + sock if proto == "Simple" else intra_lat
                    lat += (steps - inter_steps) * per + inter_steps * inter_lat
            else:
                lat += (steps - inter_steps) * intra_lat + inter_steps * inter_lat
            if nn > 1 and proto == "Simple" and collective == "all_reduce" and n >= 64 * 16 * p:
                lat *= 1.9 if gen.arch == "Volta" else 1.4  # NCCL: ring plateau effect
            out.append(
                Variant(
                    "ring",
                    launch + lat + transfer_us(n, algbw),
                    s.order,
                    bus,
                    launch + lat,
                    neck,
                    proto,
                )
            )
    if collective == "all_reduce" and (p > 2 or nn > 1):
        intra_bus = s.intra.gbps if math.isfinite(s.intra.gbps) else s.net
        neck = s.intra.bottleneck if math.isfinite(s.intra.gbps) else s.nic
        log_size = int(math.log2(n >> 6)) if n >= 64 else -1
        for i, proto in enumerate(PROTOCOLS):
            if proto == "LL128" and not ll128_ok:
                continue
            bus = 0.92 * intra_bus
            busbw = {
                "LL": min(bus / 3.8, ll_max),
                "LL128": bus * (7 / 9 if nn == 1 else 120 / 128),
                "Simple": bus,
            }[proto]
            algbw = 0.5 * busbw
            if 0 <= log_size < len(TREE_CORRECTION[proto]):
                algbw *= TREE_CORRECTION[proto][log_size]
            tree_neck = neck
            if nn > 1:
                # Double binary trees: a node sends each byte once between two nodes, about
                # twice (up and down its trees) with more.
                net_alg = s.net * (1.0 if nn == 2 else 0.5)
                if net_alg < algbw:
                    algbw, tree_neck = net_alg, s.nic
            lat = BASE_LATENCY_US["tree"][i] + 2 * (
                (ppn - 1) * (HOP_LATENCY_US[hop]["tree"][i] + sock)
                + math.log2(nn) * HOP_LATENCY_US["net"]["tree"][i]
            )
            out.append(
                Variant(
                    "tree", launch + lat + transfer_us(n, algbw), s.order, 2 * algbw, launch + lat,
                    tree_neck, proto,
                )
            )  # fmt: skip
    nvls = nvls_variant(model, collective, key, n, s, rate, launch)
    if nvls is not None:
        out.append(nvls)
    return out


def nvls_variant(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    n: int,
    s: Shape,
    rate: Rate | None,
    launch: float,
) -> Variant | None:
    """NVLink SHARP on NVSwitch gen3+: the switch reduces and multicasts. NCCL's model: 16
    channels at the ladder speed the port fits, x its NVLS efficiency, x2 for all_reduce.
    Across nodes (all_reduce only) NCCL's NVLS tree: NVLS inside each node, trees between
    them, bounded by the NICs (twice their rate with two nodes) and a per-channel cap."""
    hw = model.hardware
    gen = hw.generation
    nn = len(s.parts)
    if not gen.nvls or collective not in ("all_reduce", "reduce_scatter", "all_gather"):
        return None
    if nn > 1 and collective != "all_reduce":
        return None
    local = tuple(sorted(_largest(s.parts)))
    if len(local) < 2:
        return None
    ids = [model.gpu_ids[g] for g in local]
    domain = model.nvlink_domain_of(ids[0])
    if domain is None or domain.fabric != "nvswitch" or not all(g in domain.gpus for g in ids):
        return None
    p, ppn = len(key), len(local)
    port = domain.port_links * hw.nvlink_per_link_gbps * model.calibration.scale.get("nvlink", 1.0)
    ladder = SPEED_LADDER.get(gen.arch, SPEED_LADDER["Hopper"])
    speed = next((x for x in ladder if x * NVLS_CHANNELS <= port), ladder[-1])
    ch = NVLS_CHANNELS
    per = speed * gen.nvls_efficiency * (ch - 1) / ch
    per *= 2.0 if collective == "all_reduce" else (ppn - 1) / ppn
    busbw = ch * per
    if rate is not None and math.isfinite(s.intra.gbps):
        solo = model.solo_rate(model.channel_load(model.ring_channels(local)))
        busbw *= min(1.0, rate.gbps / solo.gbps)
    neck = model.path((local[0], local[1]))[0][0]
    lat = launch + NVLS_LATENCY_US["nvlink"]
    name = "nvls"
    if nn > 1:
        name = "nvls_tree"
        net_cap = s.net * (2.0 if nn == 2 else 1.0)
        if net_cap < busbw:
            busbw, neck = net_cap, s.nic
        busbw = min(busbw, ch * NVLS_TREE_PER_CHANNEL.get(gen.arch, (57.7, 45.5))[nn > 2])
        inter = HOP_LATENCY_US["net"]["tree"][2] if ppn == 1 else NVLS_TREE_NET_LATENCY_US
        lat += 2 * math.log2(nn) * inter
    algbw = busbw * p / nccl_steps(collective, p)
    return Variant(name, lat + transfer_us(n, algbw), s.order, busbw, lat, neck, "Simple")


def _calibrated_ring(
    model: CostModel, collective: str, gpus: tuple[int, ...], n: int, rate: Rate | None = None
) -> Variant:
    """A measured sweep's fitted line (scaled B, per-step latency) in the ring's form: only for
    a class whose runs measured both (`_measured_class`)."""
    p = len(gpus)
    channels = model.ring_channels(gpus)
    order = channels[0][0]
    flows = ring_flows(order)
    solo = rate or model.solo_rate(model.channel_load(channels))
    b = solo.gbps
    steps, factor = RING_STEPS[collective]
    lat = steps(p) * model.alpha(flows)
    if collective in ("broadcast", "reduce"):
        chain = model.solo_rate(model.load((f, 1.0) for f in flows[:-1]))
        b = max(b, chain.gbps)
        return Variant("chain", lat + transfer_us(n, b), order, b, lat, chain.bottleneck)
    return Variant("ring", lat + transfer_us(factor(p) * n, b), order, b, lat, solo.bottleneck)


def _pairwise(
    model: CostModel, key: tuple[int, ...], n: int, rate: Rate | None, gpus_per_thread: int
) -> Variant:
    """AlltoAll: every rank sends n/p to every other at once; the network carries what leaves
    each node."""
    p = len(key)
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    parts = model.split_nodes(key)
    local = tuple(sorted(_largest(parts)))
    t_intra, bw, neck, cls = 0.0, math.inf, -1, "nvlink"
    if len(local) >= 2:
        r = rate or model.all_pairs_rate(local)
        t_intra, bw, neck = transfer_us(n / p, r.gbps), r.gbps, r.bottleneck
        cls = (
            "nvlink"
            if all(model.hop_class((local[0], b)) == "nvlink" for b in local[1:])
            else "pcie"
        )
    lat = launch + BASE_LATENCY_US["ring"][2] + HOP_LATENCY_US[cls]["ring"][2]
    if len(local) >= 2 and any(model.crosses_socket((local[0], b)) for b in local[1:]):
        lat += model.socket_latency_us()
    if len(parts) > 1:
        nic = model.nic_resource(len(local))
        net = model.resources[nic].capacity_gbps
        t_net = transfer_us(len(local) * n * (p - len(local)) / p, net)
        lat += HOP_LATENCY_US["net"]["ring"][2]
        if t_net > t_intra:
            t_intra, bw, neck = t_net, net, nic
    return Variant("pairwise", lat + t_intra, key, bw, lat, neck)


def _sendrecv(
    model: CostModel, key: tuple[int, ...], n: int, rate: Rate | None, gpus_per_thread: int
) -> list[Variant]:
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    parts = model.split_nodes(key)
    if len(parts) > 1:
        nic = model.nic_resource(1)
        b, neck, hop = model.resources[nic].capacity_gbps, nic, "net"
    else:
        r = rate or model.solo_rate(model.load([((key[0], key[1]), 1.0)]))
        b, neck, hop = r.gbps, r.bottleneck, model.hop_class((key[0], key[1]))
    sock = (
        model.socket_latency_us()
        if len(parts) == 1 and model.crosses_socket((key[0], key[1]))
        else 0.0
    )
    out = []
    for i, proto in ((0, "LL"), (2, "Simple")):
        bw = min(ll_max_gbps(model, len(parts)), 0.5 * b) if proto == "LL" else b
        lat = launch + BASE_LATENCY_US["ring"][i] + HOP_LATENCY_US[hop]["ring"][i] + sock
        out.append(Variant("p2p", lat + transfer_us(n, bw), key, b, lat, neck, proto))
    return out


def _sendrecv_ring(
    model: CostModel, key: tuple[int, ...], n: int, rate: Rate | None, gpus_per_thread: int
) -> list[Variant]:
    """nccl-tests sendrecv over p GPUs: every rank sends to the next at once (a ring of
    pairs), each moving the whole message."""
    launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
    s = group_shape(model, key, rate)
    bus, neck = (s.net, s.nic) if s.net < s.intra.gbps else (s.intra.gbps, s.intra.bottleneck)
    hop = "net" if len(s.parts) > 1 else ("nvlink" if s.nvlink else "pcie")
    sock = model.socket_latency_us() if s.socket and len(s.parts) == 1 else 0.0
    out = []
    for i, proto in ((0, "LL"), (2, "Simple")):
        bw = min(ll_max_gbps(model, len(s.parts)), 0.5 * bus) if proto == "LL" else bus
        lat = launch + BASE_LATENCY_US["ring"][i] + HOP_LATENCY_US[hop]["ring"][i] + sock
        out.append(Variant("ring", lat + transfer_us(n, bw), s.order, bus, lat, neck, proto))
    return out


def collective_cost(
    model: CostModel,
    collective: str,
    gpus: Sequence[int],
    nbytes: int,
    algorithm: str | None = None,
    *,
    protocol: str | None = None,
    bidirectional: bool = False,
    gpus_per_thread: int = 1,
) -> CollectiveCost:
    """Predicted time of one collective (or `copy`) on `gpus` moving `nbytes` as nccl-tests
    counts them: what NCCL would pick among its algorithms and protocols unless one is named.
    `gpus_per_thread` is how many GPUs one host thread drives (nccl-tests -g N): each adds a
    kernel launch before the collective can finish."""
    if collective not in OPERATIONS:
        raise ValueError(
            f"unknown collective {collective!r}; expected one of {', '.join(OPERATIONS)}"
        )
    if nbytes < 0:
        raise ValueError("the message size cannot be negative")
    if gpus_per_thread < 1:
        raise ValueError("gpus_per_thread must be at least 1")
    key = model.check_gpus(gpus)
    p = len(key)
    if p < 2:
        raise ValueError("a collective needs at least two GPUs")
    if collective == "copy":
        v = copy_variant(model, key, nbytes, bidirectional)
        return _result(model, "copy", key, nbytes, v, [v], copy=True)
    variants: list[Variant] = []
    if collective == "alltoall":
        variants.append(_pairwise(model, key, nbytes, None, gpus_per_thread))
    elif collective == "sendrecv" and p == 2:
        variants.extend(_sendrecv(model, key, nbytes, None, gpus_per_thread))
    elif collective == "sendrecv":
        variants.extend(_sendrecv_ring(model, key, nbytes, None, gpus_per_thread))
    else:
        measured = model.nodes == 1 and _measured_class(model, key)
        if measured:
            # A measured sweep already folds NCCL's own choices into its fitted line.
            ring = _calibrated_ring(model, collective, tuple(sorted(key)), nbytes)
            launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
            variants.append(replace(ring, time_us=ring.time_us + launch, alpha=ring.alpha + launch))
        else:
            variants.extend(_nccl_variants(model, collective, key, nbytes, None, gpus_per_thread))
            launch = (gpus_per_thread - 1) * LAUNCH_US_PER_GPU
            variants = _with_measured_latency(model, collective, key, variants, launch)
    if algorithm is not None or protocol is not None:
        chosen = [
            v
            for v in variants
            if (algorithm is None or v.algorithm == algorithm)
            and (protocol is None or v.protocol == protocol)
        ]
        if not chosen:
            raise ValueError(
                f"algorithm {algorithm or 'any'!r} / protocol {protocol or 'any'!r} does not "
                f"apply to {collective} on {p} GPUs; try "
                + ", ".join(sorted({f"{v.algorithm}/{v.protocol}" for v in variants}))
            )
        best = min(chosen, key=lambda v: v.time_us)
    else:
        best = min(variants, key=lambda v: v.time_us)
    return _result(model, collective, key, nbytes, best, variants)


def _with_measured_latency(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    variants: list[Variant],
    launch: float = 0.0,
) -> list[Variant]:
    """NCCL's variants with their latency replaced by the measured one where small-message runs
    calibrated the latency of the ring's class but no large ones its bandwidth: the ring's
    steps times the measured latency per step (plus `launch`), NCCL's bandwidths kept."""
    if model.nodes > 1 or collective not in RING_STEPS or not model.calibration.alpha_us:
        return variants
    channels = model.ring_channels(tuple(sorted(key)))
    rate = model.solo_rate(model.channel_load(channels))
    cls = model.resources[rate.bottleneck].cls
    if cls not in model.calibration.alpha_us:
        return variants
    steps, _ = RING_STEPS[collective]
    lat = launch + steps(len(key)) * model.alpha(ring_flows(channels[0][0]))
    return [replace(v, time_us=v.time_us - v.alpha + lat, alpha=lat) for v in variants]


def _measured_class(model: CostModel, key: tuple[int, ...]) -> bool:
    """Whether runs measured both the bandwidth and the latency of the ring's class, so its
    fitted line stands for NCCL's choices. Measured in bandwidth only (large messages, a copy
    matrix), the class is priced by NCCL's own variants on the calibrated links: each keeps its
    latency and protocol, the fastest wins at each size, and the curve rises with the size (a
    calibrated ring under the latency of whichever variant wins would jump where LL hands over
    to Simple)."""
    if not model.calibration.scale or not model.calibration.alpha_us:
        return False
    channels = model.ring_channels(tuple(sorted(key)))
    rate = model.solo_rate(model.channel_load(channels))
    cls = model.resources[rate.bottleneck].cls
    return model.is_calibrated(cls) and cls in model.calibration.alpha_us


def _assumptions(model: CostModel, copy: bool, best: Variant, p: int) -> tuple[str, ...]:
    hw = model.hardware
    out = [hw.assumption]
    if model.p2p == "auto" and not model.p2p_status:
        out.append(
            "P2P inferred from the GPU model and link classes (no topo -p2p / NVML status given)"
        )
    if copy:
        eff = hw.describe()["efficiency"]
        assert isinstance(eff, dict)
        legs = "legs pipelined" + ("; both ways share each link" if hw.staged_overlap else "")
        out.append(
            f"copy rates: NVLink line x {eff['nvlink_copy']:g}, PCIe line x {eff['pcie_p2p']:g} "
            f"(P2P) or x {eff['staged_copy']:g} staged ({legs}); sources in the catalogue"
        )
        if COPY_LATENCY_KEY not in model.calibration.alpha_us:
            prior = copy_latency_prior(hw.generation)
            out.append(
                f"copy latency uncalibrated: P2P {prior.p2p_us:g} us, staged "
                f"{prior.staged_us:g} us, +-{prior.band:.0%} (no latency matrix; {prior.source})"
            )
    else:
        out.append(f"NCCL {hw.generation.arch} tuning constants (NCCL 2.30 tuning.cc)")
        cls = model.resources[best.bottleneck].cls if best.bottleneck >= 0 else ""
        measured = model.calibration.alpha_us.get(cls)
        if measured is None:
            out.append(
                "latency uncalibrated: NCCL's published latencies, "
                f"+-{LATENCY_PRIOR_BAND:.0%} (no small-message run of this server or class)"
            )
        else:
            out.append(f"latency measured: {measured:.2f} us per step over {cls}")
        out.append(
            f"{LAUNCH_US_PER_GPU:g} us per extra GPU one host thread launches (nccl-tests -g N)"
        )
    if model.nodes > 1:
        out.append(f"{model.nodes} nodes wired like this one; NIC rate {hw.nic_source}")
        if model.nic_assumed:
            out.append("no NICs in the capture: one NIC per GPU (rail-optimised) assumed")
    out.extend(hw.warnings)
    return tuple(out)


def _result(
    model: CostModel,
    collective: str,
    key: tuple[int, ...],
    nbytes: int,
    best: Variant,
    variants: Sequence[Variant],
    copy: bool = False,
) -> CollectiveCost:
    p = len(key)
    algbw = nbytes / (best.time_us * 1e3) if best.time_us > 0 else 0.0
    res = model.resources[best.bottleneck] if best.bottleneck >= 0 else None
    cap = (res.copy_gbps if copy else res.capacity_gbps) if res else math.inf
    order = best.order
    ring = best.algorithm in ("ring", "nvls") and collective not in ("broadcast", "reduce")
    hops: list[Flow] = []
    if copy or collective == "sendrecv":
        hops = [(key[0], key[1])]
    elif len(order) >= 2:
        local = [g for g in order if g in model.gpu_ids] if model.nodes > 1 else list(order)
        hops = (
            ring_flows(local)
            if ring and len(local) > 2
            else list(zip(local, local[1:], strict=False))
        )
    transports = tuple(
        model.describe_hop(f, copy) for f in hops if f[0] in model.gpu_ids and f[1] in model.gpu_ids
    )
    if model.nodes > 1 and len(model.split_nodes(key)) > 1:
        transports += ("between nodes: RDMA NIC",)
    words = res.description if res else "no shared link"
    text = f"{words}, {cap:.1f} GB/s per direction"
    if res and abs(cap - best.bandwidth) >= 0.05:
        text += f"; the {best.algorithm} gets {best.bandwidth:.1f} GB/s"
    if best.algorithm not in ("ring", "p2p", "copy"):
        text += f" ({best.algorithm})"
    alternatives = {
        (
            v.algorithm
            if len({x.protocol for x in variants}) <= 1
            else f"{v.algorithm}/{v.protocol}"
        ): v.time_us
        for v in variants
    }
    for v in variants:  # plain algorithm names keep their best protocol's time
        alternatives[v.algorithm] = min(alternatives.get(v.algorithm, math.inf), v.time_us)
    if copy and best.protocol == "copy-both":
        algbw *= 2  # both directions summed, as p2pBandwidthLatencyTest prints them
    return CollectiveCost(
        collective=collective,
        gpus=key,
        bytes=nbytes,
        time_us=best.time_us,
        algbw_gbps=algbw,
        busbw_gbps=algbw * BUSBW_FACTOR[collective](p),
        algorithm=best.algorithm,
        order=order,
        bandwidth_gbps=best.bandwidth,
        alpha_us=best.alpha,
        bottleneck=text,
        bottleneck_class=res.cls if res else "nvlink",
        calibrated=model.is_calibrated(res.cls) if res else False,
        alternatives=alternatives,
        protocol=best.protocol,
        transports=transports,
        assumed=_assumptions(model, copy, best, p),
        nodes=len(model.split_nodes(key)),
    )


def concurrent_costs(
    model: CostModel, collective: str, groups: Sequence[Sequence[int]], nbytes: int
) -> list[CollectiveCost]:
    """The same collective run at once by several disjoint groups (TP groups of a job): rates
    from the max-min fair share of every resource they cross, then NCCL's choice per group."""
    return [
        _result(model, collective, k, nbytes, best, variants)
        for k, best, variants in _concurrent(model, collective, groups, nbytes)
    ]


def _concurrent(
    model: CostModel, collective: str, groups: Sequence[Sequence[int]], nbytes: int
) -> list[tuple[tuple[int, ...], Variant, list[Variant]]]:
    """Per group of `concurrent_costs`: its GPUs, NCCL's choice and the variants."""
    keys = [model.check_gpus(g) for g in groups]
    seen: set[int] = set()
    for k in keys:
        if seen & set(k):
            raise ValueError("concurrent groups must not share a GPU")
        seen |= set(k)
    rates = model.share([model.group_load(collective, k) for k in keys])
    out = []
    for k, rate in zip(keys, rates, strict=True):
        variants = _group_variants(model, collective, k, nbytes, rate)
        out.append((k, min(variants, key=lambda v: v.time_us), variants))
    return out


def slowest_cost(
    model: CostModel,
    collective: str,
    groups: Sequence[Sequence[int]],
    nbytes: int,
    chains: bool = False,
) -> CollectiveCost:
    """The slowest (the first of equals) of `concurrent_costs`, or of `chain_costs` with
    `chains`, with only its result built (what a ledger entry reports)."""
    timed = (
        _chains(model, groups, nbytes) if chains else _concurrent(model, collective, groups, nbytes)
    )
    k, best, variants = max(timed, key=lambda x: x[1].time_us)
    return _result(model, "sendrecv" if chains else collective, k, nbytes, best, variants)


def _group_variants(
    model: CostModel, collective: str, key: tuple[int, ...], nbytes: int, rate: Rate
) -> list[Variant]:
    p = len(key)
    if collective == "alltoall":
        return [_pairwise(model, key, nbytes, rate, 1)]
    if collective == "sendrecv" and p == 2:
        return _sendrecv(model, key, nbytes, rate, 1)
    if collective == "sendrecv":
        return _sendrecv_ring(model, key, nbytes, rate, 1)
    if _measured_class(model, key):
        return [_calibrated_ring(model, collective, tuple(sorted(key)), nbytes, rate)]
    variants = _nccl_variants(model, collective, key, nbytes, rate)
    return _with_measured_latency(model, collective, key, variants)


# Relative margin on a bound's rate: it is computed in another order than the priced rate,


def slowest_group_us(
    model: CostModel,
    collective: str,
    groups: Sequence[Sequence[int]],
    nbytes: int,
    chains: bool = False,
) -> float:
    """The time of the slowest of several concurrent groups, without building results: the
    inner loop of placement search. `chains` prices pipeline sends along each group."""
    if chains:
        loads = [model.load(((c[i], c[i + 1]), 1.0) for i in range(len(c) - 1)) for c in groups]
    else:
        loads = [model.group_load(collective, g) for g in groups]
    rates = model.share(loads) if len(loads) > 1 else [model.solo_rate(loads[0])]
    worst = 0.0
    for g, rate in zip(groups, rates, strict=True):
        p = len(g)
        if chains:
            t = _chain_time(model, tuple(g), nbytes, rate)
        else:
            key = tuple(g) if collective == "sendrecv" else tuple(sorted(g))
            t = min(v.time_us for v in _group_variants(model, collective, key, nbytes, rate))
        if p >= 2:
            worst = max(worst, t)
    return worst


def _chain_time(model: CostModel, c: tuple[int, ...], nbytes: int, rate: Rate) -> float:
    flows = [(c[i], c[i + 1]) for i in range(len(c) - 1)]
    hop = "nvlink" if all(model.hop_class(f) == "nvlink" for f in flows) else "pcie"
    sock = model.socket_latency_us() if any(model.crosses_socket(f) for f in flows) else 0.0
    return chain_time(nbytes, rate.gbps, hop, sock)


def chain_time(nbytes: int, gbps: float, hop: str, socket_us: float = 0.0) -> float:
    """A pipeline chain's time at `gbps` with hops of one latency class (nvlink or pcie),
    plus `socket_us` where a hop crosses sockets."""
    return (
        BASE_LATENCY_US["ring"][2]
        + HOP_LATENCY_US[hop]["ring"][2]
        + socket_us
        + transfer_us(nbytes, gbps)
    )


def chain_costs(
    model: CostModel, chains: Sequence[Sequence[int]], nbytes: int
) -> list[CollectiveCost]:
    """Pipeline sends: each chain passes `nbytes` from stage to stage, every boundary at
    once; all chains run together and share what they cross."""
    return [
        _result(model, "sendrecv", c, nbytes, v, variants)
        for c, v, variants in _chains(model, chains, nbytes)
    ]


def _chains(
    model: CostModel, chains: Sequence[Sequence[int]], nbytes: int
) -> list[tuple[tuple[int, ...], Variant, list[Variant]]]:
    """Per chain of `chain_costs`: its GPUs and its time as a variant."""
    keys = [model.check_gpus(c) for c in chains]
    loads = [model.load(((c[i], c[i + 1]), 1.0) for i in range(len(c) - 1)) for c in keys]
    rates = model.share(loads)
    out = []
    for c, rate in zip(keys, rates, strict=True):
        t = _chain_time(model, c, nbytes, rate)
        lat = t - transfer_us(nbytes, rate.gbps)
        v = Variant("chain", t, c, rate.gbps, lat, rate.bottleneck)
        out.append((c, v, [v]))
    return out


def curve(
    model: CostModel, collective: str, gpus: Sequence[int], sizes: Sequence[int] = STANDARD_SIZES
) -> list[CollectiveCost]:
    """Predictions over message sizes (default 8 B .. 8 GiB), as a nccl-tests sweep prints."""
    return [collective_cost(model, collective, gpus, n) for n in sizes]
