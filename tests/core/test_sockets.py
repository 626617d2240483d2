"""Sockets cost something (issue 25): on two-socket PCIe servers a pair across the sockets pays
the socket link (QPI/UPI/xGMI, from the catalogue) and its latency, and a k-GPU group chosen
from free GPUs on both sockets stays in one socket when that socket has k free."""

from __future__ import annotations

import pytest

from tests.core.topo_fixtures import fixture_text
from topoweb.core.costs import build_model, collective_cost
from topoweb.core.formats import parse_text
from topoweb.core.model import Topology
from topoweb.core.placement import best_group, select_gpus

TWO_SOCKETS = [
    # (capture, NVML name): GPU0-GPU1 share a socket (NODE), GPU2-GPU3 the other one.
    ("topo_09", "NVIDIA RTX 6000 Ada Generation"),
    ("topo_18", "NVIDIA A100 80GB PCIe"),
]


def _topo(prefix: str) -> Topology:
    topo = parse_text(fixture_text(prefix), expected="topology")
    assert isinstance(topo, Topology)
    return topo


@pytest.mark.parametrize(("prefix", "gpu"), TWO_SOCKETS)
@pytest.mark.parametrize("nbytes", [8, 1 << 20, 256 << 20])
def test_a_cross_socket_pair_costs_more_than_a_same_socket_one(
    prefix: str, gpu: str, nbytes: int
) -> None:
    topo = _topo(prefix)
    assert topo.link_class("GPU0", "GPU1") == "NODE"
    assert topo.link_class("GPU0", "GPU2") == "SYS"
    model = build_model(topo, gpu)
    # sendrecv takes one step, an all_reduce over two GPUs two (each waits on the socket).
    for collective, steps in (("sendrecv", 1), ("all_reduce", 2)):
        same = collective_cost(model, collective, [0, 1], nbytes)
        cross = collective_cost(model, collective, [0, 2], nbytes)
        assert cross.time_us > same.time_us, (collective, same.time_us, cross.time_us)
        # The extra latency is the socket link's, named by the catalogue.
        extra = cross.alpha_us - same.alpha_us
        assert extra == pytest.approx(steps * model.socket_latency_us()), collective


@pytest.mark.parametrize(("prefix", "gpu"), TWO_SOCKETS)
@pytest.mark.parametrize("free", [(1, 2, 3), (0, 2, 3), (0, 1, 2), (0, 1, 3), (1, 2, 3, 0)])
def test_a_group_from_both_sockets_stays_in_one_when_it_has_room(
    prefix: str, gpu: str, free: tuple[int, ...]
) -> None:
    model = build_model(_topo(prefix), gpu)
    socket = {0: 0, 1: 0, 2: 1, 3: 1}
    group = best_group(model, 2, free)
    assert len({socket[g] for g in group}) == 1, (free, group)
    (chosen,) = select_gpus({"host": (model, free)}, 2, top=1)
    assert len({socket[g] for g in chosen.gpus}) == 1, (free, chosen)
