"""Executing an approved change exactly once, fenced.

Take the change's execution lease (kept by a heartbeat), lock its cluster under it, note
how long the provider call may still arrive, send it, and record the outcome under the
lease — ``unknown`` only when it may have applied. An outcome the store could not take is
kept and recorded once it is back; an executor that lost its lease writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import Any

from bot.core.access import Refusal
from bot.core.guardrails.guard import Guard, stored_override, stored_size
from bot.core.requests.fencing import LeaseKeeper
from bot.core.requests.followup import FollowUp
from bot.core.requests.outcomes import PendingOutcomes, Result, Unrecorded
from bot.core.requests.presend import PreSend, SendRefused
from bot.core.requests.settle import Change, RequestDeps, announce, mirror, settle
from bot.core.requests.view import outcome_headline
from bot.core.store import (
    KNOWN_OUTCOMES,
    TERMINAL_STATES,
    ChangeRequestRecord,
    Lease,
    OutcomeRecorded,
    RequestState,
    StoreUnavailable,
)
from bot.logs import log_context
from bot.providers.base import ChangePlan, ClusterSummary
from bot.providers.errors import ProviderError
from bot.redact import redact

log = logging.getLogger(__name__)

_NOT_SENT = (
    "gpuops lost contact with its database before sending this change; nothing was sent. "
    "Request it again if it is still needed."
)


def _start(actor: str, prior: dict[str, Any] | None) -> Change:
    return Change(
        "executing",
        actor,
        frozenset({RequestState.APPROVED}),
        RequestState.EXECUTING,
        "executing",
        fields={"prior_values": prior},
    )


@dataclass(frozen=True)
class _Ran:
    """What one execution produced: its result (None: nothing was attempted), and whether
    that result waits in memory for the store."""

    result: Result | None = None
    kept: bool = False


def lease_name(request_id: str) -> str:
    return f"exec:{request_id}"


class Execution:
    """Sends approved changes, each exactly once across replicas."""

    def __init__(self, deps: RequestDeps, follow_up: FollowUp, presend: PreSend) -> None:
        self.deps = deps
        self.follow_up = follow_up
        self.presend = presend
        self.pending = PendingOutcomes(self._record_late, deps.tasks.spawn)
        self.guard = Guard(deps.access)

    async def execute(self, request_id: str, *, actor: str) -> Result | None:
        """Run an approved change; the result this executor knows (recorded or kept for
        the store), None when it did not run it (not approved, another sender, or the store
        failed before anything was held)."""
        with log_context(request_id=request_id):  # every line logged while sending names it
            return await self._execute(request_id, actor=actor)

    async def _execute(self, request_id: str, *, actor: str) -> Result | None:
        deps = self.deps
        try:
            record = await deps.store.get_request(request_id)
            if record is None or record.state is not RequestState.APPROVED:
                return None
            if record.run_at is not None and record.run_at > deps.clock():
                return None  # scheduled: the scheduler sends it at its time
            # The lease comes first: the cluster lock names it, and may only be taken over
            # once it has lapsed (and the last provider call can no longer arrive).
            lease = await deps.store.take_lease(
                lease_name(record.id), deps.instance_id, deps.exec_lease_seconds
            )
        except StoreUnavailable as exc:
            # Nothing sent, nothing held: the sweeper ends it once the store is back.
            log.warning("change %s not started: %s", request_id, exc)
            return None
        if lease is None:
            return None  # another replica is sending it
        keeper = LeaseKeeper(deps.store, lease, deps.exec_lease_seconds)
        heartbeat = deps.tasks.spawn(keeper.run(), f"heartbeat-{record.id}")
        deps.in_flight.start(record.id)
        ran = _Ran()
        try:
            ran = await self._locked_and_sent(record, keeper, heartbeat, actor)
        except StoreUnavailable as exc:
            log.warning("change %s: the store failed before sending: %s", record.id, exc)
            not_sent = Result(RequestState.FAILED, _NOT_SENT, "store", sent=False)
            ran = _Ran(not_sent, kept=self._keep(record, not_sent, keeper, heartbeat))
        finally:
            if not ran.kept:  # a kept result stays in hand (in flight) until it is recorded
                deps.in_flight.done(record.id)
                heartbeat.cancel()
                await self._release(record, keeper)
        return ran.result

    async def _locked_and_sent(
        self,
        record: ChangeRequestRecord,
        keeper: LeaseKeeper,
        heartbeat: asyncio.Task[None],
        actor: str,
    ) -> _Ran:
        """Lock, start, send and record; kept when the result waits for the store."""
        if not await self._still_allowed(record):
            return _Ran()
        if not await self._lock_cluster(record):
            return _Ran()
        try:
            prior = await self.presend.check(record)
        except SendRefused as refused:
            await self._refuse(record, refused.why, refused.kind)
            return _Ran()
        running = await settle(self.deps, record, _start(actor, prior), fence=keeper.lease)
        if running is None:
            return _Ran()
        result = await self._send(running, keeper)
        if result is None:
            return _Ran()
        try:
            await self._record(running, keeper.lease, result, late=False)
        except StoreUnavailable as exc:
            log.warning("change %s: could not record its result yet: %s", running.id, exc)
            return _Ran(result, kept=self._keep(running, result, keeper, heartbeat))
        return _Ran(result)

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

    async def _release(self, record: ChangeRequestRecord, keeper: LeaseKeeper) -> None:
        """Free the cluster (when the request has ended) and the lease; best effort: a lock
        left behind becomes free once the lease lapses and the call deadline passes."""
        store = self.deps.store
        try:
            if await self._ended(record.id):
                await store.unlock_cluster(
                    record.provider, record.project, record.cluster_id, record.id
                )
            if not keeper.lost:
                await store.release_lease(keeper.lease.name, keeper.lease.holder)
        except StoreUnavailable as exc:
            log.warning("change %s: could not free its lock or lease: %s", record.id, exc)

    async def _ended(self, request_id: str) -> bool:
        current = await self.deps.store.get_request(request_id)
        return current is not None and current.state in TERMINAL_STATES

    async def _lock_cluster(self, record: ChangeRequestRecord) -> bool:
        store = self.deps.store
        args = (record.provider, record.project, record.cluster_id)
        for _ in range(2):
            if await store.lock_cluster(*args, record.id, lease_name=lease_name(record.id)):
                return True
            holder_id = await store.cluster_holder(*args)
            if holder_id is None:
                continue  # freed meanwhile
            holder = await store.get_request(holder_id)
            ended = holder is None or holder.state in TERMINAL_STATES
            # An ended holder's provider call may still arrive: only a stale lock goes.
            if ended and await store.release_ended_cluster_lock(*args, holder_id):
                continue
            why = (
                f"another change ({holder_id}) is running on {record.cluster_id}, or may "
                "still reach the provider; request again when it has finished."
            )
            await self._refuse(record, why, "cluster_busy")
            return False
        return False

    async def _still_allowed(self, record: ChangeRequestRecord) -> bool:
        """The guardrails once more, just before sending (a freeze may have begun since the
        approval, or the policy changed); a refused change ends failed, nothing sent."""
        size = stored_size(record.plan)
        if size is None:  # made before guardrails were recorded with requests
            return True
        overridden = stored_override(record.plan) is not None
        try:
            self.guard.check(
                record.project, record.kinds, size, self.deps.clock(), overridden=overridden
            )
        except Refusal as refusal:
            await self._refuse(record, f"not sent: {refusal.message}", refusal.kind)
            return False
        return True

    async def _refuse(self, record: ChangeRequestRecord, why: str, outcome: str) -> None:
        """End an approved change without sending it."""
        refused = Change.ended_by_gpuops(
            "refused",
            {RequestState.APPROVED},
            RequestState.FAILED,
            why,
            audit_event="refused",
            outcome=outcome,
        )
        await settle(self.deps, record, refused)

    async def _send(self, record: ChangeRequestRecord, keeper: LeaseKeeper) -> Result | None:
        """Send the change; None when this executor no longer holds it (nothing sent)."""
        deps = self.deps
        plan = ChangePlan.model_validate(record.plan["plan"])
        adapter = deps.access.adapter_for(record.project)
        if not await deps.store.begin_provider_call(
            record.provider,
            record.project,
            record.cluster_id,
            keeper.lease,
            deps.max_call_seconds,
        ):
            log.warning("change %s: lost its lease or lock before sending; not sent", record.id)
            return None
        try:
            outcome = await adapter.apply(plan)
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

    async def _record_late(self, item: Unrecorded) -> None:
        await self._record(item.record, item.keeper.lease, item.result, late=True)
        await self._release(item.record, item.keeper)

    async def _record(
        self, record: ChangeRequestRecord, fence: Lease, result: Result, *, late: bool
    ) -> None:
        """Write ``result`` under ``fence`` and report it; nothing when fenced off."""
        status, done = await self._write(record, fence, result)
        if done is None or status in (OutcomeRecorded.FENCED, OutcomeRecorded.MISSING):
            log.warning(
                "change %s: result not recorded (%s); another holder has it", record.id, status
            )
            return
        if status is OutcomeRecorded.ALREADY_RECORDED:
            return
        try:
            await self._report(record, done, result, self._told(status, result, late=late))
        except StoreUnavailable as exc:  # recorded: what is left is told without the store
            log.error(
                "change %s: recorded; a store write while reporting it failed: %s", record.id, exc
            )

    @staticmethod
    def _told(status: OutcomeRecorded, result: Result, *, late: bool) -> str:
        message = result.message
        if status is OutcomeRecorded.CORRECTED_UNKNOWN:
            message = (
                "Correction: this change was marked unknown while gpuops could not reach its "
                f"database. What really happened: {message}"
            )
        elif late and result.sent:
            message = (
                "gpuops lost contact with its database while sending this change; the "
                f"result, recorded now that it is back: {message}"
            )
        return message

    async def _write(
        self, record: ChangeRequestRecord, fence: Lease, result: Result
    ) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
        store = self.deps.store
        message = redact(result.message)
        if not result.sent:
            done = await store.transition(
                record.id,
                from_states={RequestState.APPROVED, RequestState.EXECUTING},
                to=result.to,
                fence=fence,
                result_message=message,
            )
            if done is not None:
                return OutcomeRecorded.RECORDED, done
        if result.to in KNOWN_OUTCOMES:
            return await store.record_outcome(
                record.id, fence, to=result.to, result_message=message
            )
        done = await store.transition(
            record.id,
            from_states={RequestState.EXECUTING},
            to=result.to,
            fence=fence,
            result_message=message,
        )
        if done is not None:
            return OutcomeRecorded.RECORDED, done
        current = await store.get_request(record.id)
        if current is not None and current.state is result.to:
            return OutcomeRecorded.ALREADY_RECORDED, current
        return OutcomeRecorded.FENCED, current

    async def _report(
        self, record: ChangeRequestRecord, done: ChangeRequestRecord, result: Result, text: str
    ) -> None:
        to = done.state
        finished = Change(
            "finished",
            record.requester,
            frozenset({RequestState.EXECUTING}),
            to,
            "result",
            outcome=str(to),
            text=text,
            fields={"result_message": redact(result.message)},
            detail={"message": result.message, "kind": result.kind},
            unmirrored=True,
        )
        await announce(self.deps, record, done, finished)
        await self._show_result(done, result.summary)
        # Mirrored last: whoever reads the notify channel finds the whole story in the thread.
        await mirror(self.deps, done, outcome_headline(done))

    async def _show_result(self, done: ChangeRequestRecord, summary: ClusterSummary | None) -> None:
        deps = self.deps
        to = done.state
        if summary is None and to is RequestState.UNKNOWN:
            with contextlib.suppress(ProviderError):
                fetched = await deps.access.adapter_for(done.project).get_cluster(done.cluster_id)
                summary = fetched.summary
        if summary is None:
            return
        summary_ts = await deps.notifier.result(done, summary)
        if summary_ts:
            try:
                done = await deps.store.update_fields(done.id, summary_ts=summary_ts) or done
            except StoreUnavailable as exc:  # the result is recorded and shown already
                log.warning("change %s: summary not linked to its request: %s", done.id, exc)
                done = done.model_copy(update={"summary_ts": summary_ts})
        if to is RequestState.SUCCEEDED and deps.poll_seconds > 0 and not summary.steady:
            await self.follow_up.begin(done)
