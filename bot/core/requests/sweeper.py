"""Housekeeping every replica runs on change requests.

Expire requests nobody decided in time, end requests whose executor is gone (never
re-run), resume follow-ups nobody polls, keep the pending gauge true, prune delivery keys."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.core.requests import table, transitions
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import lease_name
from bot.core.requests.followup import FollowUp
from bot.core.requests.transitions import Change, settle
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable
from bot.metrics import APPROVALS_PENDING

log = logging.getLogger(__name__)

DELIVERY_MEMORY = timedelta(days=1)  # Slack redelivers within minutes; a day is plenty
# Recovery cannot tell a restart from a replica cut off from its database: say neither.
_STOPPED_WHILE_SENDING = (
    "The gpuops replica sending this change stopped answering (it restarted, or lost "
    "contact with its database); its outcome is unknown. Check the cluster before "
    "requesting it again — it will not be re-run. If that replica comes back with the "
    "provider's answer, it will correct this here."
)
_STOPPED_BEFORE_SENDING = (
    "The gpuops replica that was to send this change stopped answering after it was "
    "approved and before sending it; nothing was sent. Request it again if it is still "
    "needed."
)


class Sweeper:
    """Expiry, recovery of interrupted and orphaned requests, and the periodic sweep."""

    def __init__(self, deps: RequestDeps, follow_up: FollowUp) -> None:
        self.deps = deps
        self.follow_up = follow_up

    async def expire_due(self) -> int:
        deps = self.deps
        minutes = deps.policy.approvals.expire_after_minutes
        due = await deps.store.list_requests(
            states={RequestState.PENDING}, expires_before=deps.clock()
        )
        expired = 0
        for record in due:
            text = (
                f"Expired: nobody approved {record.id} within {minutes} minutes. "
                "Nothing was changed."
            )
            if record.run_at is not None:
                text = (
                    f"Expired: {record.id} was not approved before its time. Nothing was changed."
                )
            change = Change(
                table.EXPIRE,
                "gpuops",
                outcome="expired",
                text=text,
                decision="expired",
                mirror="Change request expired",
            )
            if await settle(deps, record, change) is not None:
                expired += 1
        return expired

    async def recover_interrupted(self) -> int:
        """Mark ``executing`` requests whose executor is gone as ``unknown`` (never re-run),
        and fail ``approved`` ones whose bot died before sending them."""
        recovered = await self._fail_orphaned_approvals()
        for record in await self.deps.store.list_requests(states={RequestState.EXECUTING}):
            if record.id not in self.deps.in_flight and await self._end_interrupted(
                record, table.INTERRUPT, _STOPPED_WHILE_SENDING
            ):
                recovered += 1
        return recovered

    async def _fail_orphaned_approvals(self) -> int:
        """An ``approved`` request that no replica went on to send (its bot died between
        the approval and the provider call) was never sent: fail it and free its cluster,
        which it may hold. Only when older than a lease period and its lease is free."""
        deps = self.deps
        before = deps.clock() - timedelta(seconds=deps.exec_lease_seconds)
        closed = 0
        for record in await deps.store.list_requests(states={RequestState.APPROVED}):
            if record.id in deps.in_flight or record.updated_at > before:
                continue
            if record.run_at is not None:
                continue  # waiting for its time: the scheduler sends or expires it
            if await self._end_interrupted(record, table.ORPHAN, _STOPPED_BEFORE_SENDING):
                closed += 1
        return closed

    async def _end_interrupted(
        self, record: ChangeRequestRecord, transition: table.Transition, why: str
    ) -> bool:
        """End a request whose executor is gone (its lease lapsed: taking it fences that
        executor's writes off) and say so in its thread; its cluster is freed only once no
        provider call it started can still arrive. False when a live replica holds it or
        it moved meanwhile."""
        change = Change.ended_by_gpuops(transition, why, outcome=str(transition.to))
        done = await transitions.end_interrupted(
            self.deps, record, change, lease_name=lease_name(record.id)
        )
        return done is not None

    async def refresh_pending_gauge(self) -> None:
        APPROVALS_PENDING.set(await self.deps.store.count_requests({RequestState.PENDING}))

    async def sweep_once(self) -> None:
        await self.expire_due()
        await self.recover_interrupted()
        await self.follow_up.resume()
        await self.refresh_pending_gauge()
        await self.deps.store.prune_deliveries(self.deps.clock() - DELIVERY_MEMORY)

    async def sweep_forever(self, every: float) -> None:
        while True:
            try:
                await self.sweep_once()
            except StoreUnavailable as exc:  # expected during an outage: one line, no trace
                log.warning("sweeper round skipped: %s", exc)
            except Exception:
                log.exception("sweeper round failed")
            await asyncio.sleep(every)
