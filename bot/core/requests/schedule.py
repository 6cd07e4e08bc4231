"""Scheduled changes (SPEC §9): when one runs (``at=``/``in=``/``run_at``, its bounds, its
words) and the ``Scheduler`` that sends or expires them at their time.

The scheduler runs one indexed query per tick on every replica. A due request is sent
through the normal execution (its lease and compare-and-set send it once across replicas,
under the cluster lock, after the checks just before sending); one still pending expires
("not approved before its time"), and one found past the grace (gpuops was down) expires
too ("missed its time") instead of running late."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC, datetime, timedelta
from math import ceil

from pydantic import BaseModel, ConfigDict

from bot.core.requests import table
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.transitions import Change, settle
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable
from bot.errors import GpuopsError

log = logging.getLogger(__name__)

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


class Scheduler:
    """Sends or expires the scheduled requests whose time has come."""

    def __init__(self, deps: RequestDeps, execution: Execution) -> None:
        self.deps = deps
        self.execution = execution
        self._starting: set[str] = set()  # sent from here now: not started twice

    async def run_due(self) -> int:
        """One tick; the number of requests it acted on."""
        deps = self.deps
        now = deps.clock()
        grace = timedelta(seconds=deps.schedule_grace_seconds)
        acted = 0
        for record in await deps.store.list_due(now):
            if record.id in self._starting or record.id in deps.in_flight:
                continue
            assert record.run_at is not None  # list_due returns scheduled requests only
            if record.state is RequestState.PENDING:
                why = f"Expired: {record.id} was not approved before its time. Nothing was changed."
                acted += await self._expire(record, why, "not_approved")
            elif now - record.run_at > grace:
                why = (
                    f"Expired: {record.id} missed its time ({utc_text(record.run_at)}; gpuops "
                    f"could not send it within {deps.schedule_grace_seconds:g} s of it). "
                    "Nothing was changed; request it again if it is still needed."
                )
                acted += await self._expire(record, why, "missed_time")
            else:
                self._start(record)
                acted += 1
        return acted

    def _start(self, record: ChangeRequestRecord) -> None:
        self._starting.add(record.id)
        task = self.deps.tasks.spawn(
            self.execution.execute(record.id, actor="gpuops"), f"scheduled-{record.id}"
        )
        task.add_done_callback(lambda _: self._starting.discard(record.id))

    async def _expire(self, record: ChangeRequestRecord, why: str, outcome: str) -> int:
        pending = record.state is RequestState.PENDING
        expired = Change(
            table.EXPIRE if pending else table.EXPIRE_MISSED,
            "gpuops",
            outcome=outcome,
            text=why,
            fields={"result_message": why},
            detail={"reason": why},
            decision="expired" if pending else None,
            mirror="Scheduled change expired",
        )
        return 1 if await settle(self.deps, record, expired) is not None else 0

    async def run_forever(self, every: float) -> None:
        while True:
            try:
                await self.run_due()
            except StoreUnavailable as exc:  # the next tick tries again: nothing is lost
                log.warning("scheduler tick skipped: %s", exc)
            except Exception:
                log.exception("scheduler tick failed")
            await asyncio.sleep(every)
