"""Peer copies (cudaMemcpyPeer, what p2pBandwidthLatencyTest and nvbandwidth time): one copy
one way or both ways at once at copy-engine rates over NVLink, PCIe P2P or staged through host
memory, and the predicted P2P matrices of a whole server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from topoweb.core.catalogue import copy_latency_prior
from topoweb.core.costs.records import COPY_LATENCY_KEY, STAGED_LATENCY_KEY, Variant, transfer_us

if TYPE_CHECKING:
    from topoweb.core.costs.model import CostModel


def copy_latency(model: CostModel, a: int, b: int) -> float:
    """The fixed time (us) of one peer copy from GPU a to GPU b, whatever its size: the
    server's own latency matrix where a calibration carries it, else the published prior of
    the GPU generation (catalogue.COPY_LATENCY): the copy engine's per-copy work dominates, so
    the prior depends on the generation, not on the link."""
    measured = model.calibration.alpha_us
    prior = copy_latency_prior(model.hardware.generation)
    if model.copy_transport((a, b)) == "staged":
        return measured.get(STAGED_LATENCY_KEY, prior.staged_us)
    return measured.get(COPY_LATENCY_KEY, prior.p2p_us)


def copy_band(model: CostModel, a: int, b: int) -> float:
    """The relative band of the copy rate the model prices from GPU a to GPU b: the spread of
    the published figures its copy engine share comes from."""
    hw = model.hardware
    how = model.copy_transport((a, b))
    return {"nvlink": hw.nvlink_copy_band, "p2p": hw.pcie_copy_band}.get(how, hw.staged_band)


def copy_variant(model: CostModel, key: tuple[int, ...], n: int, bidirectional: bool) -> Variant:
    """cudaMemcpyPeer: one way, or both ways at once (rates summed as p2pBandwidthLatencyTest
    reports them); copy-engine rates, no NCCL efficiency."""
    if model.nodes > 1 and len(model.split_nodes(key)) > 1:
        raise ValueError("a peer copy needs both GPUs in one server")
    if len(key) != 2:
        raise ValueError(f"a copy is between two GPUs, got {len(key)}")
    fwd = (key[0], key[1])
    lat = copy_latency(model, *fwd)
    if bidirectional:
        rates = model.share(
            [model.copy_load([(fwd, 1.0)]), model.copy_load([(fwd[::-1], 1.0)])], copy=True
        )
        slow = min(rates, key=lambda r: r.gbps)
        total = sum(r.gbps for r in rates)
        t = lat + transfer_us(n, slow.gbps)
        return Variant("copy", t, key, total, lat, slow.bottleneck, "copy-both")
    r = model.solo_rate(model.copy_load([(fwd, 1.0)]), copy=True)
    return Variant("copy", lat + transfer_us(n, r.gbps), key, r.gbps, lat, r.bottleneck, "copy")


def p2p_matrix(model: CostModel) -> dict[str, list[list[float | None]]]:
    """Predicted unidirectional and bidirectional peer-copy bandwidth (GB/s) for every GPU
    pair, as p2pBandwidthLatencyTest's P2P=Enabled matrices lay them out (diagonal None):
    copy-engine rates over NVLink / PCIe P2P, or staged through the host without P2P."""
    return _p2p_matrices(model, bidirectional=True)


def p2p_unidirectional(model: CostModel) -> list[list[float | None]]:
    """`p2p_matrix`'s unidirectional matrix alone (the same numbers), for callers that do not
    show the bidirectional one: it skips pricing both ways at once."""
    return _p2p_matrices(model, bidirectional=False)["unidirectional_gbps"]


def _p2p_matrices(model: CostModel, bidirectional: bool) -> dict[str, list[list[float | None]]]:
    idx = sorted(model.gpu_ids)
    caps = model.capacities(copy=True)
    uni: list[list[float | None]] = []
    bi: list[list[float | None]] = []
    # A pair's figures depend only on its routes' shape (see _route_shape): each shape is
    # priced once, by its first pair (a 576-GPU NVSwitch domain has one shape, not 165,600).
    solo: dict[tuple[tuple[float, float], ...], float] = {}
    both: dict[tuple[Any, ...], float] = {}
    for i, a in enumerate(idx):
        uni.append([])
        bi.append([])
        for j, b in enumerate(idx):
            if a == b:
                uni[-1].append(None)
                bi[-1].append(None)
                continue
            there = model.copy_load([((a, b), 1.0)])
            key = tuple((caps[r], w) for r, w in there.items())  # all that _tightest reads
            got = solo.get(key)
            if got is None:
                got = solo[key] = round(model.solo_rate(there, True).gbps, 3)
            uni[-1].append(got)
            if not bidirectional:
                continue
            if j < i:  # both ways at once is the same pair of copies, already priced
                bi[-1].append(bi[j][i])
                continue
            loads = [there, model.copy_load([((b, a), 1.0)])]
            shape = _route_shape(caps, loads)
            got = both.get(shape)
            if got is None:
                got = both[shape] = round(sum(r.gbps for r in model.share(loads, copy=True)), 3)
            bi[-1].append(got)
    if not bidirectional:
        return {"unidirectional_gbps": uni}
    return {"unidirectional_gbps": uni, "bidirectional_gbps": bi}


def _route_shape(caps: list[float], loads: Sequence[dict[int, float]]) -> tuple[Any, ...]:
    """The loads with their resources renamed 0, 1, ... in order of first appearance, and the
    renamed resources' capacities. `solo_rate` and `share` read a load only through its
    resources' capacities, its weights (in its order) and which loads share a resource, so two
    sets of loads of equal shape get bit-identical rates (the same float operations in the same
    order); the bottleneck they name may differ, which the matrices do not show."""
    local: dict[int, int] = {}
    renamed = tuple(
        tuple((local.setdefault(r, len(local)), w) for r, w in load.items()) for load in loads
    )
    return renamed, tuple(caps[r] for r in local)


# --- calibration ---------------------------------------------------------------------------
