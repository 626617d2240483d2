"""Work bounded by design (issue 15): past the sizes an exact search can afford, rings and
best groups are chosen by bounded rules with a stated guarantee, on machines as large as
real ones and on the pathological ring (neighbours NV1, the rest SYS)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests import synthetic
from tests.core import topologies as T
from topoweb.core import layout
from topoweb.core.costs import EXACT_RING, build_model, collective_cost
from topoweb.core.export import graph_document
from topoweb.core.formats.topo import parse
from topoweb.core.model import Device, Topology
from topoweb.core.placement import DEFAULT_SHAPE, best_group, recommend
from topoweb.core.steptime import layouts_for


def ring_model(n: int):  # type: ignore[no-untyped-def]
    return build_model(parse(synthetic.gpu_ring(n)), None)


def hops_are_ring_neighbours(order: tuple[int, ...], n: int) -> bool:
    return all((a - b) % n in (1, n - 1) for a, b in zip(order, order[1:] + order[:1], strict=True))


def test_a_ring_of_32_gpus_follows_the_nvlink_neighbours_both_ways() -> None:
    model = ring_model(32)
    channels = model.ring_channels(range(32))
    assert len(channels) == 2
    (first, share_a), (second, share_b) = channels
    assert hops_are_ring_neighbours(first, 32)
    assert second == first[::-1]
    assert abs(share_a - 0.5) < 1e-9 and abs(share_b - 0.5) < 1e-9


def test_past_the_exact_size_the_ring_is_never_slower_than_the_hierarchy_ring() -> None:
    model = ring_model(40)
    gpus = tuple(range(0, 40, 2)) + (1, 3)  # 22 GPUs: no NVLink ring closes over them
    assert len(gpus) > EXACT_RING
    ring, _ = model.ring_channels(gpus)[0]
    chosen = model.rings.rate(ring).gbps
    assert chosen >= model.rings.rate(model.rings.hierarchy_ring(tuple(sorted(gpus)))).gbps


def test_an_all_reduce_over_a_whole_nvl72_prices_the_nvswitch_not_a_socket() -> None:
    model = build_model(T.nvl72(), None)
    cost = collective_cost(model, "all_reduce", list(range(72)), 1 << 30)
    assert cost.bottleneck_class == "nvlink", cost.bottleneck
    assert all("NVLink" in hop for hop in cost.transports)


def test_the_best_32_gpus_of_a_160_gpu_ring_are_as_fast_as_32_ring_neighbours() -> None:
    model = ring_model(160)
    group = best_group(model, 32)
    assert len(set(group)) == 32

    def busbw(gpus: tuple[int, ...]) -> float:
        return collective_cost(model, "all_reduce", gpus, 1 << 28).busbw_gbps

    assert round(busbw(group), 1) >= round(busbw(tuple(range(32))), 1)


def test_a_576_gpu_domain_past_its_budget_recommends_and_counts_what_it_left_unpriced() -> None:
    # A budget already spent (0 s): whatever this machine's speed, the first layout is priced
    # and every other one counted as left unpriced (a real budget's share is the bench's).
    model = build_model(parse(synthetic.nvswitch_domain(576)), None)
    found = recommend(model, DEFAULT_SHAPE, time_budget_s=0.0)
    doc = found.to_document()
    assert found.best is not None and len(found.placements) >= 1
    assert len(found.placements) + found.unpriced == len(layouts_for(DEFAULT_SHAPE, 576))
    assert found.unpriced > 0 and doc["unpriced_layouts"] == found.unpriced


def test_a_16_gpu_server_prices_every_layout_however_small_the_budget() -> None:
    model = build_model(T.nvswitch_16gpu(), None)
    found = recommend(model, DEFAULT_SHAPE, time_budget_s=0.0)
    assert found.unpriced == 0 and "unpriced_layouts" not in found.to_document()
    assert len(found.placements) == len(layouts_for(DEFAULT_SHAPE, 16))


def test_a_576_gpu_nvswitch_domain_is_drawn_in_work_and_size_linear_in_its_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topo = parse(synthetic.nvswitch_domain(576))
    counts: Counter[str] = Counter()
    line_test, box_test = layout._Obstacles.hits, layout._inside

    def counted_line(*args: Any, **kwargs: Any) -> bool:
        counts["lines"] += 1
        return line_test(*args, **kwargs)

    def counted_box(*args: Any) -> bool:
        counts["boxes"] += 1
        return box_test(*args)

    monkeypatch.setattr(layout._Obstacles, "hits", counted_line)
    monkeypatch.setattr(layout, "_inside", counted_box)
    doc = graph_document(topo)
    elements = doc["elements"]
    kinds = Counter(e["data"].get("kind", "edge") for e in elements)
    assert kinds["gpu"] == 576 and kinds["nvswitch"] == 1
    nvlink = [e["data"] for e in elements if e["data"]["id"].startswith("nv:")]
    assert len(nvlink) == 576  # each GPU to the fabric node, no pair edge
    assert {d["target"] for d in nvlink} == {"nvswitch0"}
    # the GPUs, their PCIe and NVLink edges; two NUMA boxes and CPUs, the fabric, the socket link
    assert len(elements) == 3 * 576 + 6
    # Every GPU's peers are one row naming the fabric, not 575 rows.
    assert all(rows == [{"class": "NV18", "fabric": "nvswitch0"}] for rows in doc["paths"].values())
    assert len(json.dumps(doc)) < 1_000_000  # 43 MB with a row a pair
    # Each GPU's drop to the fabric tries a bounded number of lanes (a side is given up at the
    # first obstacle), each line tested against the boxes near it only: 68 lines and 40 box
    # tests a GPU here (267 lines, each against all ~600 boxes, before).
    assert counts["lines"] <= 100 * 576
    assert counts["boxes"] <= 60 * 576


def test_a_gpu_is_found_by_its_index_without_a_scan_of_the_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The acceptance report looks up both GPUs of every pair: a scan each was cubic on 576.
    topo = parse(synthetic.nvswitch_domain(72))
    scans = Counter[str]()
    listed = Topology.gpus.fget
    assert listed is not None

    def counted(self: Topology) -> tuple[Device, ...]:
        scans["gpus"] += 1
        return listed(self)

    monkeypatch.setattr(Topology, "gpus", property(counted))
    assert [topo.gpu(i).id for i in range(72)] == [f"GPU{i}" for i in range(72)]
    assert [topo.gpu(i).id for i in range(72)] == [f"GPU{i}" for i in range(72)]
    with pytest.raises(KeyError):
        topo.gpu(72)
    assert scans["gpus"] <= 1
