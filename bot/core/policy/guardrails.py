"""The guardrail keys of the policy file (SPEC §8), validated: ``limits`` and ``prices`` of
a project, ``approvals.rules`` and ``freezes``."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Literal, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from bot.core.policy.oncall import Duration, Fallback, OnCallApprover, parse_duration

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])|24:00")
_CURRENCY = re.compile(r"[A-Z]{3}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _clock(value: str) -> str:
    if not _CLOCK.fullmatch(value):
        raise PydanticCustomError("clock", "use HH:MM from 00:00 to 24:00, e.g. '18:30'")
    return value


def _timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise PydanticCustomError(
            "timezone",
            "unknown time zone '{tz}'; use an IANA name such as Europe/Berlin",
            {"tz": value},
        ) from None
    return value


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise PydanticCustomError("naive_time", "give the time zone, e.g. 2026-12-24T00:00:00Z")
    return value.astimezone(UTC)


def _currency(value: str) -> str:
    if not _CURRENCY.fullmatch(value):
        raise PydanticCustomError("currency", "use a three-letter currency code such as USD")
    return value


Clock = Annotated[str, AfterValidator(_clock)]
TimeZoneName = Annotated[str, AfterValidator(_timezone)]
AwareTime = Annotated[datetime, AfterValidator(_aware)]
CurrencyCode = Annotated[str, AfterValidator(_currency)]
Money = Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]


class Limits(_Strict):
    """Hard limits on one project's changes; nobody overrides them but the policy."""

    max_gpus: int | None = Field(default=None, ge=1)
    max_nodes: int | None = Field(default=None, ge=1)
    max_hourly_increase: Money | None = None


class Prices(_Strict):
    """A dated table of Together prices per GPU-hour, by GPU type (Together has no price
    API)."""

    currency: CurrencyCode = "USD"
    as_of: date
    per_gpu_hour: dict[str, Money] = Field(min_length=1)


class ApprovalRule(BaseModel):
    """How many distinct people (none the requester), and from which user groups or
    on-call schedules (SPEC §16), must approve a matching request that needs approval:
    ``approvers`` is a count, or a list of on-call slots (one approver each)."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # "approvers" only, never "entries"

    projects: list[str] = Field(min_length=1)
    kinds: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    # Written ``approvers``; read as ``approvers`` (the count) and ``oncall`` (the slots).
    entries: (
        Annotated[int, Field(ge=1, le=10)]
        | Annotated[list[OnCallApprover], Field(min_length=1, max_length=10)]
    ) = Field(default=1, alias="approvers")
    usergroups: list[str] = Field(default_factory=list)
    # SPEC §16, for on-call approvers only: the next level after each ``escalate_after``;
    # what holds while the on-call tool gives no answer; the requester on call as one.
    escalate_after: Duration | None = None
    fallback: Fallback = "refuse"
    requester_on_call_counts_as: Literal[0, 1] = 0

    @model_validator(mode="after")
    def _oncall_keys_need_oncall_approvers(self) -> Self:
        said = self.model_fields_set & {"escalate_after", "fallback", "requester_on_call_counts_as"}
        if said and not self.oncall:
            raise PydanticCustomError(
                "oncall_keys",
                "{keys}: only for on-call approvers (approvers as a list of oncall entries)",
                {"keys": ", ".join(sorted(said))},
            )
        if self.requester_on_call_counts_as and self.needed < 2:
            raise PydanticCustomError(
                "counts_as_all",
                "requester_on_call_counts_as counts as one approval, never all: the rule "
                "needs at least 2 approvers for it",
            )
        if self.escalate_after is not None and self.top_level < 2:
            raise PydanticCustomError(
                "nothing_to_escalate",
                "escalate_after adds the next level: give an approver max_level 2 or more",
            )
        return self

    @property
    def approvers(self) -> int:
        """How many distinct approvers the rule needs."""
        return self.entries if isinstance(self.entries, int) else len(self.entries)

    @property
    def needed(self) -> int:
        return self.approvers

    @property
    def oncall(self) -> tuple[OnCallApprover, ...]:
        """The rule's on-call slots (none for a rule of a count)."""
        return () if isinstance(self.entries, int) else tuple(self.entries)

    @property
    def escalation_delay(self) -> timedelta | None:
        return None if self.escalate_after is None else parse_duration(self.escalate_after)

    @property
    def top_level(self) -> int:
        return max((slot.max_level for slot in self.oncall), default=0)

    def matches(self, project: str, kinds: list[str]) -> bool:
        if "*" not in self.projects and project not in self.projects:
            return False
        return "*" in self.kinds or any(kind in self.kinds for kind in kinds)


class WeeklyWindow(_Strict):
    """The same hours on some days of every week, in a time zone ("24:00" ends the day;
    a ``to`` before ``from`` runs past midnight)."""

    days: list[Weekday] = Field(min_length=1)
    start: Clock = Field(alias="from")
    end: Clock = Field(alias="to")
    timezone: TimeZoneName = "UTC"

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if self.start == self.end or (self.start == "00:00" and self.end == "00:00"):
            raise PydanticCustomError("empty_window", "from and to must differ")
        return self


class Freeze(_Strict):
    """A change freeze: an absolute window (``from``/``to``) or a weekly one."""

    name: str = Field(min_length=1, max_length=80)
    projects: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    kinds: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    start: AwareTime | None = Field(default=None, alias="from")
    end: AwareTime | None = Field(default=None, alias="to")
    weekly: WeeklyWindow | None = None

    @model_validator(mode="after")
    def _one_window(self) -> Self:
        absolute = self.start is not None or self.end is not None
        if absolute == (self.weekly is not None):
            raise PydanticCustomError(
                "freeze_window", "a freeze needs either from and to, or weekly (not both)"
            )
        if absolute and (self.start is None or self.end is None or self.end <= self.start):
            raise PydanticCustomError("freeze_window", "from and to are both needed, from < to")
        return self

    def covers_project(self, project: str) -> bool:
        return "*" in self.projects or project in self.projects

    def covers(self, project: str, kinds: list[str]) -> bool:
        if not self.covers_project(project):
            return False
        return "*" in self.kinds or any(kind in self.kinds for kind in kinds)
