"""Executing an approved change exactly once, fenced.

The checks just before sending (bot.core.requests.presend), then the ``start`` transition:
the change's execution lease (kept by a heartbeat), its cluster's lock with how long the
provider call may still arrive, and ``executing``, in one transaction. Send it, and record
the outcome under the lease (freeing lock and lease in the same transaction) — ``unknown``
only when it may have applied (bot.core.requests.recording). An outcome the store could not
take is kept and recorded once it is back; an executor that lost its lease writes nothing."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

from bot.core.requests import table, transitions
from bot.core.requests.deps import RequestDeps
from bot.core.requests.fencing import LeaseKeeper
from bot.core.requests.followup import FollowUp
from bot.core.requests.outcomes import PendingOutcomes, Result, Unrecorded
from bot.core.requests.presend import PreSend, SendRefused
from bot.core.requests.recording import Recorder
from bot.core.store import (
    ChangeRequestRecord,
    Lease,
    RequestState,
    Started,
    StartedHow,
    StoreUnavailable,
)
from bot.logs import log_context
from bot.providers.base import ChangePlan
from bot.providers.errors import ProviderError

log = logging.getLogger(__name__)

_NOT_SENT = (
    "gpuops lost contact with its database before sending this change; nothing was sent. "
    "Request it again if it is still needed."
)


@dataclass(frozen=True)
class _Ran:
    """What one execution produced: its result (None: nothing was attempted), whether that
    result waits in memory for the store, and whether its lease and lock are freed."""

    result: Result | None = None
    kept: bool = False
    released: bool = False


@dataclass
class Posted:
    """Where a new request's messages were posted, not stored yet: written with the change's
    first transition here (its start, or its refusal), saving a transaction."""

    fields: dict[str, Any]
    stored: bool = False

    def take(self) -> dict[str, Any]:
        return dict(self.fields)


def lease_name(request_id: str) -> str:
    return f"exec:{request_id}"


class Execution:
    """Sends approved changes, each exactly once across replicas."""

    def __init__(self, deps: RequestDeps, follow_up: FollowUp, presend: PreSend) -> None:
        self.deps = deps
        self.follow_up = follow_up
        self.presend = presend
        self.recorder = Recorder(deps, follow_up)
        self.pending = PendingOutcomes(self.recorder.record_late, deps.tasks.spawn)

    async def execute(
        self,
        request_id: str,
        *,
        actor: str,
        record: ChangeRequestRecord | None = None,
        posted: Posted | None = None,
    ) -> Result | None:
        """Run an approved change (``record``: as the caller just had it from the store;
        ``posted``: fields to store with its first transition, marked stored once they
        are); the result this executor knows (recorded or kept for the store), None when
        it did not run it (not approved, another sender, or the store failed before
        anything was held)."""
        with log_context(request_id=request_id):  # every line logged while sending names it
            return await self._execute(request_id, actor, record, posted or Posted({}))

    async def _execute(
        self, request_id: str, actor: str, record: ChangeRequestRecord | None, posted: Posted
    ) -> Result | None:
        deps = self.deps
        try:
            if record is None:
                record = await deps.store.get_request(request_id)
            if record is None or record.state is not RequestState.APPROVED:
                return None
            if record.run_at is not None and record.run_at > deps.clock():
                return None  # scheduled: the scheduler sends it at its time
            # In flight from before its start: recovery never ends a change being started.
            deps.in_flight.start(record.id)
            ran = _Ran()
            try:
                ran = await self._started(record, actor, posted)
            finally:
                if not ran.kept:  # a kept result stays in hand until it is recorded
                    deps.in_flight.done(record.id)
            return ran.result
        except StoreUnavailable as exc:
            # Nothing sent, nothing held: the sweeper ends it once the store is back.
            log.warning("change %s not started: %s", request_id, exc)
            return None

    async def _started(self, record: ChangeRequestRecord, actor: str, posted: Posted) -> _Ran:
        """Check and start it (``start``: one transaction), then send it under its lease.

        A change that needs the cluster fetched for its checks (a scheduled one) claims the
        lease and the lock first, so that the checks and the call see the same cluster; any
        other is checked, then started in one transaction."""
        fence: Lease | None = None
        if record.run_at is not None:
            claim = await self.deps.store.claim_execution(
                record.id,
                lease_name=lease_name(record.id),
                holder=self.deps.instance_id,
                ttl_seconds=self.deps.exec_lease_seconds,
                cluster=transitions.cluster_of(record),
            )
            if not await self._claimed(record, claim, posted):
                return _Ran()
            fence = claim.lease
        try:
            prior = await self.presend.check(record)
        except SendRefused as refused:
            await self._refuse(record, table.REFUSE_GUARDRAIL, refused.why, refused.kind, posted)
            await self.recorder.free(record, fence, ended=True)
            return _Ran()
        change = transitions.Change(
            table.START, actor, fields={"prior_values": prior, **posted.take()}
        )
        try:
            started = await transitions.start(
                self.deps, record, change, lease_name=lease_name(record.id), fence=fence
            )
        except StoreUnavailable as exc:
            # The start did not commit: nothing was sent, nor will be. Said once it is back.
            log.warning("change %s: the store failed as it was starting: %s", record.id, exc)
            not_sent = Result(RequestState.FAILED, _NOT_SENT, "store", sent=False)
            self.pending.keep(Unrecorded(record, not_sent, None, None))
            return _Ran(not_sent)
        if not await self._claimed(record, started, posted):
            return _Ran()
        posted.stored = True
        assert started.lease is not None and started.record is not None
        return await self._run(started.record, started.lease)

    async def _claimed(self, record: ChangeRequestRecord, outcome: Started, posted: Posted) -> bool:
        """Whether the lease (and lock) are this executor's; a busy cluster refuses it."""
        if outcome.how is StartedHow.STARTED:
            return True
        if outcome.how is StartedHow.BUSY:
            why = (
                f"another change ({outcome.holder}) is running on {record.cluster_id}, or may "
                "still reach the provider; request again when it has finished."
            )
            await self._refuse(record, table.REFUSE_BUSY, why, "cluster_busy", posted)
            await self.recorder.free(record, outcome.lease, ended=False)
        elif outcome.how is StartedHow.MOVED:
            await self.recorder.free(record, outcome.lease, ended=True)
        return False  # HELD: another replica is sending it

    async def _run(self, running: ChangeRequestRecord, lease: Lease) -> _Ran:
        deps = self.deps
        keeper = LeaseKeeper(deps.store, lease, deps.exec_lease_seconds)
        heartbeat = deps.tasks.spawn(keeper.run(), f"heartbeat-{running.id}")
        ran = _Ran()
        try:
            ran = await self._sent_and_recorded(running, keeper, heartbeat)
        finally:
            if not ran.kept:  # a kept result keeps its lease until it is recorded
                heartbeat.cancel()
                if not ran.released:
                    await self.recorder.free(
                        running, None if keeper.lost else keeper.lease, ended=None
                    )
        return ran

    async def _sent_and_recorded(
        self, running: ChangeRequestRecord, keeper: LeaseKeeper, heartbeat: asyncio.Task[None]
    ) -> _Ran:
        """Send and record; kept when the result waits for the store."""
        result = await self._send(running)
        try:
            released = await self.recorder.record(running, keeper, result, late=False)
        except StoreUnavailable as exc:
            log.warning("change %s: could not record its result yet: %s", running.id, exc)
            return _Ran(result, kept=self._keep(running, result, keeper, heartbeat))
        return _Ran(result, released=released)

    def _keep(
        self,
        record: ChangeRequestRecord,
        result: Result,
        keeper: LeaseKeeper,
        heartbeat: asyncio.Task[None],
    ) -> bool:
        settled = functools.partial(self.deps.in_flight.done, record.id)
        self.pending.keep(Unrecorded(record, result, keeper, heartbeat, on_settled=settled))
        self.deps.tasks.spawn(self._tell_kept(record, result), f"kept-{record.id}")
        return True

    async def _tell_kept(self, record: ChangeRequestRecord, result: Result) -> None:
        if not result.sent:
            return  # said once it is recorded: nothing happened meanwhile
        text = (
            f"The provider answered: {result.message}. gpuops lost contact with its database "
            "while recording this; it will record the result and confirm here once the "
            "database is back."
        )
        await self.deps.notifier.follow_up_note(record, text, "warning")

    async def _refuse(
        self,
        record: ChangeRequestRecord,
        transition: table.Transition,
        why: str,
        kind: str,
        posted: Posted,
    ) -> None:
        """End an approved change without sending it."""
        refused = transitions.Change.ended_by_gpuops(transition, why, outcome=kind, **posted.take())
        if await transitions.settle(self.deps, record, refused) is not None:
            posted.stored = True

    async def _send(self, record: ChangeRequestRecord) -> Result:
        """Send the change (its start noted how long the call may still arrive)."""
        plan = ChangePlan.model_validate(record.plan["plan"])
        adapter = self.deps.access.adapter_for(record.project)
        try:
            try:
                outcome = await adapter.apply(plan)
            finally:  # whatever came of it, the next list or Home reads the cluster anew
                self.deps.access.fleet.forget(record.project)
        except ProviderError as exc:
            if exc.may_have_applied:
                text = (
                    f"{exc.user_message}. The provider may have applied the change: "
                    "check the cluster before requesting it again. It will not be re-run."
                )
                return Result(RequestState.UNKNOWN, text, exc.kind)
            return Result(
                RequestState.FAILED, f"{exc.user_message}. Nothing was changed.", exc.kind
            )
        except Exception as exc:  # an unexpected bug must not leave the request hanging
            log.exception("change %s crashed during execution", record.id)
            text = (
                f"gpuops hit an internal error while sending the change "
                f"({type(exc).__name__}); the provider may have applied it: check the "
                "cluster before requesting it again."
            )
            return Result(RequestState.UNKNOWN, text, "internal")
        return Result(RequestState.SUCCEEDED, outcome.message, summary=outcome.summary)
