"""Which snapshots of one server to keep: every one that changed the wiring (the first, and each
whose wiring differs from the one captured before it), and the newest `newest`. The rest can
be pruned. Pure: the caller adds what else must stay (the current snapshot, those a benchmark
or a health record points at)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Kept:
    wiring_changes: frozenset[int]
    newest: frozenset[int]

    @property
    def ids(self) -> frozenset[int]:
        return self.wiring_changes | self.newest


def snapshots_to_keep(rows: Sequence[tuple[int, str]], newest: int) -> Kept:
    """`rows`: (id, wiring digest) in capture order, oldest first. An empty digest (a row
    stored before digests existed) counts as a change: it cannot be compared."""
    if newest < 1:
        raise ValueError(f"keep at least the newest snapshot, not {newest}")
    changes = set()
    before: str | None = None
    for snapshot_id, wiring in rows:
        if not wiring or wiring != before:
            changes.add(snapshot_id)
        before = wiring
    return Kept(frozenset(changes), frozenset(row[0] for row in rows[-newest:]))
