"""When a scheduled change runs (SPEC §9): ``at=``/``in=``/``run_at``, its bounds, its words."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from math import ceil

from pydantic import BaseModel, ConfigDict

from bot.errors import GpuopsError

MIN_AHEAD = timedelta(minutes=1)
MAX_AHEAD = timedelta(days=14)
BOUNDS = "from 1 minute to 14 days ahead"
_IN = re.compile(r"^([0-9]{1,6})([mhd])\Z")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class ScheduleError(GpuopsError, ValueError):
    """A run time that cannot be read or is out of bounds; the message says what is right."""


class Schedule(BaseModel):
    """A run time as given: an instant (``at=``, ``run_at``) or a delay (``in=``)."""

    model_config = ConfigDict(frozen=True)

    at: datetime | None = None
    after: timedelta | None = None

    def resolve(self, now: datetime) -> datetime:
        """The instant it runs; ScheduleError when outside the bounds."""
        run_at = self.at if self.at is not None else now + (self.after or timedelta())
        check_bounds(run_at, now)
        return run_at


def example_run_at(now: datetime | None = None) -> str:
    """An ``at=`` example always within the bounds, whatever the day: tomorrow 20:00 UTC."""
    tomorrow = (now or datetime.now(UTC)).astimezone(UTC) + timedelta(days=1)
    moment = tomorrow.replace(hour=20, minute=0, second=0, microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def parse_at(text: str) -> Schedule:
    value = text.strip()
    try:
        when = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        raise ScheduleError(
            f"`at={value[:40]}` is not an RFC 3339 time; write e.g. `at={example_run_at()}`."
        ) from None
    if when.tzinfo is None:
        raise ScheduleError(f"`at={value[:40]}` needs a time zone, e.g. `Z` or `+01:00`.")
    return Schedule(at=when.astimezone(UTC))


def parse_in(text: str) -> Schedule:
    match = _IN.match(text.strip())
    if match is None:
        raise ScheduleError(
            f"`in={text.strip()[:40]}` is not a delay; write minutes, hours or days, e.g. "
            "`in=30m`, `in=3h` or `in=2d`."
        )
    return Schedule(after=timedelta(**{_UNITS[match.group(2)]: int(match.group(1))}))


def check_bounds(run_at: datetime, now: datetime) -> None:
    ahead = run_at - now
    if not MIN_AHEAD <= ahead <= MAX_AHEAD:
        raise ScheduleError(
            f"a change can be scheduled {BOUNDS}; {when_text(run_at, now)} is not."
            if ahead > timedelta()
            else f"a change can be scheduled {BOUNDS}; {utc_text(run_at)} has passed."
        )


def utc_text(when: datetime) -> str:
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def in_text(delta: timedelta) -> str:
    """``in 3 h``, ``in 12 min``, ``in 2 d 4 h``; ``now`` once it is due."""
    seconds = delta.total_seconds()
    if seconds <= 0:
        return "now"
    minutes = ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"in {days} d" + (f" {hours} h" if hours else "")
    if hours:
        return f"in {hours} h" + (f" {minutes} min" if minutes and hours < 3 else "")
    return f"in {minutes} min"


def when_text(run_at: datetime, now: datetime) -> str:
    """``2026-12-01 20:00 UTC, in 3 h``."""
    return f"{utc_text(run_at)}, {in_text(run_at - now)}"
