"""Scheduled changes at their time (SPEC §9): one indexed query per tick on every replica.

A due request is sent through the normal execution (its lease and compare-and-set send it
once across replicas, under the cluster lock, after the checks just before sending); one
still pending expires ("not approved before its time"), and one found past the grace
(gpuops was down) expires too ("missed its time") instead of running late."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.core.requests import transitions
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.transitions import Change, settle
from bot.core.schedule import utc_text
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable

log = logging.getLogger(__name__)


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
            transitions.EXPIRE if pending else transitions.EXPIRE_MISSED,
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
