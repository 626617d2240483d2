"""One name per GPU part for lists: NVML, topo -m captures and people write the same part many
ways ("A100", "A100 SXM4", "A100-SXM-80GB", "NVIDIA A100-SXM4-40GB"); a fleet list shows the
part's family, and the raw name stays in the server's detail."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

# Longest first where one name contains another (H200 before H20, L40S before L40).
FAMILIES = (
    "GB200", "B200", "H200", "H100", "H800", "H20", "A100", "A800", "A40", "A30", "A10",
    "L40S", "L40", "L4", "RTX 6000 Ada", "RTX A6000", "RTX 5090", "RTX 4090", "RTX 3090",
    "RTX 2080 Ti", "V100", "T4", "P100", "P40", "GTX 1080 Ti", "GTX 1080", "GTX 1070", "M60",
    "K80",
)  # fmt: skip
_PATTERNS = [
    (
        f,
        re.compile(
            r"(?<![A-Za-z0-9])" + re.escape(f).replace(r"\ ", r"[\s_-]*") + r"(?![0-9])", re.I
        ),
    )
    for f in sorted(FAMILIES, key=len, reverse=True)
]
_VENDOR = re.compile(r"^(NVIDIA\s+)?(Tesla\s+|GeForce\s+|Quadro\s+)?", re.I)


def gpu_family(raw: str | None) -> str:
    """The part's family ("A100") for any way of writing it; an unknown name without its
    vendor words; "" when none was reported."""
    name = (raw or "").strip()
    if not name:
        return ""
    for family, pattern in _PATTERNS:
        if pattern.search(name):
            return family
    return _VENDOR.sub("", name).strip() or name


# "6x GeForce GTX 1070 + 1x GTX 1080": a person's word on a server whose GPUs differ.
_PART = re.compile(r"^\s*(\d+)\s*[x×]\s*(.+?)\s*$", re.I)


def count_models(names: Iterable[str]) -> list[tuple[str, int]]:
    """Each distinct GPU name with how many GPUs carry it, most common first (ties in order of
    first appearance)."""
    counts = Counter(n.strip() for n in names if n and n.strip())
    return sorted(counts.items(), key=lambda item: -item[1])


def models_from_text(text: str) -> list[tuple[str, int]]:
    """The parts of a written mix ("6x A + 1x B"), or [] when the text is not one."""
    parts = [_PART.match(p) for p in (text or "").split("+")]
    if len(parts) < 2 or not all(parts):
        return []
    merged: Counter[str] = Counter()
    for m in parts:
        assert m is not None
        merged[m.group(2)] += int(m.group(1))
    return sorted(merged.items(), key=lambda item: -item[1])


def models_text(models: Sequence[tuple[str, int]], family: bool = False) -> str:
    """ "6x GeForce GTX 1070 + 1x GeForce GTX 1080" (family: "6x GTX 1070 + 1x GTX 1080")."""
    return " + ".join(f"{n}x {gpu_family(name) if family else name}" for name, n in models)
