"""The layout's grid look-ups answer what the scans of every pair answered (core.grid, and
core.layout._Obstacles against layout.hits), on random boxes, curves and labels, borders and
rounding included; and a 256-GPU NVLink mesh is drawn with them in bounded work."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from tests import synthetic
from topoweb.core import layout
from topoweb.core.export import graph_document
from topoweb.core.formats import parse_text
from topoweb.core.grid import close_labels, labels_on_lines, near


def _mids(rng: random.Random, n: int) -> list[tuple[str, float, float]]:
    # Positions on the layout's 0.1 px raster, many on the grid's borders.
    return [
        (f"nv:{k}", rng.randrange(0, 4000) / 10 * 4, rng.randrange(0, 1600) / 10) for k in range(n)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_close_labels_are_the_pairs_a_scan_finds(seed: int) -> None:
    rng = random.Random(seed)
    mids = _mids(rng, 300)
    scan = {
        name
        for i, (e, x, y) in enumerate(mids)
        for f, u, v in mids[i + 1 :]
        if abs(x - u) < 40 and abs(y - v) < 16
        for name in (e, f)
    }
    assert close_labels(mids, 40.0, 16.0) == scan


@pytest.mark.parametrize("seed", range(20))
def test_labels_on_lines_are_those_a_scan_finds(seed: int) -> None:
    rng = random.Random(seed)
    mids = _mids(rng, 200)
    bends = {e: 0.0 for e, _, _ in mids[::2]}
    lines = []
    for _ in range(60):
        x, y = rng.randrange(0, 16000) / 10, rng.randrange(0, 1600) / 10
        length = rng.randrange(0, 6000) / 10
        end = (x + length, y) if rng.random() < 0.5 else (x, y + length / 4)
        lines.append(((x, y), end))
    scan = {
        e
        for e, x, y in mids
        if e in bends and any(near(p, q, (x, y), (20.0, 12.0)) for p, q in lines)
    }
    assert labels_on_lines(mids, bends, lines, (20.0, 12.0)) == scan


@pytest.mark.parametrize("seed", range(10))
def test_obstacles_answer_as_hits_for_straight_and_bent_curves(seed: int) -> None:
    rng = random.Random(seed)
    boxes = {
        f"b{k}": (
            rng.randrange(0, 20000) / 10,
            rng.randrange(0, 8000) / 10,
            rng.choice([40.0, 96.0, 120.0, 6.0]),
            rng.choice([28.0, 36.0, 200.0]),
        )
        for k in range(150)
    }
    grid = layout._Obstacles()
    for box_id, box in boxes.items():
        grid.add(box_id, box)
    ids = list(boxes)
    for _ in range(400):
        a, b = rng.sample(ids, 2)
        p0, p2 = boxes[a][:2], boxes[b][:2]
        bend = rng.choice([0.0, 0.0, 40.0, -60.0, 220.0, -380.0])
        assert grid.hits(p0, p2, bend, (a, b)) == layout.hits(p0, p2, bend, boxes, (a, b))


def test_a_256_gpu_nvlink_mesh_tests_each_sample_against_the_boxes_near_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topo = parse_text(synthetic.nccl_xml(256, nvlinks=18))
    counts: Counter[str] = Counter()
    real = layout.hits

    def scanned(*args: Any, **kwargs: Any) -> bool:
        counts["scans"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(layout, "hits", scanned)
    doc = graph_document(topo)
    edges = [e for e in doc["elements"] if e["data"]["id"].startswith("nv:")]
    assert len(edges) == 256 * 18  # each GPU to its 18 next ones: 4,608 pairs
    assert counts["scans"] == 0  # no edge's bend looked at every box
