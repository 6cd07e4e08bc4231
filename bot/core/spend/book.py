"""Where a project or a team stands this month: month-to-date from the ledger (in US
dollars by the policy's exchange rates), the hourly rate and GPUs of its clusters now (the
fleet snapshots), and the projection of both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Literal

from bot.core.fleet import FleetSnapshots
from bot.core.policy import Policy
from bot.core.policy.spend import Budget, Quota, team_of
from bot.core.spend.months import Month, month_at, percent_of, projected
from bot.core.spend.rates import gpus_of, observe, usd
from bot.core.store.usage import UsageStore
from bot.core.store.usage_records import UsageSum
from bot.errors import GpuopsError

ScopeKind = Literal["project", "team"]


@dataclass(frozen=True)
class Scope:
    """A project or a team, with its budget and (a team's) quota."""

    kind: ScopeKind
    name: str
    projects: tuple[str, ...]
    budget: Budget | None
    quota: Quota | None = None

    @property
    def title(self) -> str:
        return f"team {self.name}" if self.kind == "team" else self.name


def project_scope(policy: Policy, project: str) -> Scope:
    return Scope("project", project, (project,), policy.project(project).budget)


def team_scope(policy: Policy, team: str) -> Scope:
    config = policy.teams[team]
    return Scope("team", team, tuple(config.projects), config.budget, config.quota)


def scopes_of(policy: Policy, project: str) -> list[Scope]:
    """The project's own scope and its team's (if it is in one)."""
    scopes = [project_scope(policy, project)]
    team = team_of(policy.teams, project)
    if team is not None:
        scopes.append(team_scope(policy, team))
    return scopes


@dataclass(frozen=True)
class ClusterSpend:
    """One cluster's month in a scope."""

    project: str
    cluster_id: str
    name: str
    usage: UsageSum
    usd: Decimal | None  # None: its currency has no exchange rate


@dataclass(frozen=True)
class Standing:
    """A scope's month: spent (USD), of it estimated, what could not be converted, and
    (for the month under way) the rate and GPUs now."""

    scope: Scope
    month: Month
    spent: Decimal
    estimated: Decimal
    gpu_hours: Decimal
    clusters: tuple[ClusterSpend, ...]
    unconverted: dict[str, Decimal] = field(default_factory=dict)
    hourly: Decimal = Decimal(0)
    gpus: int = 0
    unread: tuple[str, ...] = ()  # projects whose clusters could not be listed now
    unpriced: tuple[str, ...] = ()  # clusters (names) with no known price now

    def projection(self, now: datetime, extra_hourly: Decimal = Decimal(0)) -> Decimal:
        return projected(self.spent, self.hourly + extra_hourly, self.month.hours_left(now))

    def percent(self, amount: Decimal) -> Decimal | None:
        budget = self.scope.budget
        return None if budget is None else percent_of(amount, budget.monthly_usd)


class SpendBook:
    """Reads standings from the ledger and the fleet, under the policy in force."""

    def __init__(
        self, usage: UsageStore, fleet: FleetSnapshots, policy: Callable[[], Policy]
    ) -> None:
        self.usage = usage
        self.fleet = fleet
        self.policy = policy

    def month_now(self, scope: Scope, now: datetime) -> Month:
        zone = scope.budget.time_zone if scope.budget else "UTC"
        return month_at(now, zone)

    async def standing(
        self, scope: Scope, now: datetime, month: Month | None = None, *, live: bool = True
    ) -> Standing:
        """The scope's month (default the one under way); with ``live`` and the month under
        way, the rate and GPUs of its clusters now too."""
        policy = self.policy()
        month = month or self.month_now(scope, now)
        rows = await self.usage.by_cluster(scope.projects, month.start, min(month.end, now))
        spent = estimated = Decimal(0)
        gpu_ms = 0
        unconverted: dict[str, Decimal] = {}
        clusters: list[ClusterSpend] = []
        for row in rows:
            dollars = usd(policy, row.cost, row.currency)
            gpu_ms += row.gpu_ms
            if dollars is None:
                key = row.currency or "?"
                unconverted[key] = unconverted.get(key, Decimal(0)) + row.cost
            else:
                spent += dollars
                estimated += usd(policy, row.estimated_cost, row.currency) or Decimal(0)
            clusters.append(
                ClusterSpend(row.project, row.cluster_id, row.cluster_name, row, dollars)
            )
        standing = Standing(
            scope,
            month,
            spent,
            estimated,
            Decimal(gpu_ms) / 3_600_000,
            tuple(clusters),
            unconverted,
        )
        if not live or not month.start <= now < month.end:
            return standing
        return await self._with_fleet(standing, policy)

    async def _with_fleet(self, standing: Standing, policy: Policy) -> Standing:
        hourly = Decimal(0)
        gpus = 0
        unread: list[str] = []
        unpriced: list[str] = []
        for project in standing.scope.projects:
            config = policy.projects.get(project)
            if config is None:
                continue
            try:
                view = await self.fleet.get(project)
            except GpuopsError:  # a provider's failure: said, not raised
                unread.append(project)
                continue
            for summary in view.clusters:
                gpus += gpus_of(summary) or 0
                seen = observe(project, config, summary)
                dollars = None if seen.rate is None else usd(policy, seen.rate, seen.currency)
                if dollars is None:
                    unpriced.append(summary.name)
                else:
                    hourly += dollars
        return Standing(
            standing.scope,
            standing.month,
            standing.spent,
            standing.estimated,
            standing.gpu_hours,
            standing.clusters,
            standing.unconverted,
            hourly,
            gpus,
            tuple(unread),
            tuple(unpriced),
        )
