"""Budgets and team quotas as a guardrail (SPEC §13), judged at request and just before
sending: a change that adds capacity is judged by the projected month-end spend of its
project and of its team (month-to-date + the hourly rate after it x hours left), and by its
team's GPUs across every project of both providers after it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal, TypedDict

from bot.core.access import Access, Refusal
from bot.core.guardrails.checks import ChangeSize
from bot.core.spend.book import Scope, Standing, scopes_of
from bot.core.spend.months import percent_of
from bot.core.spend.rates import usd
from bot.core.spend.report import dollars, hours, pct

Band = Literal["ok", "warn", "approval", "deny"]
_ORDER: dict[Band, int] = {"ok": 0, "warn": 1, "approval": 2, "deny": 3}
BUDGET_OVERRIDE_HINT = ' An admin may add override="why" to go ahead.'


class BudgetJson(TypedDict):
    """A budget call as a request's stored guard keeps it (``guard["budget"]``)."""

    band: Band
    lines: list[str]


class BudgetOverrideJson(TypedDict):
    """An admin's override of ``deny_at`` as kept with the request
    (``guard["budget_override"]``)."""

    by: str
    reason: str
    figures: list[str]


@dataclass(frozen=True)
class BudgetCall:
    """The worst band the change's scopes reach, and the figures of each scope judged."""

    band: Band
    lines: tuple[str, ...]

    def as_json(self) -> BudgetJson:
        return {"band": self.band, "lines": list(self.lines)}


def band_of(scope: Scope, projected: Decimal) -> Band:
    budget = scope.budget
    if budget is None:
        return "ok"
    share = percent_of(projected, budget.monthly_usd)
    if budget.deny_at is not None and share >= budget.deny_at:
        return "deny"
    if budget.approval_at is not None and share >= budget.approval_at:
        return "approval"
    if any(share >= mark for mark in budget.warn_at):
        return "warn"
    return "ok"


def figures(standing: Standing, extra_hourly: Decimal, now: datetime) -> str:
    """``together-prod: projected month-end $52,100.00 = 104% of $50,000.00
    (month-to-date $30,000.00 + $32.66/h x 676.0 h left)``."""
    scope, budget = standing.scope, standing.scope.budget
    assert budget is not None
    projected = standing.projection(now, extra_hourly)
    rate = standing.hourly + extra_hourly
    return (
        f"{scope.title}: projected month-end {dollars(projected)} = "
        f"{pct(percent_of(projected, budget.monthly_usd))} of {dollars(budget.monthly_usd)} "
        f"(month-to-date {dollars(standing.spent)} + {dollars(rate)}/h x "
        f"{hours(standing.month.hours_left(now))} h left)"
    )


def gpus_added(size: ChangeSize) -> int:
    if size.gpus_before is None or size.gpus_after is None:
        return 0
    return size.gpus_after - size.gpus_before


class BudgetGuard:
    """Judges a change against the budgets and quotas of the policy in force."""

    def __init__(self, access: Access) -> None:
        self.access = access

    async def judge(self, project: str, size: ChangeSize, now: datetime) -> BudgetCall:
        """The change's band; a Refusal when a team quota forbids it (a hard limit, as
        ``limits`` are). A change that adds no capacity is never judged."""
        policy = self.access.policy
        if project not in policy.projects or not size.adds_capacity():
            return BudgetCall("ok", ())
        extra = Decimal(0)
        if size.hourly is not None and size.hourly > 0:
            extra = usd(policy, size.hourly, size.currency) or Decimal(0)
        worst: Band = "ok"
        lines: list[str] = []
        for scope in scopes_of(policy, project):
            if scope.budget is None and scope.quota is None:
                continue
            standing = await self.access.spend.standing(scope, now)
            self._quota(scope, standing, size)
            if scope.budget is None:
                continue
            band = band_of(scope, standing.projection(now, extra))
            if band != "ok":
                lines.append(figures(standing, extra, now))
            worst = band if _ORDER[band] > _ORDER[worst] else worst
        return BudgetCall(worst, tuple(lines))

    @staticmethod
    def _quota(scope: Scope, standing: Standing, size: ChangeSize) -> None:
        quota, added = scope.quota, gpus_added(size)
        if quota is None or added <= 0:
            return
        if standing.unread:
            raise Refusal(
                f"{', '.join(standing.unread)} could not be listed; {scope.title}'s quota of "
                f"{quota.max_gpus} GPUs cannot be checked. Try again shortly.",
                kind="quota",
            )
        after = standing.gpus + added
        if after > quota.max_gpus:
            raise Refusal(
                f"{after} GPUs is over {scope.title}'s quota of {quota.max_gpus} GPUs across "
                f"its projects ({standing.gpus} now, +{added}). Only a policy change can "
                "raise a quota.",
                kind="quota",
            )

    @staticmethod
    def refusal(call: BudgetCall) -> Refusal:
        return Refusal(
            "over budget: " + "; ".join(call.lines) + "." + BUDGET_OVERRIDE_HINT, kind="budget"
        )
