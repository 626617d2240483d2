"""How one topology differs from another (devices gone, added, renamed; link classes changed),
matching devices across renumbering and across differently numbered NVLink meshes.

The work is decided from the sizes before any search starts: every candidate matching costs
one look-up per matched pair, and one diff spends at most MAX_PAIR_LOOKUPS of them. Candidates
are generated lazily (never materialised); when every order-preserving matching fits the
budget they are all tried, otherwise only the likely ones (ids in place, the extra devices as
one block at each position), each kind searched in turn."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from topoweb.core.fingerprint import canonical_order, nvlink_fabric, topology_fingerprint
from topoweb.core.model import Topology, link_class_rank, nvlink_count

# Pair look-ups one diff may spend scoring candidate matchings: enough to try every
# order-preserving matching of servers that lose or gain a few devices, and a handful of
# matchings of the largest accepted topology; the first candidate is always scored.
MAX_PAIR_LOOKUPS = 300_000

Matching = list[tuple[str, str]]  # (old id, new id), in order


@dataclass(frozen=True)
class TopologyDiff:
    """How `new` differs from `old`, with devices matched across renumbering."""

    gone: tuple[str, ...]  # ids in the old topology
    added: tuple[str, ...]  # ids in the new topology
    renamed: tuple[tuple[str, str], ...]  # (old id, new id) of matched devices whose id moved
    changed: tuple[tuple[str, str, str, str], ...]  # (new a, new b, old class, new class)
    # Pair look-ups spent finding the matching (never above MAX_PAIR_LOOKUPS plus one
    # candidate's worth): what the bound promises, for tests; not part of the diff.
    lookups: int = field(default=0, compare=False)

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


def _ids(topo: Topology, kind: str) -> list[str]:
    return [d.id for d in topo.devices if d.kind == kind]


def _option_count(o: list[str], n: list[str]) -> int:
    """How many order-preserving matchings pair the shorter list with part of the longer."""
    return math.comb(max(len(o), len(n)), min(len(o), len(n)))


def _every_option(o: list[str], n: list[str]) -> Iterator[Matching]:
    """Every order-preserving matching, lazily (nvidia-smi numbers devices by PCI order, so a
    device that drops off the bus shifts the ones after it down by one, never reorders them)."""
    if len(o) >= len(n):
        for sub in itertools.combinations(o, len(n)):
            yield list(zip(sub, n, strict=True))
    else:
        for sub in itertools.combinations(n, len(o)):
            yield list(zip(o, sub, strict=True))


def _likely_options(o: list[str], n: list[str]) -> Iterator[Matching]:
    """The order-preserving matchings worth trying when not all of them can be: ids in place,
    then the longer list's extra devices as one block at each position (one card or one riser
    of cards off the bus). At most one more than the shorter list's length."""
    short, extra = min(len(o), len(n)), abs(len(o) - len(n))
    longer = o if len(o) >= len(n) else n
    for start in range(short + 1) if extra else range(1):
        kept = longer[:start] + longer[start + extra :]
        yield list(zip(kept, n, strict=True)) if longer is o else list(zip(o, kept, strict=True))


def _lookups(matched: int) -> int:
    """What scoring one candidate of `matched` devices costs: a look-up per pair, one per device."""
    return matched * (matched + 1) // 2


class _Scorer:
    """Scores matchings (pairs whose class differs, plus matched devices that changed NUMA
    node) and counts the look-ups spent against the budget."""

    def __init__(self, old: Topology, new: Topology) -> None:
        self.old, self.new = old, new
        self.old_numa = {d.id: d.numa_affinity for d in old.devices}
        self.new_numa = {d.id: d.numa_affinity for d in new.devices}
        self.spent = 0
        self.best: tuple[int, Matching] | None = None

    def affordable(self, matched: int) -> bool:
        """Whether one more candidate of `matched` devices fits the budget (the first always
        does: a diff always has an answer)."""
        return self.best is None or self.spent + _lookups(matched) <= MAX_PAIR_LOOKUPS

    def score(self, mapping: Matching) -> int | None:
        """The candidate's cost, kept when it is the best so far; None when over budget."""
        if not self.affordable(len(mapping)):
            return None
        self.spent += _lookups(len(mapping))
        rows = [(self.old.class_row(o), self.new.class_row(n)) for o, n in mapping]
        cost = sum(self.old_numa[o] != self.new_numa[n] for o, n in mapping)
        for i, (row_old, row_new) in enumerate(rows):
            for ob, nb in mapping[i + 1 :]:
                cost += row_old[ob] != row_new[nb]
        if self.best is None or cost < self.best[0]:
            self.best = (cost, mapping)
        return cost


