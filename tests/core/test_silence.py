"""collector_silent in the core: a pure function of the last report, the clock and the
configured interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from topoweb.core.health import COLLECTOR_SILENT, KINDS, Finding, collector_silence

LAST = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("after_s", "silent"),
    [(0, False), (3 * 3600 - 1, False), (3 * 3600, True), (10 * 86400, True)],
)
def test_silent_once_the_configured_number_of_reports_is_overdue(
    after_s: int, silent: bool
) -> None:
    found = collector_silence(LAST, LAST + timedelta(seconds=after_s), 3600, 3)

    assert (found is not None) == silent


def test_the_finding_names_the_last_report_and_does_not_change_while_the_silence_lasts() -> None:
    early = collector_silence(LAST, LAST + timedelta(hours=3), 3600, 3)
    late = collector_silence(LAST, LAST + timedelta(days=2), 3600, 3)

    assert early == late and early is not None
    assert early.kind == COLLECTOR_SILENT in KINDS
    assert early.severity == "warning"
    assert early.evidence == {
        "last_report_at": "2026-11-30T12:00:00+00:00",
        "interval_s": 3600,
        "missed_reports": 3,
    }
    assert "no report since 2026-11-30T12:00:00+00:00" in early.message
    assert Finding.from_document(early.to_document()) == early


def test_a_server_that_never_reported_is_not_silent() -> None:
    assert collector_silence(None, LAST, 3600, 3) is None


@pytest.mark.parametrize(("interval", "missed"), [(0, 3), (-1, 3), (3600, 0)])
def test_a_meaningless_configuration_is_refused(interval: float, missed: int) -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        collector_silence(LAST, LAST, interval, missed)
