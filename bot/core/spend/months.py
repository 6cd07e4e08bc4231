"""Calendar months in a time zone, and the projection of a month's spend: month-to-date
plus an hourly rate times the hours left. Pure arithmetic (tests/unit checks it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from bot.errors import GpuopsError

_MONTH = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])")
_HOUR = Decimal(3600)


class MonthError(GpuopsError, ValueError):
    """Not a month as ``YYYY-MM``."""


@dataclass(frozen=True)
class Month:
    """One calendar month in a time zone, as UTC bounds ``[start, end)``."""

    year: int
    month: int
    time_zone: str
    start: datetime
    end: datetime

    @property
    def label(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"

    def hours_left(self, now: datetime) -> Decimal:
        """Hours from ``now`` to the month's end (0 once it is over, all of it before)."""
        start = max(now, self.start)
        if start >= self.end:
            return Decimal(0)
        return Decimal((self.end - start) // timedelta(milliseconds=1)) / (_HOUR * 1000)


def month_of(year: int, month: int, time_zone: str) -> Month:
    zone = ZoneInfo(time_zone)
    first = datetime(year, month, 1, tzinfo=zone)
    following = date(year + month // 12, month % 12 + 1, 1)
    last = datetime(following.year, following.month, 1, tzinfo=zone)
    return Month(year, month, time_zone, first.astimezone(UTC), last.astimezone(UTC))


def month_at(now: datetime, time_zone: str) -> Month:
    """The month holding ``now`` in ``time_zone``."""
    local = now.astimezone(ZoneInfo(time_zone))
    return month_of(local.year, local.month, time_zone)


def parse_month(text: str, time_zone: str) -> Month:
    """``2026-12`` in ``time_zone``; MonthError otherwise."""
    match = _MONTH.fullmatch(text.strip())
    if match is None:
        raise MonthError(f"`{text[:20]}` is not a month: write it as YYYY-MM, such as 2026-12")
    return month_of(int(match.group(1)), int(match.group(2)), time_zone)


def projected(month_to_date: Decimal, hourly: Decimal, hours_left: Decimal) -> Decimal:
    """Projected month-end spend: month-to-date + hourly rate x hours left (never below
    what was already spent: a rate below zero is none)."""
    return month_to_date + max(hourly, Decimal(0)) * max(hours_left, Decimal(0))


def percent_of(amount: Decimal, budget: Decimal) -> Decimal:
    return amount * 100 / budget