def _search(old: Topology, new: Topology) -> tuple[Matching, int]:
    """The least-cost matching among the candidates the budget allows, and the look-ups spent."""
    scorer = _Scorer(old, new)
    kinds = [(_ids(old, kind), _ids(new, kind)) for kind in ("gpu", "nic")]
    matched = sum(min(len(o), len(n)) for o, n in kinds)
    total = math.prod(_option_count(o, n) for o, n in kinds)
    if total * _lookups(matched) <= MAX_PAIR_LOOKUPS:
        for combo in itertools.product(*(_every_option(o, n) for o, n in kinds)):
            scorer.score(list(itertools.chain.from_iterable(combo)))
    else:
        # Each kind in turn, the others held at their best so far: the kinds' option counts
        # add up instead of multiplying.
        chosen = [next(_likely_options(o, n)) for o, n in kinds]
        for k, (o, n) in enumerate(kinds):
            least: int | None = None
            for option in _likely_options(o, n):
                trial = [*chosen[:k], option, *chosen[k + 1 :]]
                cost = scorer.score(list(itertools.chain.from_iterable(trial)))
                if cost is None:
                    break
                if least is None or cost < least:
                    least, chosen[k] = cost, option
    # Servers of one SKU may number the same NVLink mesh differently (a DGX-1V board against
    # another capture of it): match GPUs so the meshes coincide, NICs as the best so far.
    if scorer.affordable(matched):
        fabric = _fabric_matching(old, new)
        if fabric is not None and scorer.best is not None:
            nics = set(kinds[1][0])
            scorer.score([*fabric.items(), *((o, n) for o, n in scorer.best[1] if o in nics)])
    assert scorer.best is not None  # the first candidate is always scored
    return scorer.best[1], scorer.spent


def _fabric_matching(old: Topology, new: Topology) -> dict[str, str] | None:
    """GPUs of `old` onto those of `new` under which their NVLink meshes coincide, or None
    when the meshes differ (or there is no NVLink to align by)."""
    if len(old.gpus) != len(new.gpus):
        return None
    a, b = nvlink_fabric(old), nvlink_fabric(new)
    if not any(lnk.is_nvlink for lnk in a.links):
        return None
    if topology_fingerprint(a) != topology_fingerprint(b):
        return None
    return dict(zip(canonical_order(a), canonical_order(b), strict=True))


def diff_topologies(old: Topology, new: Topology) -> TopologyDiff:
    """The smallest explanation of how `new` differs from `old` (devices gone or added, link
    classes changed) over the candidate matchings of renumbered devices the budget allows, and
    the matching that aligns their NVLink meshes."""
    matching, spent = _search(old, new)
    mapping = dict(matching)
    changed = []
    for i, (oa, na) in enumerate(matching):
        row_old, row_new = old.class_row(oa), new.class_row(na)
        for ob, nb in matching[i + 1 :]:
            if row_old[ob] != row_new[nb]:
                changed.append((na, nb, row_old[ob], row_new[nb]))
    position = {d.id: i for i, d in enumerate(new.devices)}
    changed.sort(key=lambda c: (position[c[0]], position[c[1]]))
    matched_new = set(mapping.values())
    return TopologyDiff(
        gone=tuple(d.id for d in old.devices if d.id not in mapping),
        added=tuple(d.id for d in new.devices if d.id not in matched_new),
        renamed=tuple((o, n) for o, n in matching if o != n),
        changed=tuple(changed),
        lookups=spent,
    )


def farther(before: str, after: str) -> bool:
    """Whether link class `after` is a worse connection than `before` (slower class, or
    fewer NVLinks)."""
    rb, ra = link_class_rank(before), link_class_rank(after)
    return ra > rb or (ra == rb and nvlink_count(after) < nvlink_count(before))
