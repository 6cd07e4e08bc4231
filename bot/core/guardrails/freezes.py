"""When a freeze holds: the windows of absolute and weekly freezes, merged where they touch
(a Saturday window ending at midnight and a Sunday one starting then are one weekend)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bot.core.policy.guardrails import WEEKDAYS, Freeze, WeeklyWindow

LOOK_AHEAD = timedelta(days=7)


@dataclass(frozen=True)
class FreezeWindow:
    """One stretch of a freeze, in UTC."""

    freeze: Freeze
    start: datetime
    end: datetime


def _clock_time(text: str) -> tuple[time, int]:
    """``"24:00"`` is midnight of the next day."""
    if text == "24:00":
        return time(0, 0), 1
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes)), 0


def _weekly_spans(weekly: WeeklyWindow, around: datetime) -> Iterator[tuple[datetime, datetime]]:
    zone = ZoneInfo(weekly.timezone)
    local_today = around.astimezone(zone).date()
    start_at, start_shift = _clock_time(weekly.start)
    end_at, end_shift = _clock_time(weekly.end)
    overnight = weekly.end != "24:00" and weekly.end < weekly.start
    for offset in range(-8, 9):
        day = local_today + timedelta(days=offset)
        if WEEKDAYS[day.weekday()] not in weekly.days:
            continue
        start_day = day + timedelta(days=start_shift)
        end_day = day + timedelta(days=end_shift + (1 if overnight else 0))
        start = datetime.combine(start_day, start_at, zone).astimezone(UTC)
        end = datetime.combine(end_day, end_at, zone).astimezone(UTC)
        yield start, end


def _spans(freeze: Freeze, around: datetime) -> list[tuple[datetime, datetime]]:
    if freeze.weekly is not None:
        return _merged(sorted(_weekly_spans(freeze.weekly, around)))
    assert freeze.start is not None and freeze.end is not None  # the model checks it
    return [(freeze.start, freeze.end)]


def _merged(spans: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def active_freeze(
    freezes: Iterable[Freeze], project: str, kinds: list[str], now: datetime
) -> FreezeWindow | None:
    """The freeze covering this change now (the one that ends last, if several)."""
    found = [
        FreezeWindow(freeze, start, end)
        for freeze in freezes
        if freeze.covers(project, kinds)
        for start, end in _spans(freeze, now)
        if start <= now < end
    ]
    return max(found, key=lambda w: w.end, default=None)


def freezes_soon(
    freezes: Iterable[Freeze], project: str, now: datetime, within: timedelta = LOOK_AHEAD
) -> list[FreezeWindow]:
    """The freezes of a project active now or starting within ``within``, soonest first."""
    found = [
        FreezeWindow(freeze, start, end)
        for freeze in freezes
        if freeze.covers_project(project)
        for start, end in _spans(freeze, now)
        if end > now and start < now + within
    ]
    return sorted(found, key=lambda w: (w.start, w.freeze.name))


def current_or_next(freeze: Freeze, now: datetime) -> FreezeWindow | None:
    """The freeze's window holding now, else its next one (within a week for a weekly
    freeze); None when it is over."""
    ahead = [FreezeWindow(freeze, start, end) for start, end in _spans(freeze, now) if end > now]
    return min(ahead, key=lambda w: w.start, default=None)


def when(moment: datetime) -> str:
    """``2027-01-02 00:00 UTC``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def frozen_text(project: str, window: FreezeWindow) -> str:
    """``together-prod is frozen (year-end) until 2027-01-02 00:00 UTC``."""
    return f"{project} is frozen ({window.freeze.name}) until {when(window.end)}"
