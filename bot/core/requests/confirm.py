"""Confirming an agent's proposal (SPEC §15): its requester's click on **Confirm**.

An agent's proposal opens ``pending`` with ``confirm = "awaiting"`` and no approval prompt:
nothing about it runs and nobody is asked to approve it before the person it acts for says
so. Confirming is one compare-and-set transaction (the request's version, ``confirm`` still
``awaiting``) with its audit entry: a change the policy lets run at once is then approved
and sent; one that needs approval stays pending, and its approvers are asked as for any
request. A second click, a cancel or its expiry meanwhile makes the click a no-op."""

from __future__ import annotations

import logging

from bot.core.access import Refusal
from bot.core.answers import Reply, notice
from bot.core.notifier import NotDelivered
from bot.core.policy import Role
from bot.core.requests import transitions
from bot.core.requests.deciders import already_decided_refusal
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.table import CONFIRM, CONFIRM_APPROVED
from bot.core.requests.transitions import Change
from bot.core.requests.view import state_words
from bot.core.store import ChangeRequestRecord, RequestState, normalize_request_id
from bot.metrics import APPROVALS_PENDING

log = logging.getLogger(__name__)

S = RequestState


class Confirmations:
    """The Confirm button of an agent's proposal: its requester's alone."""

    def __init__(self, deps: RequestDeps, execution: Execution) -> None:
        self.deps = deps
        self.execution = execution

    async def confirm(self, *, user: str, channel: str, request_id: str) -> Reply:
        """Confirm the proposal for ``user`` (its requester); the answer to them (a
        refusal is audited)."""
        access = self.deps.access
        record = await self.deps.store.get_request(normalize_request_id(request_id))
        try:
            if record is None:
                raise Refusal(f"there is no request {request_id[:20]}.", kind="not_found")
            self._may_confirm(user, record)
            await access.require(
                user, record.project, record.channel, Role.operator, doing="confirming it"
            )
        except Refusal as refusal:
            return await access.refuse(
                user,
                channel,
                refusal,
                project=record.project if record else None,
                request_id=record.id if record else None,
                command="confirm",
            )
        return await self._confirmed(user, record)

    @staticmethod
    def _may_confirm(user: str, record: ChangeRequestRecord) -> None:
        if record.confirm == "confirmed":
            raise Refusal(f"{record.id} is already confirmed.", kind="already_decided")
        if record.confirm != "awaiting":
            raise Refusal(f"{record.id} is not an agent's proposal: nothing to confirm.")
        if record.state is not S.PENDING:
            raise already_decided_refusal(record)
        if user != record.requester:
            raise Refusal(
                f"only <@{record.requester}>, for whom the agent proposed {record.id}, can "
                "confirm it.",
                kind="not_authorized",
                mentions=(record.requester,),
            )

    async def _confirmed(self, user: str, record: ChangeRequestRecord) -> Reply:
        deps = self.deps
        transition = CONFIRM if record.needs_approval else CONFIRM_APPROVED
        change = Change(
            transition,
            user,
            outcome=str(transition.to),
            detail={"via": record.via or "", "client": record.client or ""},
        )
        done = await deps.store.confirm_request(
            record, to=transition.to, audit=change.audit_row(record)
        )
        if done is None:  # a second click, a cancel or its expiry came first
            current = await deps.store.get_request(record.id) or record
            return notice(f"{record.id} is {state_words(str(current.state))} already.")
        await transitions.announce(deps, record, done, change)
        if record.needs_approval:
            return await self._ask_approvers(done)
        APPROVALS_PENDING.dec()
        if done.run_at is not None:
            return notice(f"Request {done.id} is confirmed; it runs at its time.")
        await self.execution.execute(done.id, actor=user, record=done)
        final = await deps.store.get_request(done.id) or done
        outcome = state_words(str(final.state))
        return notice(f"Request {done.id} is confirmed and ran — see the thread ({outcome}).")

    async def _ask_approvers(self, record: ChangeRequestRecord) -> Reply:
        minutes = self.deps.policy.approvals.expire_after_minutes
        try:
            prompt_ts = await self.deps.notifier.approval_requested(record, minutes)
        except NotDelivered as exc:
            log.warning("request %s: its approval prompt was not posted: %s", record.id, exc)
            return notice(
                f"Request {record.id} is confirmed, but its approval prompt could not be "
                f"posted ({exc.user_message}); approvers can decide it from their Home tab."
            )
        await self.deps.store.update_fields(record.id, prompt_ts=prompt_ts)
        return notice(f"Request {record.id} is confirmed and waits for approval in the thread.")
