"""Deciding a pending change request: approve, deny, cancel, break glass.

Approving re-checks that the preview still holds (bot.core.requests.approving); break glass
is an admin approving their own request with a reason. Who may decide is checked in
bot.core.requests.deciders, a decision recorded through bot.core.requests.settling."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.access import Refusal
from bot.core.answers import Reply
from bot.core.requests import table
from bot.core.requests.approving import Approving
from bot.core.requests.deciders import (
    AskBreakGlass,
    Deciders,
    Decision,
    already_decided_refusal,
    waits_for_its_time,
)
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.settling import Settling
from bot.core.requests.sweeper import Sweeper
from bot.core.requests.transitions import Change
from bot.core.store import ChangeRequestRecord, RequestState
from bot.metrics import APPROVAL_DECISIONS


@dataclass(frozen=True)
class NeedsBreakGlass:
    """The requester (an admin) pressed Approve on their own request: ask for a reason."""

    request_id: str


class Decisions:
    """Approve, deny and cancel, each deciding a request at most once across replicas."""

    def __init__(self, deps: RequestDeps, execution: Execution, sweeper: Sweeper) -> None:
        self.deps = deps
        self.sweeper = sweeper
        self.deciders = Deciders(deps)
        self.settling = Settling(deps, execution)
        self.approving = Approving(deps, execution, self.deciders, self.settling)

    async def decide(
        self,
        *,
        user: str,
        channel: str,
        request_id: str,
        decision: Decision,
        break_glass_reason: str | None = None,
        reason: str | None = None,
    ) -> Reply | NeedsBreakGlass | None:
        """Act on a decision button; a reply for the decider, or None when all is shown.

        ``reason`` is a denier's why (audited and shown in the thread).

        ``channel`` is where the click came from (audited); the decision is checked in the
        request's own channel, never the one a payload names."""
        deps = self.deps
        deciders = self.deciders
        record = await deciders.found(user, channel, request_id)
        if not isinstance(record, ChangeRequestRecord):
            return record
        try:
            await deciders.may_see(user, record, decision)
        except Refusal as hidden:
            APPROVAL_DECISIONS.labels("refused").inc()
            return await deps.access.refuse(
                user, channel, hidden, project=record.project, request_id=record.id
            )
        if (
            record.state is RequestState.PENDING
            and record.expires_at
            and record.expires_at <= deps.clock()
        ):
            # Past its deadline but not yet swept: it expires now, not gets decided.
            await self.sweeper.expire_due()
            record = await deps.store.get_request(record.id) or record
        if record.state is not RequestState.PENDING and not (
            decision == "cancel" and waits_for_its_time(record)
        ):
            refusal = already_decided_refusal(record)
            return await deps.access.refuse(
                user, channel, refusal, project=record.project, request_id=record.id
            )
        try:
            if decision == "cancel":
                await deciders.may_cancel(user, record)
                cancel = table.CANCEL_SCHEDULED if waits_for_its_time(record) else table.CANCEL
                return await self._close(record, user, cancel)
            break_glass = await deciders.may_decide(user, record, decision, break_glass_reason)
        except Refusal as refusal:
            return await self._refused(user, channel, record, refusal)
        except AskBreakGlass:
            return NeedsBreakGlass(record.id)
        if decision == "deny":
            return await self._close(record, user, table.DENY, (reason or "").strip())
        return await self.approving.approve(record, user, break_glass, break_glass_reason)

    async def may_deny(self, *, user: str, channel: str, request_id: str) -> Reply | None:
        """None when ``user`` may deny it here now (a surface then asks why); else the
        refusal (audited) — before a form is opened for nothing."""
        record = await self.deciders.found(user, channel, request_id)
        if not isinstance(record, ChangeRequestRecord):
            return record
        try:
            await self.deciders.may_see(user, record)
            if record.state is not RequestState.PENDING:
                raise already_decided_refusal(record)
            await self.deciders.may_decide(user, record, "deny", None)
        except Refusal as refusal:
            return await self._refused(user, channel, record, refusal)
        return None

    async def _refused(
        self, user: str, channel: str, record: ChangeRequestRecord, refusal: Refusal
    ) -> Reply:
        """A decision refused (counted, audited, answered)."""
        APPROVAL_DECISIONS.labels("refused").inc()
        return await self.deps.access.refuse(
            user,
            channel,
            refusal,
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
        )

    async def _close(
        self,
        record: ChangeRequestRecord,
        user: str,
        transition: table.Transition,
        why: str = "",
    ) -> Reply | None:
        """Deny or cancel (``transition``), by ``user``, for ``why``."""
        event = transition.audit_event
        closed = Change(
            transition,
            user,
            outcome=event,
            text=why or None,
            fields={"decided_by": user, "decision_note": why or None},
            detail={"reason": why} if why else {},
            decision=event if RequestState.PENDING in transition.from_states else None,
            mirror=f"Change {event}" + (f": {why}" if why else ""),
        )
        return await self.settling.settle_decision(record, closed)
