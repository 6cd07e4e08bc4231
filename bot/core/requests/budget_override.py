"""An admin's override of a budget's ``deny_at`` at request (SPEC §13): asked with
``override="why"``, kept with the request, audited as ``budget_override`` and announced in
the project's notify channel once the request is made."""

from __future__ import annotations

from bot.core.ask.change import ChangeAsk
from bot.core.guardrails.budget import BudgetCall, BudgetGuard, BudgetOverrideJson
from bot.core.policy import Role
from bot.core.requests.deps import RequestDeps
from bot.core.requests.transitions import mirror
from bot.core.store import ChangeRequestRecord


async def budget_overridden(
    deps: RequestDeps, ask: ChangeAsk, budget: BudgetCall
) -> BudgetOverrideJson | None:
    """Past a budget's ``deny_at``: refused, unless an admin gave ``override=`` (returned
    as stored with the request); None below it."""
    if budget.band != "deny":
        return None
    if ask.override is None:
        raise BudgetGuard.refusal(budget)
    await deps.access.require(
        ask.user, ask.project, ask.channel, Role.admin, doing="overriding a budget"
    )
    return {"by": ask.user, "reason": ask.override, "figures": list(budget.lines)}


async def announce_budget_override(
    deps: RequestDeps, record: ChangeRequestRecord, over: BudgetOverrideJson
) -> None:
    """Audit an admin's budget override and announce it in the notify channel."""
    figures = "; ".join(over["figures"])
    await deps.access.audit(
        over["by"],
        "budget_override",
        project=record.project,
        cluster_id=record.cluster_id,
        request_id=record.id,
        outcome="deny_at",
        reason=over["reason"],
        figures=figures,
    )
    headline = (
        f"Budget override: <@{over['by']}> went past the budget ({figures}). "
        f"Reason: {over['reason']}"
    )
    await mirror(deps, record, headline)
