"""How one topology differs from another (devices gone, added, renamed; link classes changed),
matching devices across renumbering and across differently numbered NVLink meshes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from topoweb.core.fingerprint import canonical_order, nvlink_fabric, topology_fingerprint
from topoweb.core.model import Topology, link_class_rank, nvlink_count

# A mapping search over renumbered devices stops being worth it past this many candidates;
# beyond it devices are matched by their printed ids.
_MAX_MATCHINGS = 20_000


@dataclass(frozen=True)
class TopologyDiff:
    """How `new` differs from `old`, with devices matched across renumbering."""

    gone: tuple[str, ...]  # ids in the old topology
    added: tuple[str, ...]  # ids in the new topology
    renamed: tuple[tuple[str, str], ...]  # (old id, new id) of matched devices whose id moved
    changed: tuple[tuple[str, str, str, str], ...]  # (new a, new b, old class, new class)

    @property
    def empty(self) -> bool:
        return not (self.gone or self.added or self.changed)

    def to_document(self) -> dict[str, Any]:
        return {
            "gone": list(self.gone),
            "added": list(self.added),
            "renamed": [{"old": o, "new": n} for o, n in self.renamed],
            "changed": [{"a": a, "b": b, "old": o, "new": n} for a, b, o, n in self.changed],
        }


def _candidate_matchings(old: Topology, new: Topology) -> Iterable[dict[str, str]]:
    """Order-preserving matchings per device kind: nvidia-smi numbers devices by PCI order, so a
    GPU that drops off the bus shifts the ones after it down by one, never reorders them."""
    per_kind: list[list[list[tuple[str, str]]]] = []
    for kind in ("gpu", "nic"):
        o = [d.id for d in old.devices if d.kind == kind]
        n = [d.id for d in new.devices if d.kind == kind]
        if len(o) >= len(n):
            options = [list(zip(sub, n, strict=True)) for sub in itertools.combinations(o, len(n))]
        else:
            options = [list(zip(o, sub, strict=True)) for sub in itertools.combinations(n, len(o))]
        per_kind.append(options)
    total = 1
    for options in per_kind:
        total *= len(options)
    if total > _MAX_MATCHINGS:
        # Too many to search: the first option of each kind keeps ids in place.
        per_kind = [options[:1] for options in per_kind]
    for combo in itertools.product(*per_kind):
        yield dict(itertools.chain.from_iterable(combo))
    # Servers of one SKU may number the same NVLink mesh differently (a DGX-1V board against
    # another capture of it): match GPUs so the meshes coincide, NICs in order.
    fabric = _fabric_matching(old, new)
    if fabric is not None:
        for nics in per_kind[1][:1]:
            yield fabric | dict(nics)


def _fabric_matching(old: Topology, new: Topology) -> dict[str, str] | None:
    """GPUs of `old` onto those of `new` under which their NVLink meshes coincide, or None
    when the meshes differ (or there is no NVLink to align by)."""
    a, b = nvlink_fabric(old), nvlink_fabric(new)
    if not any(lnk.is_nvlink for lnk in a.links) or len(a.devices) != len(b.devices):
        return None
    if topology_fingerprint(a) != topology_fingerprint(b):
        return None
    return dict(zip(canonical_order(a), canonical_order(b), strict=True))


def diff_topologies(old: Topology, new: Topology) -> TopologyDiff:
    """The smallest explanation of how `new` differs from `old` (devices gone or added, link
    classes changed), trying every order-preserving way to match renumbered devices and the
    matching that aligns their NVLink meshes."""
    best: tuple[int, dict[str, str], list[tuple[str, str, str, str]]] | None = None
    for mapping in _candidate_matchings(old, new):
        changed = []
        for oa, ob in itertools.combinations(mapping, 2):
            na, nb = mapping[oa], mapping[ob]
            before, after = old.link_class(oa, ob), new.link_class(na, nb)
            if before != after:
                changed.append((na, nb, before, after))
        # A matched device on another NUMA node is a worse explanation than one on the same.
        moved = sum(
            old.device(o).numa_affinity != new.device(n).numa_affinity for o, n in mapping.items()
        )
        cost = len(changed) + moved
        if best is None or cost < best[0]:
            best = (cost, mapping, changed)
    assert best is not None  # there is always at least the empty matching
    _, mapping, changed = best
    position = {d.id: i for i, d in enumerate(new.devices)}
    changed.sort(key=lambda c: (position[c[0]], position[c[1]]))
    return TopologyDiff(
        gone=tuple(d.id for d in old.devices if d.id not in mapping),
        added=tuple(d.id for d in new.devices if d.id not in mapping.values()),
        renamed=tuple((o, n) for o, n in mapping.items() if o != n),
        changed=tuple(changed),
    )


def farther(before: str, after: str) -> bool:
    """Whether link class `after` is a worse connection than `before` (slower class, or
    fewer NVLinks)."""
    rb, ra = link_class_rank(before), link_class_rank(after)
    return ra > rb or (ra == rb and nvlink_count(after) < nvlink_count(before))
