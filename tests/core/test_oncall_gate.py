"""Who is on call now and whether a click is an eligible on-call approver's (SPEC §16):
the roster over real HTTP against the PagerDuty and Opsgenie simulators, its ≤ 60 s
cache, the people table, e-mail mapping and unmapped people, the levels reached with
``escalate_after``, and each fault with the rule's fallback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.core.authorizer import Authorizer
from bot.core.guardrails.approvals import requirement_for
from bot.core.oncall import (
    DirectoryError,
    OnCallClients,
    OnCallGate,
    OnCallRoster,
    level_now,
    on_call_words,
)
from bot.core.oncall.report import oncall_report
from bot.core.policy import PolicyHolder, parse_policy
from bot.local.simulators.base import Fault
from bot.local.simulators.oncall import OpsgenieSimulator, PagerDutySimulator
from tests.support.catalog import CATALOG

NIGHT = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)  # Bob on call (level 1), Alice behind (2)
TOKENS = {"PAGERDUTY_TOKEN": "pd-gate-token-1", "OPSGENIE_TOKEN": "og-gate-token-1"}


def _policy_text(
    *, people: str = "{PBOB0001: U02BOB, PALICE01: U01ALICE}", rule: str = "", extra: str = ""
) -> str:
    return f"""\
projects:
  together-prod: {{provider: together, project_id: p}}
grants:
  - {{users: [U01ALICE, U02BOB, U03CAROL], projects: ["*"], role: approver}}
