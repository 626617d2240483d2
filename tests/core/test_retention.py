"""core.retention: which of a server's snapshots the policy keeps."""

from __future__ import annotations

import pytest

from topoweb.core.retention import snapshots_to_keep


def test_every_wiring_change_and_the_newest_are_kept() -> None:
    rows = [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "b"), (6, "a"), (7, "a"), (8, "a")]

    kept = snapshots_to_keep(rows, newest=2)

    assert kept.wiring_changes == {1, 4, 6}
    assert kept.newest == {7, 8}
    assert set(id for id, _ in rows) - kept.ids == {2, 3, 5}


def test_a_row_without_a_digest_cannot_be_compared_and_is_kept() -> None:
    assert snapshots_to_keep([(1, "a"), (2, ""), (3, "a")], newest=1).wiring_changes == {1, 2, 3}


def test_fewer_rows_than_the_newest_keeps_them_all() -> None:
    assert snapshots_to_keep([(1, "a"), (2, "a")], newest=5).ids == {1, 2}


def test_keeping_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least the newest"):
        snapshots_to_keep([(1, "a")], newest=0)
