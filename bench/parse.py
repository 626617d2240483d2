"""Parse speed per sample kind: median time per parse and files per second, over the fixtures;
the 8-GPU + 12-NIC capture's median against its target.

Run: python bench/parse.py. Files that a reader rejects (by design, or because that reader is
not written yet) are counted and left out of the timings; a kind with none left prints n/a.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from topoweb.core.formats import ParseError, parse_text  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
KINDS = ("topo", "nccl", "p2p")
REPEATS = 200
TOPO_01 = "topo_01_h200-8gpu-12nic-numaid.txt"
TARGET_TOPO_01_S = 0.5e-3  # issue 11: an 8-GPU + 12-NIC capture parsed in under 0.5 ms


def median_seconds(text: str, repeats: int = REPEATS) -> float:
    """Median wall time of one parse, from `repeats` timed runs after a warm-up."""
    parse_text(text)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        parse_text(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    print(f"{'kind':<6} {'files':>5} {'rejected':>8} {'median/parse':>14} {'files/s':>10}")
    for kind in KINDS:
        files = sorted(FIXTURES.glob(f"{kind}_*"))
        medians: list[float] = []
        rejected = 0
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            try:
                medians.append(median_seconds(text))
            except ParseError:
                rejected += 1
        if medians:
            per_file = statistics.median(medians)
            rate = len(medians) / sum(medians)
            print(
                f"{kind:<6} {len(files):>5} {rejected:>8} {per_file * 1e6:>11.1f} us {rate:>10.0f}"
            )
        else:
            print(f"{kind:<6} {len(files):>5} {rejected:>8} {'n/a':>14} {'n/a':>10}")
    try:
        topo_01 = median_seconds((FIXTURES / TOPO_01).read_text(encoding="utf-8"), 1000)
        print(
            f"topo_01 (8 GPU + 12 NIC): median {topo_01 * 1e6:.1f} us per parse  "
            f"target < {TARGET_TOPO_01_S * 1e6:.0f} us "
            f"{'ok' if topo_01 < TARGET_TOPO_01_S else 'MISSED'}"
        )
    except ParseError as exc:
        print(f"topo_01 (8 GPU + 12 NIC): n/a ({exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
