"""Deciding a pending change request: approve, deny, cancel, break glass.

Approving re-checks that the preview still holds; break glass is an admin approving their
own request with a reason."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from bot.core.access import Refusal
from bot.core.answers import Reply, notice
from bot.core.guardrails.approvals import Requirement, requirement_in_force
from bot.core.guardrails.guard import Guard, stored_override
from bot.core.policy import Role
from bot.core.requests import transitions
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.presend import stale_text
from bot.core.requests.readback import (
    SETTLE_LATER_SECONDS,
    ReadBackFailed,
    not_recorded,
    read_back,
    unknown_whether_recorded,
)
from bot.core.requests.sweeper import Sweeper
from bot.core.requests.transitions import Change
from bot.core.requests.view import (
    REFUSED_AT_APPROVAL,
    STALE_AT_APPROVAL,
    at_approval,
    state_words,
)
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable
from bot.errors import GpuopsError
from bot.metrics import APPROVAL_DECISIONS
from bot.providers.base import ChangePlan

log = logging.getLogger(__name__)

Decision = Literal["approve", "deny", "cancel"]
_DOING: dict[Decision, str] = {
    "approve": "approving a request",
    "deny": "denying a request",
    "cancel": "cancelling a request",
}
_APPROVAL_ATTEMPTS = 50  # counts redone because another approval moved the request first
_COMPLETING = frozenset({transitions.APPROVE, transitions.BREAK_GLASS})
_APPROVED_ONCE = frozenset(
    {
        RequestState.APPROVED,
        RequestState.EXECUTING,
        RequestState.SUCCEEDED,
        RequestState.FAILED,
        RequestState.UNKNOWN,
    }
)


@dataclass(frozen=True)
class NeedsBreakGlass:
    """The requester (an admin) pressed Approve on their own request: ask for a reason."""

    request_id: str


class _AskBreakGlass(GpuopsError):
    """An admin approving their own request must first give a break-glass reason."""


def took(seen: ChangeRequestRecord, current: ChangeRequestRecord, change: Change) -> bool:
    """Whether ``current`` (read back) holds ``change`` written over ``seen``: the state it
    sets, by its actor (a partial approval: still pending, the approver counted)."""
    t = change.transition
    if current.version <= seen.version or current.state is not t.to:
        return False
    if t.to in t.from_states:
        return change.actor in current.approvers
    return current.decided_by == change.actor


def waits_for_its_time(record: ChangeRequestRecord) -> bool:
    """Approved, scheduled and not sent yet: it may still be cancelled."""
    return record.state is RequestState.APPROVED and record.run_at is not None


def already_decided_refusal(record: ChangeRequestRecord) -> Refusal:
    """The refusal for a click on a request that is no longer pending."""
    words = state_words(str(record.state))
    who = record.decided_by or ""
    ended = at_approval(str(record.state), record.decision_note, record.break_glass)
    if ended and who:
        text = f"{record.id} already {words}, {ended} (<@{who}> pressed Approve)."
    elif record.state in _APPROVED_ONCE and record.needs_approval and who:
        text = f"{record.id} was already approved by <@{who}> ({words})."
    elif who and record.state in (RequestState.DENIED, RequestState.CANCELLED):
        text = f"{record.id} was already {words} by <@{who}>."
    else:
        text = f"{record.id} is already {words}."
    return Refusal(text, kind="already_decided", mentions=(who,) if who else ())


class Decisions:
    """Approve, deny and cancel, each deciding a request at most once across replicas."""

    def __init__(self, deps: RequestDeps, execution: Execution, sweeper: Sweeper) -> None:
        self.deps = deps
        self.execution = execution
        self.sweeper = sweeper
        self.guard = Guard(deps.access)

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
        record = await self._found(user, channel, request_id)
        if not isinstance(record, ChangeRequestRecord):
            return record
        try:
            await self._may_see(user, record, decision)
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
                await self._may_cancel(user, record)
                cancel = (
                    transitions.CANCEL_SCHEDULED
                    if waits_for_its_time(record)
                    else transitions.CANCEL
                )
                return await self._close(record, user, cancel)
            break_glass = await self._may_decide(user, record, decision, break_glass_reason)
        except Refusal as refusal:
            return await self._refused(user, channel, record, refusal)
        except _AskBreakGlass:
            return NeedsBreakGlass(record.id)
        if decision == "deny":
            return await self._close(record, user, transitions.DENY, (reason or "").strip())
        return await self._approve(record, user, break_glass, break_glass_reason)

    async def may_deny(self, *, user: str, channel: str, request_id: str) -> Reply | None:
        """None when ``user`` may deny it here now (a surface then asks why); else the
        refusal (audited) — before a form is opened for nothing."""
        record = await self._found(user, channel, request_id)
        if not isinstance(record, ChangeRequestRecord):
            return record
        try:
            await self._may_see(user, record)
            if record.state is not RequestState.PENDING:
                raise already_decided_refusal(record)
            await self._may_decide(user, record, "deny", None)
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

    async def _found(self, user: str, channel: str, request_id: str) -> ChangeRequestRecord | Reply:
        """The request clicked on, or the refusal of a click on none."""
        record = await self.deps.store.get_request(request_id)
        if record is not None:
            return record
        unknown = Refusal(f"there is no change request {request_id}.", kind="unknown_request")
        return await self.deps.access.refuse(user, channel, unknown)

    async def _may_see(
        self, user: str, record: ChangeRequestRecord, decision: Decision = "approve"
    ) -> None:
        """Whoever has no role on the project where the request lives learns nothing of it
        (not even whether, or by whom, it was decided); the refusal says what the click
        needed, so nobody is sent to a channel where they could not act either."""
        if user == record.requester:
            return
        authorizer = self.deps.access.authorizer
        seen = await authorizer.check(user, record.project, record.channel, Role.viewer)
        if not seen.allowed:
            needed = Role.admin if decision == "cancel" else Role.approver
            why = await authorizer.check(
                user, record.project, record.channel, needed, action=_DOING[decision]
            )
            raise Refusal(why.reason, kind="not_authorized")

    async def _may_cancel(self, user: str, record: ChangeRequestRecord) -> None:
        if user == record.requester:
            return
        check = await self.deps.access.authorizer.check(
            user, record.project, record.channel, Role.admin
        )
        if not check.allowed:
            raise Refusal(
                f"only the requester (<@{record.requester}>) or an admin of {record.project} "
                f"can cancel {record.id}.",
                kind="not_authorized",
                mentions=(record.requester,),
            )

    async def _may_decide(
        self,
        user: str,
        record: ChangeRequestRecord,
        decision: Decision,
        break_glass_reason: str | None,
    ) -> bool:
        """Check the decider in the request's channel; True for a break-glass self-approval."""
        role = await self.deps.access.require(
            user, record.project, record.channel, Role.approver, doing=_DOING[decision]
        )
        if user != record.requester:
            await self._in_rule_groups(user, record, decision)
            return False
        if decision == "approve" and self.deps.policy.approvals.break_glass and role >= Role.admin:
            if user in record.approvers:  # counted once already: no second reason asked
                return True
            if break_glass_reason and break_glass_reason.strip():
                return True
            raise _AskBreakGlass()
        raise Refusal(
            f"you requested {record.id}; another approver of {record.project} must {decision} it.",
            kind="self_approval",
        )

    def requirement(self, record: ChangeRequestRecord) -> Requirement:
        """What approving this request takes under the policy in force now."""
        return requirement_in_force(self.deps.policy, record.project, record.kinds)

    async def _in_rule_groups(
        self, user: str, record: ChangeRequestRecord, decision: Decision
    ) -> None:
        groups = self.requirement(record).usergroups
        if not groups or await self.deps.access.authorizer.in_any_group(user, groups):
            return
        named = " or ".join(groups)
        raise Refusal(
            f"to {decision} {record.id} you must be in user group {named} (the approval rule of "
            f"{record.project}); nothing was recorded.",
            kind="not_in_approver_group",
        )

    async def _settle_decision(self, record: ChangeRequestRecord, change: Change) -> Reply | None:
        """Settle a decision; the already-decided refusal when someone was faster. A commit
        whose answer was lost is read back before anything is told."""
        try:
            done = await transitions.apply(self.deps, record, change)
        except StoreUnavailable:
            found = await self._read_back(record, change, "decision")
            if isinstance(found, Reply):
                return found
            done = found
        if done is not None:
            await self._announce(record, done, change)
            return None
        current = await self.deps.store.get_request(record.id) or record
        return already_decided_refusal(current).reply()

    async def _read_back(
        self, record: ChangeRequestRecord, change: Change, what: str
    ) -> ChangeRequestRecord | Reply | None:
        """After a store error on writing ``change``: the request as written by it (then
        told by the caller), None when someone else decided it, or what the decider is
        told (not recorded, press again; or not known yet, settled later)."""
        try:
            current = await read_back(self.deps.store, record.id)
        except ReadBackFailed:
            self._settle_later(record, change)
            return unknown_whether_recorded(record.id, what)
        if current is not None and took(record, current, change):
            return current
        if current is not None and current.state is RequestState.PENDING:
            return not_recorded(record.id, what)
        return None

    async def _announce(
        self, record: ChangeRequestRecord, done: ChangeRequestRecord, change: Change
    ) -> None:
        """Tell a decision the store has recorded; a store error while telling it (a
        mirror's failure audited, say) leaves it recorded, so it is logged, not told as
        "nothing was changed"."""
        try:
            await transitions.announce(self.deps, record, done, change)
        except StoreUnavailable as exc:
            log.warning("%s: %s recorded, not all told: %s", record.id, change.transition.name, exc)

    def _settle_later(self, record: ChangeRequestRecord, change: Change) -> None:
        """Go on reading back in the background: once the store is back, what it took is
        told (and the prompt redrawn), an approval that completed the rule sent."""
        self.deps.tasks.spawn(self._told_once_back(record, change), f"read back {record.id}")

    async def _told_once_back(self, record: ChangeRequestRecord, change: Change) -> None:
        try:
            current = await read_back(self.deps.store, record.id, within=SETTLE_LATER_SECONDS)
        except ReadBackFailed as exc:
            log.warning("%s: the store never answered the read-back: %s", record.id, exc)
            return
        if current is None or not took(record, current, change):
            return
        await self._announce(record, current, change)
        if current.state is RequestState.APPROVED and change.transition in _COMPLETING:
            await self.execution.execute(current.id, actor=change.actor, record=current)

    async def _close(
        self,
        record: ChangeRequestRecord,
        user: str,
        transition: transitions.Transition,
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
        return await self._settle_decision(record, closed)

    async def _approve(
        self, record: ChangeRequestRecord, user: str, break_glass: bool, reason: str | None
    ) -> Reply | None:
        refused = await self._recheck(record, user)
        if refused is not None:
            return refused
        note = f"Break glass: <@{user}> approved their own request. Reason: {reason}"
        approved = Change(
            transitions.BREAK_GLASS if break_glass else transitions.APPROVE,
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
                found = await self._read_back(record, change, "approval")
                if isinstance(found, Reply):
                    return found
                if found is None:  # decided by someone else meanwhile
                    current = await self.deps.store.get_request(record.id) or record
                    return already_decided_refusal(current).reply()
                done = found
            if done is None:  # another approval or a decision came first: count again
                record = await self.deps.store.get_request(record.id) or record
                continue
            await self._announce(record, done, change)
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
        requirement = self.requirement(record)
        wanted = requirement.as_json()
        if glass_reason is not None:
            wanted["break_glass"] = {"by": user, "reason": glass_reason}
        others = [u for u in record.approvers if u != user]
        eligible = [u for u in others if await self.still_eligible(u, record)]
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
            transitions.BREAK_GLASS_PARTIAL if glass else transitions.APPROVE_PARTIAL,
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

    async def still_eligible(self, approver: str, record: ChangeRequestRecord) -> bool:
        """An earlier approval counts while its approver could still give it (a reloaded
        policy may have taken the grant, the group or break glass away); the requester's
        only by break glass."""
        authorizer = self.deps.access.authorizer
        if approver == record.requester:
            glass = (record.approvals or {}).get("break_glass") or {}
            if glass.get("by") != approver or not self.deps.policy.approvals.break_glass:
                return False
            check = await authorizer.check(approver, record.project, record.channel, Role.admin)
            return check.allowed
        check = await authorizer.check(approver, record.project, record.channel, Role.approver)
        if not check.allowed:
            return False
        groups = self.requirement(record).usergroups
        return not groups or await authorizer.in_any_group(approver, groups)

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
            transitions.REFUSE_STALE,
            user,
            outcome=kind,
            text=why,
            fields={"decided_by": user, "decision_note": kind, "result_message": why},
            detail={"reason": why},
            decision="refused",
        )
        already = await self._settle_decision(record, failed)
        return already or Refusal(f"{record.id} failed — {why}").reply()
