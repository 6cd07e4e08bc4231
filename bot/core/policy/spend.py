"""The spend keys of the policy file (SPEC §13), validated: ``teams`` (with a team's
``budget`` and ``quota``), a project's ``budget``, the weekly ``digest`` and the
``exchange_rates`` that turn a provider's currency into the budgets' dollars."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from bot.core.policy.guardrails import CurrencyCode, Money, TimeZoneName, Weekday

Percent = Annotated[Decimal, Field(gt=0, le=1000, allow_inf_nan=False)]
_ID = r"[A-Z0-9]+"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    """A calendar month's budget of a project or a team, in US dollars; the bands are
    percentages of it that the projected month-end spend is judged against."""

    monthly_usd: Annotated[Decimal, Field(gt=0, allow_inf_nan=False)]
    warn_at: list[Percent] = Field(default_factory=list)
    approval_at: Percent | None = None
    deny_at: Percent | None = None
    time_zone: TimeZoneName = "UTC"

    @model_validator(mode="after")
    def _bands_in_order(self) -> Self:
        if (
            self.approval_at is not None
            and self.deny_at is not None
            and self.approval_at >= self.deny_at
        ):
            raise PydanticCustomError(
                "budget_bands", "approval_at must be below deny_at (a refusal ends the bands)"
            )
        if len(set(self.warn_at)) != len(self.warn_at):
            raise PydanticCustomError("budget_bands", "warn_at lists a percentage twice")
        return self

    def share(self, pct: Decimal) -> Decimal:
        """``pct`` percent of the monthly budget, in dollars."""
        return self.monthly_usd * pct / 100


class Quota(_Strict):
    """A team's cap on the GPUs of all its projects' clusters together (both providers)."""

    max_gpus: int = Field(ge=1)


class Team(_Strict):
    """A team: its projects (each in one team at most), and for reporting its members and
    Slack user groups."""

    projects: list[str] = Field(min_length=1)
    members: list[Annotated[str, Field(pattern=f"^[UW]{_ID}$")]] = Field(default_factory=list)
    groups: list[Annotated[str, Field(pattern=f"^S{_ID}$")]] = Field(default_factory=list)
    budget: Budget | None = None
    quota: Quota | None = None


class Digest(_Strict):
    """Where and when the weekly spend digest is posted."""

    channel: Annotated[str, Field(pattern=f"^[CG]{_ID}$")]
    weekday: Weekday = "mon"
    hour: int = Field(default=9, ge=0, le=23)
    time_zone: TimeZoneName = "UTC"


ExchangeRates = dict[CurrencyCode, Annotated[Decimal, Field(gt=0, allow_inf_nan=False)]]
UsdAmount = Money


def team_problems(teams: Mapping[str, Team], projects: Iterable[str]) -> list[str]:
    """A line per team naming an unknown project, or a project already in another team."""
    known = set(projects)
    listed = ", ".join(sorted(known))
    problems: list[str] = []
    owner: dict[str, str] = {}
    for name, team in teams.items():
        for project in team.projects:
            if project not in known:
                problems.append(
                    f"teams.{name}.projects: unknown project '{project}' (known: {listed})"
                )
            elif project in owner:
                problems.append(
                    f"teams.{name}.projects: '{project}' is already in team {owner[project]} "
                    "(a project belongs to one team)"
                )
            else:
                owner[project] = name
    return problems


def team_of(teams: Mapping[str, Team], project: str) -> str | None:
    """The team a project belongs to, if any."""
    return next((name for name, team in teams.items() if project in team.projects), None)
