"""``/gpu spend [project|team] [month=YYYY-MM]`` (SPEC §13): a scope's month in words —
month-to-date, the estimated part, the rate now, the projection against the budget's
bands, and each cluster."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from bot.core.access import Access, Refusal
from bot.core.answers import Reply, SpendCard
from bot.core.policy import Role
from bot.core.spend.book import Scope, Standing, project_scope, team_scope
from bot.core.spend.months import Month, MonthError, parse_month
from bot.providers.pricing import money

MAX_CLUSTER_LINES = 25  # a scope's clusters beyond these are summed in one line


def dollars(amount: Decimal) -> str:
    return money(amount.quantize(Decimal("0.01")), "USD")


def hours(amount: Decimal) -> str:
    return f"{amount.quantize(Decimal('0.1')):,}"


def pct(value: Decimal) -> str:
    return f"{value.quantize(Decimal('1'))}%"


def bands_text(scope: Scope) -> str:
    budget = scope.budget
    if budget is None:
        return "no budget"
    parts = [f"budget {dollars(budget.monthly_usd)}"]
    if budget.warn_at:
        parts.append("warn at " + ", ".join(pct(p) for p in sorted(budget.warn_at)))
    if budget.approval_at is not None:
        parts.append(f"one more approver from {pct(budget.approval_at)}")
    if budget.deny_at is not None:
        parts.append(f"refused from {pct(budget.deny_at)}")
    return " · ".join(parts)


def standing_lines(standing: Standing, now: datetime) -> list[str]:
    """The lines of one scope's month."""
    scope, month = standing.scope, standing.month
    lines = [f"*{scope.title}* — {month.label} ({month.time_zone}) · {bands_text(scope)}"]
    spent = f"Month-to-date: {dollars(standing.spent)}"
    share = standing.percent(standing.spent)
    if share is not None:
        spent += f" ({pct(share)} of the budget)"
    if standing.estimated:
        spent += f", of it estimated {dollars(standing.estimated)} (polling gaps)"
    spent += f" · {hours(standing.gpu_hours)} GPU-hours"
    lines.append(spent)
    for currency, amount in sorted(standing.unconverted.items()):
        lines.append(
            f"Not counted: {money(amount, currency)} (no exchange rate for {currency} in the "
            "policy)"
        )
    if month.start <= now < month.end:
        left = month.hours_left(now)
        projection = standing.projection(now)
        line = (
            f"Now: {dollars(standing.hourly)}/h · {standing.gpus} GPUs · projected month-end "
            f"{dollars(projection)} ({hours(left)} h left)"
        )
        share = standing.percent(projection)
        if share is not None:
            line += f" = {pct(share)} of the budget"
        lines.append(line)
        if standing.unread:
            lines.append("Could not list now: " + ", ".join(standing.unread))
        if standing.unpriced:
            lines.append("No price now for: " + ", ".join(standing.unpriced[:10]))
    lines += _cluster_lines(standing)
    return lines


def _cluster_lines(standing: Standing) -> list[str]:
    if not standing.clusters:
        return ["No usage recorded in this month (only watched projects are recorded)."]
    ordered = sorted(standing.clusters, key=lambda c: (-(c.usd or 0), c.project, c.cluster_id))
    lines = []
    for item in ordered[:MAX_CLUSTER_LINES]:
        usage = item.usage
        cost = (
            dollars(item.usd) if item.usd is not None else money(usage.cost, usage.currency or "")
        )
        line = (
            f"• {item.name} (`{item.cluster_id}`, {item.project}): {cost} · "
            f"{hours(usage.gpu_hours)} GPU-h"
        )
        if usage.estimated_ms:
            line += f" · estimated {hours(Decimal(usage.estimated_ms) / 3_600_000)} h"
        if usage.unpriced_ms:
            line += f" · unpriced {hours(Decimal(usage.unpriced_ms) / 3_600_000)} h"
        lines.append(line)
    rest = ordered[MAX_CLUSTER_LINES:]
    if rest:
        total = sum((c.usd or Decimal(0) for c in rest), Decimal(0))
        lines.append(f"• and {len(rest)} more clusters: {dollars(total)}")
    return lines


class SpendReport:
    """Answers ``/gpu spend`` for the person who asks, in the scopes they may see."""

    def __init__(self, access: Access, clock: Callable[[], datetime]) -> None:
        self.access = access
        self.clock = clock

    async def answer(self, user: str, channel: str, name: str | None, month: str | None) -> Reply:
        policy = self.access.policy
        now = self.clock()
        if name is None:
            scopes = await self._visible(user, channel)
            if not scopes:
                raise Refusal(
                    "you have no projects you can view in this channel.", kind="not_authorized"
                )
        elif name in policy.teams:
            scope = team_scope(policy, name)
            for project in scope.projects:
                await self.access.require(user, project, channel, Role.viewer)
            scopes = [scope]
        else:
            await self.access.require(user, name, channel, Role.viewer)
            scopes = [project_scope(policy, name)]
        blocks: list[list[str]] = []
        for scope in scopes:
            wanted = self._month(scope, month)
            standing = await self.access.spend.standing(scope, now, wanted)
            blocks.append(standing_lines(standing, now))
        return Reply(SpendCard(blocks))

    def _month(self, scope: Scope, text: str | None) -> Month | None:
        if text is None:
            return None
        zone = scope.budget.time_zone if scope.budget else "UTC"
        try:
            return parse_month(text, zone)
        except MonthError as exc:
            raise Refusal(str(exc), kind="usage", field="month") from None

    async def _visible(self, user: str, channel: str) -> list[Scope]:
        policy = self.access.policy
        projects = await self.access.authorizer.projects_for(user, channel)
        scopes = [project_scope(policy, p) for p in projects]
        seen = set(projects)
        scopes += [
            team_scope(policy, team)
            for team, config in sorted(policy.teams.items())
            if set(config.projects) <= seen
        ]
        return scopes
