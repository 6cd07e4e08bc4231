"""Which reservation reminder horizons (policy ``reservation_reminders``: ``24h``, ``1h``,
``30m``, parsed by the policy) are due for a reservation end time (SPEC §7.2).

When several horizons fall due at one poll (the watcher started late, or the end time was
moved closer), only the tightest is posted; the wider ones are skipped, not posted late.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.core.policy.watch import Horizon


@dataclass(frozen=True)
class DueReminders:
    post: Horizon | None  # the reminder to post now
    skip: tuple[Horizon, ...]  # passed horizons to mark as done without posting


def due(
    end_time: datetime,
    now: datetime,
    horizons: Sequence[Horizon],
    done: Iterable[str] = (),
) -> DueReminders:
    """Which reminders are due at ``now`` for a reservation ending at ``end_time``, given
    the horizon texts already ``done`` (posted or skipped) for that end time. Nothing is
    due once the reservation has ended."""
    if now >= end_time:
        return DueReminders(None, ())
    finished = set(done)
    # A horizon wider than one done is past for good (skipped when that one was posted),
    # whatever the store kept of it: only a tighter one can still be due.
    tightest_done = min((h.before for h in horizons if h.text in finished), default=None)
    reached = [
        h
        for h in horizons
        if now >= end_time - h.before
        and h.text not in finished
        and (tightest_done is None or h.before < tightest_done)
    ]
    if not reached:
        return DueReminders(None, ())
    tightest = min(reached)
    return DueReminders(
        tightest, tuple(sorted((h for h in reached if h != tightest), reverse=True))
    )


def remaining_text(end_time: datetime, now: datetime) -> str:
    """``in 23 h``, ``in 45 min``, ``in 2 d 3 h``: how long until the end, rounded down."""
    left = max(end_time - now, timedelta(0))
    minutes = int(left.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"in {days} d {hours} h" if hours else f"in {days} d"
    if hours:
        return f"in {hours} h"
    return f"in {mins} min"
