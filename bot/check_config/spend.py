"""check-config's report of the spend keys (SPEC §13): budgets, teams and their quotas,
the digest, and what would make a budget's figures wrong (a project not watched has no
usage recorded; a cost in another currency than USD counts only with an exchange rate)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TextIO

from bot.core.policy import Policy
from bot.core.policy.spend import Budget, team_of


def _bands(budget: Budget) -> str:
    marks = [f"warn {', '.join(f'{p}%' for p in sorted(budget.warn_at))}"] if budget.warn_at else []
    if budget.approval_at is not None:
        marks.append(f"+1 approver {budget.approval_at}%")
    if budget.deny_at is not None:
        marks.append(f"deny {budget.deny_at}%")
    return "; ".join(marks) or "-"


def spend_warnings(policy: Policy) -> list[str]:
    """What would make a budget's figures wrong, one line each."""
    warnings: list[str] = []
    for name, project in sorted(policy.projects.items()):
        team = team_of(policy.teams, name)
        budgeted = project.budget is not None or (
            team is not None and policy.teams[team].budget is not None
        )
        if not budgeted:
            continue
        if project.watch is None:
            warnings.append(f"{name} has a budget but is not watched: no usage of it is recorded")
        table = project.price_table
        if project.descriptor.price_table:
            currency = table.currency if table is not None else None
            if table is None:
                warnings.append(f"{name} has a budget but no prices: its cost is unknown")
        else:
            currency = None  # its plans say; E2E's are in INR
        if currency not in (None, "USD") and currency not in policy.exchange_rates:
            warnings.append(f"{name}'s prices are in {currency}: add exchange_rates.{currency}")
        if currency is None and not project.descriptor.price_table and not policy.exchange_rates:
            warnings.append(
                f"{name}'s prices come from its plans: costs in a currency other than USD "
                "count against a budget only with exchange_rates"
            )
    return warnings


def print_spend(
    policy: Policy,
    out: TextIO,
    table: Callable[[Sequence[str], Sequence[Sequence[str]], TextIO], None],
) -> None:
    budgets = [
        [name, str(p.budget.monthly_usd), _bands(p.budget), p.budget.time_zone]
        for name, p in sorted(policy.projects.items())
        if p.budget is not None
    ] + [
        [f"team {name}", str(t.budget.monthly_usd), _bands(t.budget), t.budget.time_zone]
        for name, t in sorted(policy.teams.items())
        if t.budget is not None
    ]
    print("\nbudgets (per calendar month, USD):", file=out)
    if budgets:
        table(["SCOPE", "MONTHLY USD", "BANDS", "TIME ZONE"], budgets, out)
    else:
        print("  none", file=out)
    if policy.teams:
        print("\nteams:", file=out)
        rows = [
            [name, ", ".join(t.projects), str(t.quota.max_gpus) if t.quota else "-"]
            for name, t in sorted(policy.teams.items())
        ]
        table(["TEAM", "PROJECTS", "MAX GPUS"], rows, out)
    digest = policy.digest
    if digest is not None:
        print(
            f"\ndigest: {digest.channel}, {digest.weekday} {digest.hour:02d}:00 {digest.time_zone}",
            file=out,
        )
    for warning in spend_warnings(policy):
        print(f"  warning: {warning}", file=out)
