"""Whether a click is an on-call approver's (SPEC §16), judged at the click: who is on call
now on the rule's schedules, up to the level the request has reached (level 1 first, the
next one after each ``escalate_after``; all up to ``max_level`` without it), or in the
rule's user groups. When the on-call tool gives no answer the rule's ``fallback`` holds:
``groups`` (its user groups; with none, whoever the grants make an approver) or
``refuse``; never an approval by someone the rule in force does not make eligible."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from bot.core.authorizer import Authorizer
from bot.core.guardrails.approvals import Requirement
from bot.core.oncall.roster import OnCallMember, OnCallRoster
from bot.providers.oncall import SOURCE_TITLES, OnCallUnavailable

How = Literal["on_call", "group", "fallback_groups", "not_on_call", "fallback_refuse"]


def level_now(requirement: Requirement, opened_at: datetime | None, now: datetime) -> int:
    """The highest escalation level that may approve now."""
    top = max((level for _, level in requirement.oncall), default=1)
    every = requirement.escalate_after_seconds
    if every is None or opened_at is None:
        return top
    waited = max((now - opened_at).total_seconds(), 0.0)
    return min(top, 1 + int(waited // every))


@dataclass(frozen=True)
class OnCallNow:
    """Who may approve as on call now: those within the slots' levels and the level
    reached (``eligible``, Slack users), those on call there with no Slack user
    (``unmapped``, named), or the fault that left the tool without an answer."""

    level: int
    eligible: tuple[OnCallMember, ...] = ()
    unmapped: tuple[OnCallMember, ...] = ()
    fault: OnCallUnavailable | None = None

    @property
    def slack_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.slack_id for m in self.eligible if m.slack_id))

    def member(self, user: str) -> OnCallMember | None:
        return next((m for m in self.eligible if m.slack_id == user), None)

    def as_json(self) -> dict[str, object]:
        """As noted with the request (the prompt shows it)."""
        if self.fault is not None:
            return {"level": self.level, "fault": str(self.fault), "fault_kind": self.fault.fault}
        return {
            "level": self.level,
            "on_call": [
                {"slack": m.slack_id, "level": m.level, "schedule": m.schedule}
                for m in self.eligible
            ],
            "unmapped": [unmapped_words(m) for m in self.unmapped],
        }


def unmapped_name(member: OnCallMember) -> str:
    """``Dave (PagerDuty user PDAVE001)``: how an on-call person with no Slack user is named."""
    person = member.person
    return f"{person.name} ({SOURCE_TITLES[person.source]} user {person.user_id})"


def unmapped_words(member: OnCallMember) -> str:
    """``Dave (PagerDuty user PDAVE001, level 2: no Slack user)``."""
    return f"{unmapped_name(member)[:-1]}, level {member.level}: no Slack user)"


def on_call_words(now: OnCallNow) -> str:
    """``<@U02BOB> (level 1), Dave (PagerDuty user PDAVE001, level 2: no Slack user)``."""
    said = [f"<@{m.slack_id}> (level {m.level})" for m in now.eligible if m.slack_id]
    said += [unmapped_words(m) for m in now.unmapped]
    return ", ".join(said) or "nobody"


@dataclass(frozen=True)
class Verdict:
    """The judgement of one click: allowed or not, how, and the words for it."""

    allowed: bool
    how: How
    text: str
    now: OnCallNow
    mentions: tuple[str, ...] = field(default=())


class OnCallGate:
    """Judges clicks against the on-call slots of the rule in force."""

    def __init__(self, roster: OnCallRoster, authorizer: Authorizer) -> None:
        self.roster = roster
        self.authorizer = authorizer

    async def now(
        self, requirement: Requirement, *, opened_at: datetime | None, now: datetime
    ) -> OnCallNow:
        """Who is on call now within the rule's slots and the level reached."""
        level = level_now(requirement, opened_at, now)
        eligible: list[OnCallMember] = []
        unmapped: list[OnCallMember] = []
        for schedule, top in requirement.oncall:
            try:
                members = await self.roster.on_call(schedule)
            except OnCallUnavailable as fault:
                return OnCallNow(level, fault=fault)
            for member in members:
                if member.level > min(top, level):
                    continue
                (eligible if member.slack_id else unmapped).append(member)
        return OnCallNow(level, tuple(eligible), tuple(unmapped))

    async def judge(
        self,
        user: str,
        requirement: Requirement,
        *,
        doing: str,
        opened_at: datetime | None,
        now: datetime,
        was_on_call: Iterable[str] = (),
    ) -> Verdict:
        """Whether ``user`` (whose role the grants give) may ``doing`` (``approve R-1``)
        under the on-call slots of ``requirement``, now."""
        on_call = await self.now(requirement, opened_at=opened_at, now=now)
        groups = requirement.usergroups
        in_groups = bool(groups) and await self.authorizer.in_any_group(user, groups)
        if on_call.fault is not None:
            return self._fallback(user, requirement, on_call, in_groups, doing)
        member = on_call.member(user)
        if member is not None:
            text = f"on call now on {member.schedule} (level {member.level})"
            return Verdict(True, "on_call", text, on_call)
        if in_groups:
            return Verdict(True, "group", f"in user group {' or '.join(groups)}", on_call)
        who = on_call_words(on_call)
        mentions = on_call.slack_ids
        slots = " or ".join(
            f"{name} (up to level {min(top, on_call.level)})" for name, top in requirement.oncall
        )
        also = f" or be in user group {' or '.join(groups)}" if groups else ""
        if user in set(was_on_call):
            text = (
                f"you were on call when it was requested, but are not now: to {doing} you "
                f"must be on call now on {slots}{also}; on call now: {who}. Nothing was recorded."
            )
        else:
            text = (
                f"to {doing} you must be on call now on {slots}{also}; on call now: {who}. "
                "Nothing was recorded."
            )
        return Verdict(False, "not_on_call", text, on_call, mentions)

    def _fallback(
        self,
        user: str,
        requirement: Requirement,
        on_call: OnCallNow,
        in_groups: bool,
        doing: str,
    ) -> Verdict:
        fault = on_call.fault
        assert fault is not None
        groups = requirement.usergroups
        if requirement.fallback == "groups" and (in_groups or not groups):
            whom = f"user group {' or '.join(groups)}" if groups else "the approvers of the grants"
            text = f"{fault}; the approval rule falls back to {whom}"
            return Verdict(True, "fallback_groups", text, on_call)
        if requirement.fallback == "groups":
            text = (
                f"{fault}; the approval rule falls back to user group {' or '.join(groups)}, "
                f"and you are not in it: you cannot {doing} now. Nothing was recorded."
            )
        else:
            text = (
                f"{fault}; the approval rule's fallback is refuse: nobody can {doing} until "
                "the on-call tool answers. Nothing was recorded."
            )
        return Verdict(False, "fallback_refuse", text, on_call)
