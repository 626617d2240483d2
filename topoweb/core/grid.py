"""Spatial look-ups for the layout (core.layout): boxes filed under the cells of a grid they
reach, and which labels sit close to each other or on a routed line, in work bounded by what
is near each one rather than by every pair (a 256-GPU NVLink mesh has 4,608 labels). Each
gives what the scan of every pair gave."""

from __future__ import annotations

import math
from typing import TypeVar

T = TypeVar("T")


def span(low: float, high: float, cell: float) -> range:
    # widened by a millionth of a cell: a box is found whatever the rounding at a border
    return range(math.floor(low / cell - 1e-6), math.floor(high / cell + 1e-6) + 1)


def file_under(
    grid: dict[tuple[int, int], list[T]],
    entry: T,
    extent: tuple[float, float, float, float],
    cell_w: float,
    cell_h: float,
) -> None:
    """Put `entry` under every cell of the grid that the extent (left, right, top, bottom)
    reaches."""
    left, right, top, bottom = extent
    cols = span(left, right, cell_w)
    for row in span(top, bottom, cell_h):
        for col in cols:
            grid.setdefault((col, row), []).append(entry)


def close_labels(mids: list[tuple[str, float, float]], dx: float, dy: float) -> set[str]:
    """The labels with another closer than dx across and dy down, each pair looked at once,
    only between neighbouring cells of a grid a hair wider than that (so a pair that close is
    never two cells apart, whatever the rounding of a division)."""
    cw, ch = dx * 1.01, dy * 1.01
    cells: dict[tuple[int, int], list[int]] = {}
    for k, (_, x, y) in enumerate(mids):
        cells.setdefault((math.floor(x / cw), math.floor(y / ch)), []).append(k)
    out: set[str] = set()
    for (col, row), members in cells.items():
        others = [j for c in (col - 1, col, col + 1) for r in (row - 1, row, row + 1)
                  for j in cells.get((c, r), ())]  # fmt: skip
        for k in members:
            e, x, y = mids[k]
            for j in others:
                f, u, v = mids[j]
                if j > k and abs(x - u) < dx and abs(y - v) < dy:
                    out.update((e, f))
    return out


def labels_on_lines(
    mids: list[tuple[str, float, float]],
    bends: dict[str, float],
    lines: list[tuple[tuple[float, float], tuple[float, float]]],
    half: tuple[float, float],
) -> set[str]:
    """The labels of bent edges (in `bends`) that `near` puts on one of the routed lines: each
    label tested against the lines whose widened box reaches its cell of a grid."""
    cell_w, cell_h = 64.0, 64.0
    hw, hh = half
    cells: dict[tuple[int, int], list[int]] = {}
    for k, ((x0, y0), (x1, y1)) in enumerate(lines):
        extent = (min(x0, x1) - hw, max(x0, x1) + hw, min(y0, y1) - hh, max(y0, y1) + hh)
        file_under(cells, k, extent, cell_w, cell_h)
    return {
        e
        for e, x, y in mids
        if e in bends
        and any(
            near(*lines[k], (x, y), half)
            for k in cells.get((math.floor(x / cell_w), math.floor(y / cell_h)), ())
        )
    }


def near(
    p: tuple[float, float],
    q: tuple[float, float],
    at: tuple[float, float],
    half: tuple[float, float],
) -> bool:
    """Whether the axis-parallel segment p-q passes through the box of half-size `half` at `at`."""
    (x0, y0), (x1, y1), (x, y), (hw, hh) = p, q, at, half
    return min(x0, x1) - hw < x < max(x0, x1) + hw and min(y0, y1) - hh < y < max(y0, y1) + hh