oncall:
  pagerduty: {{schedules: {{platform-primary: PPLATFRM}}}}
  opsgenie: {{schedules: {{storage: PPLATFRM}}}}
  people: {people}
{extra}approvals:
  rules:
    - projects: [together-prod]
      kinds: [scale_down]
      approvers: [{{oncall: platform-primary, max_level: 2}}]
{rule}"""


class Groups:
    def __init__(self, members: dict[str, frozenset[str]]) -> None:
        self.members_of = members

    async def members(self, usergroup_id: str) -> frozenset[str]:
        return self.members_of.get(usergroup_id, frozenset())

    def cached(self, usergroup_id: str) -> frozenset[str] | None:
        return self.members_of.get(usergroup_id, frozenset())


class Directory:
    def __init__(self, known: dict[str, str], *, broken: bool = False) -> None:
        self.known = known
        self.broken = broken
        self.asked: list[str] = []

    async def user_by_email(self, email: str) -> str | None:
        self.asked.append(email)
        if self.broken:
            raise DirectoryError("missing_scope")
        return self.known.get(email)


@pytest.fixture
async def pd() -> AsyncIterator[PagerDutySimulator]:
    sim = PagerDutySimulator(TOKENS["PAGERDUTY_TOKEN"], now=NIGHT)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def og() -> AsyncIterator[OpsgenieSimulator]:
    sim = OpsgenieSimulator(TOKENS["OPSGENIE_TOKEN"], now=NIGHT)
    await sim.start()
    yield sim
    await sim.stop()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _gate(
    text: str,
    pd: PagerDutySimulator,
    og: OpsgenieSimulator,
    *,
    directory: Directory | None = None,
    groups: dict[str, frozenset[str]] | None = None,
    clock: Clock | None = None,
    deadline: float = 1.0,
) -> tuple[OnCallGate, PolicyHolder]:
    holder = PolicyHolder(parse_policy(text, Path("policy.yml"), CATALOG))
    clients = OnCallClients(
        TOKENS.get, {"pagerduty": pd.base_url, "opsgenie": og.base_url}, deadline=deadline
    )
    roster = OnCallRoster(holder, clients, directory, monotonic=clock or Clock())
    return OnCallGate(roster, Authorizer(holder, Groups(groups or {}))), holder


def _requirement(holder: PolicyHolder):  # type: ignore[no-untyped-def]
    found = requirement_for(holder.current, "together-prod", ["scale_down"])
    assert found is not None
    return found


async def test_the_on_call_approver_is_eligible_and_the_next_is_not(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    gate, holder = _gate(_policy_text(), pd, og)
    requirement = _requirement(holder)
    assert requirement.oncall == (("platform-primary", 2),) and requirement.needed == 1
    bob = await gate.judge("U02BOB", requirement, doing="approve R-1", opened_at=NIGHT, now=NIGHT)
    assert (bob.allowed, bob.how, bob.text) == (
        True,
        "on_call",
        "on call now on platform-primary (level 1)",
    )
    alice = await gate.judge(
        "U01ALICE", requirement, doing="approve R-1", opened_at=NIGHT, now=NIGHT
    )
    assert alice.allowed  # level 2 is within max_level and there is no escalate_after
    carol = await gate.judge(
        "U03CAROL", requirement, doing="approve R-1", opened_at=NIGHT, now=NIGHT
    )
    assert not carol.allowed and carol.how == "not_on_call"
    assert carol.text == (
        "to approve R-1 you must be on call now on platform-primary (up to level 2); on call "
        "now: <@U02BOB> (level 1), <@U01ALICE> (level 2). Nothing was recorded."
    )
    assert carol.mentions == ("U02BOB", "U01ALICE")


async def test_the_rotation_between_request_and_click_in_both_directions(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    clock = Clock()
    gate, holder = _gate(_policy_text(), pd, og, clock=clock)
    requirement = _requirement(holder)
    opened = await gate.now(requirement, opened_at=NIGHT, now=NIGHT)
    assert opened.slack_ids == ("U02BOB", "U01ALICE")
    pd.advance(10 * 3600)  # 13:00: Carol's shift; Bob is off
    cached = await gate.judge(
        "U02BOB", requirement, doing="approve R-1", opened_at=NIGHT, now=NIGHT
    )
    assert cached.allowed  # the answer is at most 60 s old: still Bob's
    clock.t += 61
    late = await gate.judge(
        "U02BOB",
        requirement,
        doing="approve R-1",
        opened_at=NIGHT,
        now=NIGHT,
        was_on_call=opened.slack_ids,
    )
    assert not late.allowed
    assert late.text.startswith("you were on call when it was requested, but are not now:")
    assert "on call now: PCAROL01" not in late.text  # Carol is unmapped: named, not dropped
    assert "Carol (PagerDuty user PCAROL01, level 1: no Slack user)" in late.text
    assert len(pd.calls("oncalls")) == 2


async def test_someone_who_came_on_call_after_the_request_is_eligible(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    clock = Clock()
    people = "{PBOB0001: U02BOB, PCAROL01: U03CAROL}"
    gate, holder = _gate(_policy_text(people=people), pd, og, clock=clock)
    requirement = _requirement(holder)
    before = await gate.judge(
        "U03CAROL", requirement, doing="approve R-2", opened_at=NIGHT, now=NIGHT
    )
    assert not before.allowed
    pd.advance(10 * 3600)
    clock.t += 61
    after = await gate.judge(
        "U03CAROL", requirement, doing="approve R-2", opened_at=NIGHT, now=NIGHT
    )
    assert after.allowed and after.text == "on call now on platform-primary (level 1)"


async def test_levels_are_added_after_escalate_after(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    gate, holder = _gate(_policy_text(rule="      escalate_after: 10m\n"), pd, og)
    requirement = _requirement(holder)
    assert level_now(requirement, NIGHT, NIGHT + timedelta(minutes=9)) == 1
    assert level_now(requirement, NIGHT, NIGHT + timedelta(minutes=10)) == 2
    assert level_now(requirement, NIGHT, NIGHT + timedelta(hours=5)) == 2  # max_level
    early = await gate.judge(
        "U01ALICE", requirement, doing="approve R-3", opened_at=NIGHT, now=NIGHT
    )
    assert not early.allowed and "platform-primary (up to level 1)" in early.text
    later = NIGHT + timedelta(minutes=10)
    escalated = await gate.judge(
        "U01ALICE", requirement, doing="approve R-3", opened_at=NIGHT, now=later
    )
    assert escalated.allowed and escalated.text == "on call now on platform-primary (level 2)"


async def test_mapping_by_email_and_an_unmapped_person(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    directory = Directory({"bob@example.com": "U02BOB"})
    gate, holder = _gate(
        _policy_text(people="{}", extra="  match_by_email: true\n"), pd, og, directory=directory
    )
    now = await gate.now(_requirement(holder), opened_at=NIGHT, now=NIGHT)
    assert [(m.slack_id, m.mapping) for m in now.eligible] == [("U02BOB", "email")]
    assert [(m.person.user_id, m.mapping) for m in now.unmapped] == [("PALICE01", "unmapped")]
    assert on_call_words(now) == (
        "<@U02BOB> (level 1), Alice (PagerDuty user PALICE01, level 2: no Slack user)"
    )
    assert directory.asked == ["bob@example.com", "alice@example.com"]
    without = Directory({"bob@example.com": "U02BOB"})
    gate, holder = _gate(_policy_text(people="{}"), pd, og, directory=without)
    assert (await gate.now(_requirement(holder), opened_at=NIGHT, now=NIGHT)).eligible == ()
    assert without.asked == []  # match_by_email is off: Slack is never asked


async def test_a_directory_fault_leaves_people_unmapped_not_dropped(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    gate, holder = _gate(
        _policy_text(people="{}", extra="  match_by_email: true\n"),
        pd,
        og,
        directory=Directory({}, broken=True),
    )
    now = await gate.now(_requirement(holder), opened_at=NIGHT, now=NIGHT)
    assert now.eligible == () and len(now.unmapped) == 2


async def test_opsgenie_schedules_are_level_one(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    text = _policy_text().replace("platform-primary, max_level: 2", "storage, max_level: 2")
    gate, holder = _gate(text, pd, og)
    now = await gate.now(_requirement(holder), opened_at=NIGHT, now=NIGHT)
    assert [(m.slack_id, m.level) for m in now.eligible] == [("U02BOB", 1)]
    assert og.calls("on-calls")[0].headers["authorization"] == "GenieKey og-gate-token-1"


FAULTS = [
    ({"kind": "latency", "seconds": 3}, "PagerDuty did not answer within 0.5 s"),
    ({"kind": "rate_limit", "retry_after": 30}, "PagerDuty is rate limiting gpuops (429"),
    ({"kind": "server_error", "status": 502}, "PagerDuty answered 502"),
]


@pytest.mark.parametrize(("fault", "said"), FAULTS)
async def test_a_fault_with_fallback_refuse_refuses_everyone(
    fault: dict[str, object], said: str, pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    gate, holder = _gate(_policy_text(), pd, og, deadline=0.5)
    pd.faults.add(Fault.model_validate(fault))
    verdict = await gate.judge(
        "U02BOB", _requirement(holder), doing="approve R-4", opened_at=NIGHT, now=NIGHT
    )
    assert not verdict.allowed and verdict.how == "fallback_refuse"
    assert verdict.text.startswith(f"PagerDuty schedule PPLATFRM: {said}")
    assert "the approval rule's fallback is refuse: nobody can approve R-4" in verdict.text
    assert TOKENS["PAGERDUTY_TOKEN"] not in verdict.text


async def test_a_fault_with_fallback_groups(pd: PagerDutySimulator, og: OpsgenieSimulator) -> None:
    rule = "      usergroups: [S0PLATFORM]\n      fallback: groups\n"
    groups = {"S0PLATFORM": frozenset({"U03CAROL"})}
    gate, holder = _gate(_policy_text(rule=rule), pd, og, groups=groups)
    await pd.stop()  # unreachable
    requirement = _requirement(holder)
    carol = await gate.judge(
        "U03CAROL", requirement, doing="approve R-5", opened_at=NIGHT, now=NIGHT
    )
    assert carol.allowed and carol.how == "fallback_groups"
    assert carol.text == (
        "PagerDuty schedule PPLATFRM: PagerDuty could not be reached (ConnectError); the "
        "approval rule falls back to user group S0PLATFORM"
    )
    bob = await gate.judge("U02BOB", requirement, doing="approve R-5", opened_at=NIGHT, now=NIGHT)
    assert not bob.allowed  # on call, maybe, but nobody can tell: the groups hold
    assert "falls back to user group S0PLATFORM, and you are not in it" in bob.text


async def test_the_group_of_the_rule_is_eligible_beside_the_on_call(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    rule = "      usergroups: [S0PLATFORM]\n"
    groups = {"S0PLATFORM": frozenset({"U03CAROL"})}
    gate, holder = _gate(_policy_text(rule=rule), pd, og, groups=groups)
    carol = await gate.judge(
        "U03CAROL", _requirement(holder), doing="approve R-6", opened_at=NIGHT, now=NIGHT
    )
    assert carol.allowed and carol.how == "group"


async def test_a_missing_token_is_a_fault_not_a_crash(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    holder = PolicyHolder(parse_policy(_policy_text(), Path("policy.yml"), CATALOG))
    roster = OnCallRoster(holder, OnCallClients(lambda name: None, {"pagerduty": pd.base_url}))
    gate = OnCallGate(roster, Authorizer(holder, Groups({})))
    verdict = await gate.judge(
        "U02BOB", _requirement(holder), doing="approve R-7", opened_at=NIGHT, now=NIGHT
    )
    assert not verdict.allowed
    assert verdict.text.startswith("PagerDuty schedule PPLATFRM: PAGERDUTY_TOKEN is not set")


async def test_the_online_report_names_each_mapping_and_the_unmapped(
    pd: PagerDutySimulator, og: OpsgenieSimulator
) -> None:
    directory = Directory({"alice@example.com": "U01ALICE"})
    gate, _ = _gate(
        _policy_text(people="{PBOB0001: U02BOB}", extra="  match_by_email: true\n"),
        pd,
        og,
        directory=directory,
    )
    pd.advance(12 * 3600)  # 15:00: Carol, unmapped, is on call at level 1
    lines = [(line.level, line.text) for line in await oncall_report(gate.roster)]
    where = "oncall platform-primary (PagerDuty schedule PPLATFRM)"
    assert lines == [
        ("ok", f"{where}: 2 on call now"),
        (
            "warning",
            f"{where}: Carol (PagerDuty user PCAROL01), level 1: no Slack user (not in "
            "people, no Slack user with their e-mail)",
        ),
        ("ok", f"{where}: Alice (PagerDuty user PALICE01), level 2 → <@U01ALICE> (by e-mail)"),
        ("ok", "oncall storage (Opsgenie schedule PPLATFRM): 1 on call now"),
        (
            "ok",
            "oncall storage (Opsgenie schedule PPLATFRM): bob@example.com (Opsgenie user "
            "PBOB0001), level 1 → <@U02BOB> (by people)",
        ),
    ]
    await og.stop()
    gate.roster.forget()
    lines = [(line.level, line.text) for line in await oncall_report(gate.roster)]
    assert lines[-1][0] == "error" and "Opsgenie could not be reached" in lines[-1][1]
