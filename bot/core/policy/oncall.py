"""The ``oncall`` key of the policy and the on-call keys of an approval rule (SPEC §16).

```yaml
oncall:
  pagerduty: {token_env: PAGERDUTY_TOKEN, base_url: null, schedules: {platform-primary: PX1}}
  opsgenie: {token_env: OPSGENIE_TOKEN, base_url: null, schedules: {storage: 4f1c…}}
  people: {PX9USER: U02BOB}        # the on-call tool's user id: the Slack user id
  match_by_email: false            # else users.lookupByEmail for those not in people
approvals:
  rules:
    - projects: [together-prod]
      approvers: [{oncall: platform-primary, max_level: 2}]   # one approver per entry
      usergroups: [S0PLATFORM]     # optional: these are eligible too
      escalate_after: 10m          # optional: level 1 first, the next level after each 10m
      fallback: refuse             # the on-call tool unusable: refuse, or groups (the rule's
                                   # usergroups; none: the approvers of the grants)
      requester_on_call_counts_as: 1   # optional: the requester on call counts as one
```
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from bot.config import check_http_url

OnCallSourceName = Literal["pagerduty", "opsgenie"]
_SCHEDULE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_DURATION = re.compile(r"\s*(\d+)\s*([smh])\s*", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600}
_SLACK_USER = re.compile(r"[UW][A-Z0-9]+")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _schedule_name(value: str) -> str:
    if not _SCHEDULE_NAME.fullmatch(value):
        raise PydanticCustomError(
            "schedule_name", "schedule names may use only letters, digits, ., - and _"
        )
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise PydanticCustomError(
            "env_name", "name the environment variable (capitals, digits, _), not the token"
        )
    return value


def _url(value: str) -> str:
    try:
        return check_http_url(value)
    except ValueError as exc:
        raise PydanticCustomError("url", str(exc)) from None


def _slack_user(value: str) -> str:
    if not _SLACK_USER.fullmatch(value):
        raise PydanticCustomError(
            "slack_id",
            "use the Slack user id (U… or W…), not a name or mention: '{value}'",
            {"value": value},
        )
    return value


def parse_duration(value: str) -> timedelta:
    """``10m``, ``90s``, ``1h`` as a timedelta (more than zero), or ValueError."""
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"{value!r} is not a duration like 10m, 90s or 1h")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2).lower()])


def _duration(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as exc:
        raise PydanticCustomError("duration", str(exc)) from None
    return value.strip().lower()


ScheduleName = Annotated[str, AfterValidator(_schedule_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
SourceUrl = Annotated[str, AfterValidator(_url)]
SlackUser = Annotated[str, AfterValidator(_slack_user)]
Duration = Annotated[str, AfterValidator(_duration)]


class OnCallSource(_Strict):
    """One on-call tool: the variable holding its token, its URL, the schedules by name."""

    token_env: EnvName
    base_url: SourceUrl | None = None
    schedules: dict[ScheduleName, str] = Field(min_length=1)


class PagerDutySource(OnCallSource):
    token_env: EnvName = "PAGERDUTY_TOKEN"  # noqa: S105 - the variable's name


class OpsgenieSource(OnCallSource):
    token_env: EnvName = "OPSGENIE_TOKEN"  # noqa: S105 - the variable's name


class OnCallConfig(_Strict):
    """Where on-call schedules come from and how their users are Slack users."""

    pagerduty: PagerDutySource | None = None
    opsgenie: OpsgenieSource | None = None
    people: dict[str, SlackUser] = Field(default_factory=dict)
    match_by_email: bool = False

    @model_validator(mode="after")
    def _names_are_unique(self) -> Self:
        if self.pagerduty is None and self.opsgenie is None:
            raise PydanticCustomError("no_source", "oncall needs pagerduty or opsgenie (or both)")
        both = set(self.sources().get("pagerduty", {})) & set(self.sources().get("opsgenie", {}))
        if both:
            raise PydanticCustomError(
                "schedule_twice",
                "schedule name(s) {names} are in both pagerduty and opsgenie; name each once",
                {"names": ", ".join(sorted(both))},
            )
        return self

    def sources(self) -> dict[OnCallSourceName, dict[str, str]]:
        """The schedules (by name: the tool's schedule id) of each tool configured."""
        found: dict[OnCallSourceName, dict[str, str]] = {}
        if self.pagerduty is not None:
            found["pagerduty"] = dict(self.pagerduty.schedules)
        if self.opsgenie is not None:
            found["opsgenie"] = dict(self.opsgenie.schedules)
        return found

    def source(self, name: OnCallSourceName) -> OnCallSource | None:
        return self.pagerduty if name == "pagerduty" else self.opsgenie

    def schedule(self, name: str) -> tuple[OnCallSourceName, str] | None:
        """The tool and schedule id a schedule name stands for."""
        for source, schedules in self.sources().items():
            if name in schedules:
                return source, schedules[name]
        return None

    @property
    def names(self) -> list[str]:
        return sorted(n for schedules in self.sources().values() for n in schedules)


class OnCallApprover(_Strict):
    """An approver slot: whoever is on call on schedule ``oncall`` at a level up to
    ``max_level`` (1 is the first paged) when they click."""

    oncall: ScheduleName
    max_level: int = Field(default=1, ge=1, le=10)


Fallback = Literal["groups", "refuse"]
