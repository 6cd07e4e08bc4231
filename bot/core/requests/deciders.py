"""Who may decide a pending change request, and what approving it takes.

Every check is made in the request's own channel, never the one a payload names; whoever has
no role on the request's project learns nothing of it."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from bot.core.access import Refusal
from bot.core.answers import Reply
from bot.core.guardrails.approvals import Requirement, requirement_of
from bot.core.policy import Role
from bot.core.requests.deps import RequestDeps
from bot.core.requests.oncall_check import requester_counts, require_on_call
from bot.core.requests.view import at_approval, state_words
from bot.core.store import ChangeRequestRecord, RequestState
from bot.errors import GpuopsError

Decision = Literal["approve", "deny", "cancel"]


class DecisionClick(TypedDict):
    """A decision as a surface hands it on (``Decisions.decide``'s keywords): who clicked,
    where, on which request, and what; an admin's break-glass reason for approving their
    own request, or a denier's why."""

    user: str
    channel: str
    request_id: str
    decision: Decision
    break_glass_reason: NotRequired[str | None]
    reason: NotRequired[str | None]


_DOING: dict[Decision, str] = {
    "approve": "approving a request",
    "deny": "denying a request",
    "cancel": "cancelling a request",
}
_APPROVED_ONCE = frozenset(
    {
        RequestState.APPROVED,
        RequestState.EXECUTING,
        RequestState.SUCCEEDED,
        RequestState.FAILED,
        RequestState.UNKNOWN,
    }
)


# The break-glass reason of a requester whose own approval counts as one because they are
# on call (SPEC §16, ``requester_on_call_counts_as``).
ON_CALL_GLASS = "the requester is "


class AskBreakGlass(GpuopsError):
    """An admin approving their own request must first give a break-glass reason."""


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


class Deciders:
    """The checks a decision passes before anything is recorded."""

    def __init__(self, deps: RequestDeps) -> None:
        self.deps = deps

    async def found(self, user: str, channel: str, request_id: str) -> ChangeRequestRecord | Reply:
        """The request clicked on, or the refusal of a click on none."""
        record = await self.deps.store.get_request(request_id)
        if record is not None:
            return record
        unknown = Refusal(f"there is no change request {request_id}.", kind="unknown_request")
        return await self.deps.access.refuse(user, channel, unknown)

    async def may_see(
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

    async def may_cancel(self, user: str, record: ChangeRequestRecord) -> None:
        """The requester, or an admin of the project, may cancel."""
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

    async def may_decide(
        self,
        user: str,
        record: ChangeRequestRecord,
        decision: Decision,
        break_glass_reason: str | None,
    ) -> bool | str:
        """Check the decider in the request's channel; True for a break-glass self-approval,
        or its reason for the requester on call counted as one (SPEC §16). An agent's
        proposal is approved only once its requester has confirmed it."""
        if decision == "approve" and record.confirm == "awaiting":
            raise Refusal(
                f"{record.id} is an agent's proposal that <@{record.requester}> has not "
                "confirmed yet: it can be approved once they press Confirm.",
                kind="unconfirmed",
                mentions=(record.requester,),
            )
        role = await self.deps.access.require(
            user, record.project, record.channel, Role.approver, doing=_DOING[decision]
        )
        if user != record.requester:
            await self._in_rule_groups(user, record, decision)
            return False
        if decision == "approve":
            on_call = await requester_counts(self.deps.access, record, self.deps.clock())
            if on_call is not None:
                return ON_CALL_GLASS + on_call.text
        if decision == "approve" and self.deps.policy.approvals.break_glass and role >= Role.admin:
            if user in record.approvers:  # counted once already: no second reason asked
                return True
            if break_glass_reason and break_glass_reason.strip():
                return True
            raise AskBreakGlass()
        raise Refusal(
            f"you requested {record.id}; another approver of {record.project} must {decision} it.",
            kind="self_approval",
        )

    def requirement(self, record: ChangeRequestRecord) -> Requirement:
        """What approving this request takes under the policy in force now."""
        return requirement_of(self.deps.policy, record.project, record.kinds, record.approvals)

    async def _in_rule_groups(
        self, user: str, record: ChangeRequestRecord, decision: Decision
    ) -> None:
        """In the rule's groups, or, under on-call approvers, on call now (or in the groups)
        as judged at this click (SPEC §16)."""
        doing = f"{decision} {record.id}"
        if await require_on_call(self.deps.access, user, record, doing, self.deps.clock()):
            return
        groups = self.requirement(record).usergroups
        if not groups or await self.deps.access.authorizer.in_any_group(user, groups):
            return
        named = " or ".join(groups)
        raise Refusal(
            f"to {decision} {record.id} you must be in user group {named} (the approval rule of "
            f"{record.project}); nothing was recorded.",
            kind="not_in_approver_group",
        )

    async def still_eligible(self, approver: str, record: ChangeRequestRecord) -> bool:
        """An earlier approval counts while its approver could still give it (a reloaded
        policy may have taken the grant, the group or break glass away); the requester's
        only by break glass."""
        authorizer = self.deps.access.authorizer
        if approver == record.requester:
            glass = (record.approvals or {}).get("break_glass") or {}
            if glass.get("by") == approver and str(glass.get("reason", "")).startswith(
                ON_CALL_GLASS
            ):  # on call at their click, and the rule still counts it
                return self.requirement(record).requester_counts_as > 0
            if glass.get("by") != approver or not self.deps.policy.approvals.break_glass:
                return False
            check = await authorizer.check(approver, record.project, record.channel, Role.admin)
            return check.allowed
        check = await authorizer.check(approver, record.project, record.channel, Role.approver)
        if not check.allowed:
            return False
        requirement = self.requirement(record)
        if requirement.oncall:  # approved while eligible at their click: it counts
            return True
        groups = requirement.usergroups
        return not groups or await authorizer.in_any_group(approver, groups)
