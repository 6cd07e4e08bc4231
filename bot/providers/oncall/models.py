"""The documented answers of the two on-call APIs gpuops reads (SPEC §16), as pydantic
models, and what both come down to: who is on call, at which level.

- PagerDuty REST API v2, ``GET /oncalls`` (``listOnCalls``): ``{"oncalls": [Oncall], "limit",
  "offset", "more", "total"}``; each ``Oncall`` has ``user`` (a reference, or the full user
  with ``email`` under ``include[]=users``), ``schedule`` (null for a direct user target),
  ``escalation_policy``, ``escalation_level``, ``start`` and ``end``
  (tests/specs/pagerduty-oncalls.openapi.json).
- Opsgenie ``GET /v2/schedules/{identifier}/on-calls`` (``getOnCalls``): ``{"data":
  {"_parent": ScheduleMeta, "onCallParticipants": [Participant]}, "took", "requestId"}``;
  a participant is a ``user`` (``name`` is the username, an e-mail address), a ``team`` or an
  ``escalation``, the latter two with their own ``onCallParticipants``
  (tests/specs/opsgenie-who-is-on-call.swagger.json).

Unknown fields are ignored: both APIs add fields over time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Source = Literal["pagerduty", "opsgenie"]
SOURCE_TITLES: dict[Source, str] = {"pagerduty": "PagerDuty", "opsgenie": "Opsgenie"}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


# --- PagerDuty --------------------------------------------------------------------------


class PagerDutyUser(_Lenient):
    """A ``UserReference`` (``id``, ``type``, ``summary``), or the full ``User`` that
    ``include[]=users`` puts in its place (with ``name`` and ``email``)."""

    id: str
    type: str = "user_reference"
    summary: str | None = None
    name: str | None = None
    email: str | None = None


class PagerDutyReference(_Lenient):
    id: str
    type: str | None = None
    summary: str | None = None


class PagerDutyOncall(_Lenient):
    user: PagerDutyUser
    schedule: PagerDutyReference | None = None
    escalation_policy: PagerDutyReference | None = None
    escalation_level: int = Field(ge=1)
    start: datetime | None = None
    end: datetime | None = None


class PagerDutyOncalls(_Lenient):
    """One page of ``GET /oncalls``."""

    oncalls: list[PagerDutyOncall]
    limit: int | None = None
    offset: int | None = None
    more: bool = False
    total: int | None = None


# --- Opsgenie ---------------------------------------------------------------------------


class OpsgenieParticipant(_Lenient):
    id: str | None = None
    name: str | None = None
    type: str
    on_call_participants: list[OpsgenieParticipant] = Field(
        default_factory=list, alias="onCallParticipants"
    )


class OpsgenieScheduleMeta(_Lenient):
    id: str | None = None
    name: str | None = None
    enabled: bool | None = None


class OpsgenieOnCall(_Lenient):
    parent: OpsgenieScheduleMeta | None = Field(default=None, alias="_parent")
    on_call_participants: list[OpsgenieParticipant] = Field(
        default_factory=list, alias="onCallParticipants"
    )


class OpsgenieOnCallResponse(_Lenient):
    data: OpsgenieOnCall
    took: float | None = None
    request_id: str | None = Field(default=None, alias="requestId")


# --- what both come down to --------------------------------------------------------------


@dataclass(frozen=True)
class OnCallPerson:
    """Someone on call now on one schedule: the on-call tool's user id and name, their
    e-mail address when the answer carries it, and the escalation level (1 is the first
    paged; an Opsgenie schedule's participants are all level 1)."""

    source: Source
    user_id: str
    name: str
    email: str | None
    level: int


def pagerduty_people(page: PagerDutyOncalls) -> list[OnCallPerson]:
    """The on-call users of a page, the lowest level of each user kept."""
    people = [
        OnCallPerson(
            "pagerduty",
            entry.user.id,
            entry.user.name or entry.user.summary or entry.user.id,
            entry.user.email,
            entry.escalation_level,
        )
        for entry in page.oncalls
    ]
    return lowest_levels(people)


def opsgenie_people(answer: OpsgenieOnCallResponse) -> list[OnCallPerson]:
    """The users among a schedule's participants (inside teams and escalations too), each
    at level 1: an Opsgenie schedule has no escalation levels."""
    people: list[OnCallPerson] = []

    def walk(participants: list[OpsgenieParticipant]) -> None:
        for one in participants:
            if one.type == "user" and one.id:
                name = one.name or one.id
                email = name if "@" in name else None
                people.append(OnCallPerson("opsgenie", one.id, name, email, 1))
            walk(one.on_call_participants)

    walk(answer.data.on_call_participants)
    return lowest_levels(people)


def lowest_levels(people: list[OnCallPerson]) -> list[OnCallPerson]:
    """Each user once, at the lowest level they are on call, in the order first seen."""
    kept: dict[str, OnCallPerson] = {}
    for person in people:
        held = kept.get(person.user_id)
        if held is None or person.level < held.level:
            kept[person.user_id] = person
    return sorted(kept.values(), key=lambda p: p.level)
