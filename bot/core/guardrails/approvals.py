"""How many approvals a request needs, from whom, and why (SPEC §8 approval rules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.core.policy import Policy, Role


@dataclass(frozen=True)
class Requirement:
    """What approving one request takes: ``needed`` distinct people other than the
    requester, each in one of ``usergroups`` when there are any; ``kinds`` and ``by_rule``
    say why (the kinds that need approval, under a rule or the default table)."""

    needed: int
    usergroups: tuple[str, ...]
    kinds: tuple[str, ...]
    by_rule: bool
    # SPEC §16: on-call slots (schedule name, max level), what holds when the on-call tool
    # gives no answer, the delay before each next level, the requester on call as one.
    oncall: tuple[tuple[str, int], ...] = ()
    fallback: str = "refuse"
    escalate_after_seconds: float | None = None
    requester_counts_as: int = 0

    # Past a budget's approval_at at request (SPEC §13): one more approver, these figures.
    budget: tuple[str, ...] = ()

    def as_json(self, approvers: Iterable[str] = ()) -> dict[str, object]:
        noted: dict[str, object] = {
            "needed": self.needed,
            "usergroups": list(self.usergroups),
            "kinds": list(self.kinds),
            "by_rule": self.by_rule,
            "by": list(approvers),
        }
        if self.oncall:
            noted["oncall"] = [{"oncall": name, "max_level": top} for name, top in self.oncall]
            noted["fallback"] = self.fallback
        if self.budget:
            noted["budget"] = list(self.budget)
        return noted


def with_budget(
    requirement: Requirement | None, figures: Iterable[str], kinds: Iterable[str]
) -> Requirement:
    """One more approver than ``requirement`` (one, for a change that needed none), for a
    change past a budget's ``approval_at``; ``figures`` say why."""
    lines = tuple(figures)
    if requirement is None:
        return Requirement(1, (), tuple(kinds), by_rule=False, budget=lines)
    return dataclasses.replace(requirement, needed=requirement.needed + 1, budget=lines)


def requirement_of(
    policy: Policy, project: str, kinds: Iterable[str], approvals: Mapping[str, Any] | None
) -> Requirement:
    """What approving a pending request takes now: the policy's requirement in force, and
    the budget's one more approver its request was given (kept in its ``approvals``)."""
    wanted = tuple(kinds)
    budget = tuple(str(line) for line in (approvals or {}).get("budget", []))
    in_force = requirement_in_force(policy, project, wanted)
    if not budget:
        return in_force
    if not policy.requires_approval(project, wanted):  # it needed approval for the budget only
        return Requirement(1, (), wanted, by_rule=False, budget=budget)
    return with_budget(in_force, budget, wanted)


def requirement_in_force(policy: Policy, project: str, kinds: Iterable[str]) -> Requirement:
    """What approving a pending request of these kinds takes under ``policy`` (one approver
    from anyone when the policy no longer asks for approval: it is pending all the same)."""
    wanted = tuple(kinds)
    return requirement_for(policy, project, wanted) or Requirement(1, (), wanted, by_rule=False)


def shown_requirement(approvals: Mapping[str, Any] | None, kinds: Iterable[str]) -> Requirement:
    """The requirement a request's stored ``approvals`` note (what its messages show)."""
    noted = approvals or {}
    return Requirement(
        int(noted.get("needed", 1)),
        tuple(str(g) for g in noted.get("usergroups", [])),
        tuple(str(k) for k in noted.get("kinds", list(kinds))),
        bool(noted.get("by_rule", False)),
        budget=tuple(str(line) for line in noted.get("budget", [])),
    )


def requirement_for(policy: Policy, project: str, kinds: Iterable[str]) -> Requirement | None:
    """None when the change needs no approval; otherwise the first matching rule's
    requirement, or one approver from anyone (the default)."""
    wanted = list(kinds)
    if not policy.requires_approval(project, wanted):
        return None
    risky = tuple(k for k in wanted if k in policy.approval_kinds(project)) or tuple(wanted)
    for rule in policy.approvals.rules:
        if rule.matches(project, wanted):
            delay = rule.escalation_delay
            return Requirement(
                rule.needed,
                tuple(rule.usergroups),
                risky,
                by_rule=True,
                oncall=tuple((slot.oncall, slot.max_level) for slot in rule.oncall),
                fallback=rule.fallback,
                escalate_after_seconds=None if delay is None else delay.total_seconds(),
                requester_counts_as=rule.requester_on_call_counts_as,
            )
    return Requirement(1, (), risky, by_rule=False)


def who_to_ask(
    policy: Policy, requirement: Requirement, *, project: str, channel: str, requester: str
) -> dict[str, list[str]]:
    """Whom an approval prompt mentions, so that Slack notifies them: a rule's user groups,
    or else the users and groups the grants make approvers of the project in the channel
    (never the requester)."""
    if requirement.usergroups:
        return {"users": [], "usergroups": list(requirement.usergroups)}
    users: list[str] = []
    groups: list[str] = []
    for grant in policy.grants:
        if grant.role < Role.approver or not grant.covers(project) or not grant.holds_in(channel):
            continue
        users += [u for u in grant.users if u != requester and u not in users]
        groups += [g for g in grant.usergroups if g not in groups]
    return {"users": users, "usergroups": groups}
