"""Calibration from measured runs: a nccl-tests sweep's fitted line (latency per step and bus
bandwidth) and a p2pBandwidthLatencyTest matrix's ratios, each turned into a capacity scale and
per-hop latency for the class that limited it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from topoweb.core.catalogue import LAUNCH_US_PER_GPU
from topoweb.core.costs.collectives import collective_cost
from topoweb.core.costs.model import CostModel, with_options
from topoweb.core.costs.records import (
    COPY_LATENCY_KEY,
    RING_STEPS,
    SMALL_MESSAGE_BYTES,
    STAGED_LATENCY_KEY,
    Calibration,
)
from topoweb.core.model import NcclRun, P2PResult


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line time = a + n / B over (bytes, time_us) rows, weighted by 1/time
    so the many small latency-bound rows still shape `a` without the big rows' absolute
    errors drowning them (nor the reverse, as 1/time^2 does). Returns (a in us, B in GB/s);
    a is kept at 0 or above."""
    pts = [(n, t) for n, t in points if t > 0]
    if len(pts) < 2:
        raise ValueError("calibration needs at least two timed rows")
    w = [1 / t for _, t in pts]
    sw = sum(w)
    sx = sum(wi * n for wi, (n, _) in zip(w, pts, strict=True))
    sy = sum(wi * t for wi, (_, t) in zip(w, pts, strict=True))
    sxx = sum(wi * n * n for wi, (n, _) in zip(w, pts, strict=True))
    sxy = sum(wi * n * t for wi, (n, t) in zip(w, pts, strict=True))
    det = sw * sxx - sx * sx
    if det <= 0:
        raise ValueError("calibration rows need at least two different sizes")
    slope = (sw * sxy - sx * sy) / det
    a = (sy - slope * sx) / sw
    if a < 0:  # refit through the origin
        a, slope = 0.0, sxy / sxx
    if slope <= 0:
        raise ValueError("the measured times do not grow with size")
    return a, 1 / slope / 1e3


def calibrate_from_nccl(
    model: CostModel, run: NcclRun, gpus: Sequence[int] | None = None
) -> Calibration:
    """Calibrate the class that limited a nccl-tests sweep on `gpus` (default: the run's
    devices): its rows from 64 KiB up give the bus bandwidth B (a capacity scale), its rows
    under 64 KiB the fixed time a (a latency per ring step), each only where the run has them."""
    if run.failed or not run.rows:
        raise ValueError("this nccl-tests run has no usable rows")
    if run.collective not in RING_STEPS:
        raise ValueError(f"cannot calibrate from collective {run.collective!r}")
    hosts = list(dict.fromkeys(r.host for r in run.ranks if r.host))
    if gpus is None and len(hosts) > 1 and model.nodes == 1:
        # A run over several hosts calibrates the network of servers wired like this one:
        # the same ranks on a model of that many nodes (GPU indices node-major).
        per_host = {h: sum(1 for r in run.ranks if r.host == h) for h in hosts}
        local = len(model.local_order)
        if len(set(per_host.values())) != 1 or max(per_host.values()) > local:
            raise ValueError("the run's hosts hold different numbers of ranks")
        model = with_options(model, nodes=len(hosts))
        per = per_host[hosts[0]]
        gpus = [node * local + g for node in range(len(hosts)) for g in range(per)]
    if gpus is None:
        devices = [r.device for r in run.ranks if r.device is not None]
        gpus = devices if len(devices) >= 2 else list(range(run.n_gpus or 0))
    key = model.check_gpus(gpus)
    p = len(key)
    if p < 2:
        raise ValueError("calibration needs a run over at least two GPUs")
    pts = [
        (float(r.bytes), float(r.out_of_place.time_us))
        for r in run.rows
        if r.out_of_place.time_us is not None and r.out_of_place.time_us > 0 and r.bytes > 0
    ]
    steps, factor = RING_STEPS[run.collective]
    # The fit uses the ring (pairwise, point-to-point) step counts, so the bandwidth it corrects
    # must be that algorithm's, even where another would win at this size.
    algorithm = {"alltoall": "pairwise", "sendrecv": "p2p" if p == 2 else "ring"}.get(
        run.collective, "ring"
    )
    if run.collective in ("broadcast", "reduce"):
        algorithm = "ring"
    base = collective_cost(model, run.collective, key, 1 << 30, algorithm=algorithm)
    if algorithm == "ring" and base.protocol != "Simple":
        base = collective_cost(model, run.collective, key, 1 << 30, algorithm, protocol="Simple")
    cls = base.bottleneck_class
    # Small rows are latency-bound and large rows bandwidth-bound: each sets only its own term,
    # so a run of small messages alone calibrates the latency without a meaningless bandwidth
    # (and a run of large messages alone the bandwidth without a meaningless latency).
    small = [(n, t) for n, t in pts if n < SMALL_MESSAGE_BYTES]
    large = [(n, t) for n, t in pts if n >= SMALL_MESSAGE_BYTES]
    scale: dict[str, float] = {}
    alpha: dict[str, float] = {}
    words: list[str] = []
    bus = base.bandwidth_gbps
    if len({n for n, _ in large}) >= 2:
        _, b_line = fit_alpha_beta(large)
        bus = b_line * factor(p)
        scale[cls] = bus / base.bandwidth_gbps * model.calibration.scale.get(cls, 1.0)
        words.append(f"B={bus:.1f} GB/s")
    if small:
        # With one thread driving several GPUs (nccl-tests -g N) the rows carry that thread's
        # launches (catalogue.LAUNCH_US_PER_GPU): the harness's, not the class's latency.
        launch = ((run.n_gpus or 1) - 1) * LAUNCH_US_PER_GPU
        fixed = statistics.median(t - launch - n * factor(p) / (bus * 1e3) for n, t in small)
        alpha[cls] = max(fixed, 0.0) / steps(p)
        words.append(f"a={alpha[cls]:.2f} us per step from {len(small)} rows under 64 KiB")
    if not words:
        raise ValueError(
            "calibration needs rows under 64 KiB (latency) or two sizes from 64 KiB up (bandwidth)"
        )
    return Calibration(
        scale,
        alpha,
        (f"nccl-tests {run.collective} on GPUs {list(key)}: {', '.join(words)} ({cls})",),
    )


