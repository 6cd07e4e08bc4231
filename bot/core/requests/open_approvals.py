"""The approval a new request needs, and how it is stored: the policy's requirement, one
more approver past a budget's ``approval_at`` (SPEC §13), and whom its prompt asks
(under on-call approvers, who is on call now: SPEC §16)."""

from __future__ import annotations

from bot.core.guardrails.approvals import Requirement, requirement_for, who_to_ask, with_budget
from bot.core.guardrails.budget import BudgetCall
from bot.core.requests.deps import RequestDeps
from bot.providers.base import ChangePlan


def requirement_at_open(
    deps: RequestDeps, plan: ChangePlan, budget: BudgetCall
) -> Requirement | None:
    """The approval ``plan`` needs when it is asked for (None: it runs without one)."""
    requirement = requirement_for(deps.policy, plan.project, plan.kinds)
    if budget.band == "approval":  # past approval_at: one more approver
        requirement = with_budget(requirement, budget.lines, plan.kinds)
    return requirement


async def approvals_as_stored(
    deps: RequestDeps,
    requirement: Requirement | None,
    project: str,
    channel: str,
    requester: str,
) -> dict[str, object] | None:
    """The approval requirement as stored, with whom its prompt asks: under on-call
    approvers, who is on call now (the prompt names them; eligibility is judged again at
    each click)."""
    if requirement is None:
        return None
    ask = who_to_ask(
        deps.policy, requirement, project=project, channel=channel, requester=requester
    )
    gate = deps.access.oncall
    if not requirement.oncall or gate is None:
        return {**requirement.as_json(), "ask": ask}
    now = deps.clock()
    on_call = await gate.now(requirement, opened_at=now, now=now)
    ask = {
        "users": [u for u in on_call.slack_ids if u != requester],
        "usergroups": list(requirement.usergroups),
    }
    return {**requirement.as_json(), "ask": ask, "oncall_now": on_call.as_json()}
