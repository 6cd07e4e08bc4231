"""Approving a pending change request: the re-check, then the approval counted toward the rule.

Approving re-checks that the requester may still ask for it and that the preview still holds;
an approval and, when it is the last one needed, the request approved are one transaction."""

from __future__ import annotations

from typing import Any

from bot.core.access import Refusal
from bot.core.answers import Reply, notice
from bot.core.guardrails.budget import BudgetGuard
from bot.core.guardrails.guard import Guard, stored_budget_override, stored_override
from bot.core.policy import Role
from bot.core.requests import table, transitions
from bot.core.requests.deciders import Deciders, already_decided_refusal
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.presend import stale_text
from bot.core.requests.settling import Settling
from bot.core.requests.transitions import Change
from bot.core.requests.view import REFUSED_AT_APPROVAL, STALE_AT_APPROVAL
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable
from bot.providers.base import ChangePlan

_APPROVAL_ATTEMPTS = 50  # counts redone because another approval moved the request first


class Approving:
    """Re-check a request, count an approval, and send it once the rule is complete."""

    def __init__(
        self,
        deps: RequestDeps,
        execution: Execution,
        deciders: Deciders,
        settling: Settling,
    ) -> None:
        self.deps = deps
        self.execution = execution
        self.deciders = deciders
        self.settling = settling
        self.guard = Guard(deps.access)
        self.budget = BudgetGuard(deps.access)

    async def approve(
        self, record: ChangeRequestRecord, user: str, break_glass: bool, reason: str | None
    ) -> Reply | None:
        """``user`` approves ``record`` (by break glass, for ``reason``, when their own)."""
        refused = await self._recheck(record, user)
        if refused is not None:
            return refused
        note = f"Break glass: <@{user}> approved their own request. Reason: {reason}"
        approved = Change(
            table.BREAK_GLASS if break_glass else table.APPROVE,
            user,
            outcome="approved",
            text=note if break_glass else None,
            fields={
                "decided_by": user,
                "decision_note": reason if break_glass else None,
                "break_glass": break_glass,
            },
            detail={"break_glass": break_glass, "reason": reason or ""},
            decision="approved",
            mirror=note if break_glass else None,
        )
        glass_reason = reason if break_glass else None
        counted = await self._count_approval(record, user, approved, glass_reason)
        if isinstance(counted, ChangeRequestRecord):  # it completed the rule: approved
            await self.execution.execute(record.id, actor=user, record=counted)
            return None
        return counted

    async def _count_approval(
        self,
        record: ChangeRequestRecord,
        user: str,
        approved: Change,
        glass_reason: str | None = None,
    ) -> Reply | ChangeRequestRecord:
        """Record this approval (with ``glass_reason``, the requester's break glass: one
        approval, no more) with its audit entry, and the request ``approved`` when it is the
        last one needed, in one transaction: the request as approved then, else what the
        approver is told (counted, already counted, not recorded, someone decided first)."""
        for _ in range(_APPROVAL_ATTEMPTS):
            if record.state is not RequestState.PENDING:
                return already_decided_refusal(record).reply()
            step = await self._approval_step(record, user, approved, glass_reason)
            if isinstance(step, Reply):
                return step
            change, wanted, told = step
            try:
                done = await transitions.count_approval(self.deps, record, change, wanted)
            except StoreUnavailable:
                found = await self.settling.read_back(record, change, "approval")
                if isinstance(found, Reply):
                    return found
                if found is None:  # decided by someone else meanwhile
                    current = await self.deps.store.get_request(record.id) or record
                    return already_decided_refusal(current).reply()
                done = found
            if done is None:  # another approval or a decision came first: count again
                record = await self.deps.store.get_request(record.id) or record
                continue
            await self.settling.announce(record, done, change)
            return done if told is None else told
        raise RuntimeError(f"{record.id}: approvals kept changing; try again")

    async def _approval_step(
        self,
        record: ChangeRequestRecord,
        user: str,
        approved: Change,
        glass_reason: str | None,
    ) -> tuple[Change, dict[str, Any], Reply | None] | Reply:
        """What ``user``'s approval of ``record`` (pending, as read) records: the change
        (partial, or ``approved`` when it completes the rule), the requirement noted and
        what the approver is told once it is recorded (None: approved, then sent); or, for
        an approver already counted short of the rule, what they are told now."""
        requirement = self.deciders.requirement(record)
        wanted = requirement.as_json()
        if glass_reason is not None:
            wanted["break_glass"] = {"by": user, "reason": glass_reason}
        others = [u for u in record.approvers if u != user]
        eligible = [u for u in others if await self.deciders.still_eligible(u, record)]
        # Noted for the prompt, which counts and names only the approvals that count.
        wanted["uncounted"] = [u for u in others if u not in eligible]
        count = len(eligible) + 1
        progress = f"{count} of {requirement.needed}"
        if count >= requirement.needed:
            # The last one: approved now, audited as such. Also an approver's second click
            # once a policy reload has lowered what the request needs
            # (bot.core.requests.requirement_refresh).
            return approved, wanted, None
        if user in record.approvers:
            return notice(f"You already approved {record.id} ({progress}); it counts once.")
        glass = {"break_glass": True, "reason": glass_reason} if glass_reason is not None else {}
        more = f"needs {requirement.needed - count} more"
        if requirement.usergroups:
            more += " from user group " + " or ".join(requirement.usergroups)
        partial = Change(
            table.BREAK_GLASS_PARTIAL if glass else table.APPROVE_PARTIAL,
            user,
            outcome=progress,
            text=progress,
            detail=glass,
            mirror=(
                f"Break glass: <@{user}> approved their own request ({progress}: {more}). "
                f"Reason: {glass_reason}"
                if glass
                else None
            ),
        )
        if glass_reason is None:
            told = notice(f"Your approval of {record.id} is recorded: {progress}.")
        else:
            told = notice(
                f"Break glass on {record.id} counts as one approval: {progress}; it {more}."
            )
        return partial, wanted, told

    async def _recheck(self, record: ChangeRequestRecord, user: str) -> Reply | None:
        """Before approving: the requester may still request it and the preview still
        holds; otherwise the request fails and the decider is told why."""
        access = self.deps.access
        try:
            await access.require(record.requester, record.project, record.channel, Role.operator)
        except Refusal as refusal:
            why = f"the requester no longer may request this change: {refusal.message}"
            return await self._fail_pending(record, user, why, "requester_revoked")
        try:
            state = await access.fetch(record.project, record.cluster_id)
        except Refusal as refusal:  # the provider did not answer: not a stale preview
            why = (
                f"the cluster could not be re-checked before running the change — "
                f"{refusal.message}. Nothing was changed; request it again."
            )
            return await self._fail_pending(record, user, why, refusal.kind)
        try:
            fresh = access.make_plan(record.project, state, record.action, record.plan["inputs"])
        except Refusal as refusal:
            why = f"the change no longer applies — {refusal.message}"
            return await self._fail_pending(record, user, why, "stale")
        old = ChangePlan.model_validate(record.plan["plan"])
        if fresh.fingerprint != old.fingerprint or fresh.body != old.body:
            return await self._fail_pending(record, user, stale_text(old, fresh), "stale")
        now = self.deps.clock()
        size = self.guard.size(state, fresh, now)
        overridden = stored_override(record.plan) is not None
        try:
            self.guard.check(record.project, record.kinds, size, now, overridden=overridden)
            # The budgets and quotas at this approval too, at the prices in force (§13).
            budget = await self.budget.judge(record.project, size, now)
            if budget.band == "deny" and not stored_budget_override(record.plan):
                raise BudgetGuard.refusal(budget)
        except Refusal as refusal:
            return await self._fail_pending(record, user, refusal.message, refusal.kind)
        return None

    async def _fail_pending(
        self, record: ChangeRequestRecord, user: str, detail: str, kind: str
    ) -> Reply:
        """The approval's re-check failed: the request fails unsent, and every surface
        names it the same way (``stale at approval: …``)."""
        why = f"{STALE_AT_APPROVAL if kind == 'stale' else REFUSED_AT_APPROVAL}: {detail}"
        failed = Change(
            table.REFUSE_STALE,
            user,
            outcome=kind,
            text=why,
            fields={"decided_by": user, "decision_note": kind, "result_message": why},
            detail={"reason": why},
            decision="refused",
        )
        already = await self.settling.settle_decision(record, failed)
        return already or Refusal(f"{record.id} failed — {why}").reply()