def calibrate_from_p2p(model: CostModel, result: P2PResult) -> Calibration:
    """Per class, the median ratio of measured to predicted unidirectional copy bandwidth
    (P2P=Enabled matrix); from the GPU latency matrices, the median fixed time of one copy with
    P2P and staged through the host."""
    uni = result.matrices.get("unidirectional_p2p_enabled_gbps")
    if uni is None:
        raise ValueError("the p2p result has no unidirectional P2P=Enabled matrix")
    ratios: dict[str, list[float]] = {}
    n = len(uni)
    for i in range(n):
        for j in range(n):
            if i == j or i not in model.gpu_ids or j not in model.gpu_ids:
                continue
            rate = model.solo_rate(model.copy_load([((i, j), 1.0)]), copy=True)
            cls = model.resources[rate.bottleneck].cls
            ratios.setdefault(cls, []).append(uni[i][j] / rate.gbps)
    if not ratios:
        raise ValueError("the p2p result shares no GPU pair with this topology")
    # One copy's own fixed time, P2P and staged, from the latency matrices: what copies price
    # in place of the published priors (copy_latency). It is the copy engine's per-copy work,
    # not the per-step latency of NCCL's kernels, so it calibrates copies only.
    alphas: dict[str, float] = {}
    for key, name, staged in (
        (COPY_LATENCY_KEY, "latency_gpu_p2p_enabled_us", False),
        (STAGED_LATENCY_KEY, "latency_gpu_p2p_disabled_us", True),
    ):
        matrix = result.matrices.get(name)
        if matrix is None:
            continue
        cells = [
            matrix[i][j]
            for i in range(len(matrix))
            for j in range(len(matrix))
            if i != j
            and i in model.gpu_ids
            and j in model.gpu_ids
            and matrix[i][j] > 0
            and (staged or model.copy_transport((i, j)) != "staged")
        ]
        if cells:
            alphas[key] = statistics.median(cells)
    return Calibration(
        {c: statistics.median(v) * model.calibration.scale.get(c, 1.0) for c, v in ratios.items()},
        alphas,
        (f"p2pBandwidthLatencyTest over {n} GPUs",),
    )
