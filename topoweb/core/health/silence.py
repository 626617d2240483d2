"""A collector that stopped reporting: the one finding judged from the clock, not a report.

A host's collector reports every `interval_s` (its --interval; a duplicate report counts, it is
the collector saying it is alive). Once `missed` reports in a row are overdue, that is, nothing
arrived for `missed * interval_s`, the server is silent: what the other findings say about it
may be out of date, and the host or its collector needs a look."""

from __future__ import annotations

from datetime import datetime, timedelta

from topoweb.core.health.findings import COLLECTOR_SILENT, Finding


def silence_window(interval_s: float, missed: int) -> timedelta:
    """How long without a report makes a server silent."""
    if interval_s <= 0 or missed < 1:
        raise ValueError(f"interval_s must be > 0 and missed >= 1, not {interval_s}, {missed}")
    return timedelta(seconds=interval_s * missed)


def collector_silence(
    last_report_at: datetime | None, now: datetime, interval_s: float, missed: int
) -> Finding | None:
    """The collector_silent finding when `missed` expected reports are overdue at `now`, else
    None (also for a server that never reported: nothing was expected of it yet). Its evidence
    does not change while the silence lasts, so the stored finding is written once."""
    if last_report_at is None or now - last_report_at < silence_window(interval_s, missed):
        return None
    since = last_report_at.isoformat()
    return Finding(
        kind=COLLECTOR_SILENT,
        severity="warning",
        devices=(),
        evidence={
            "last_report_at": since,
            "interval_s": interval_s,
            "missed_reports": missed,
        },
        advice=(
            "Check the host and its collector (systemctl status topoweb-collector.timer, or "
            "the collector pod); its findings may be out of date until it reports again."
        ),
        message=(
            f"no report since {since}: {missed} reports expected every {interval_s:g} s were missed"
        ),
    )
