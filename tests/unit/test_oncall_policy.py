"""The policy's on-call keys (SPEC §16): ``oncall`` and an approval rule's on-call
approvers, ``escalate_after``, ``fallback`` and ``requester_on_call_counts_as``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.core.guardrails.describe import _approvals
from bot.core.policy import PolicyError, parse_policy, unmeetable_rules
from bot.core.policy.oncall import parse_duration
from bot.core.policy.sections import lost_sections, where_lost
from tests.support.catalog import CATALOG

BASE = """\
projects:
  together-prod: {provider: together, project_id: p}
grants:
  - {users: [U02BOB], projects: ["*"], role: approver}
"""
ONCALL = """\
oncall:
  pagerduty: {schedules: {platform-primary: PPLATFRM}, base_url: "http://127.0.0.1:9"}
  opsgenie: {schedules: {storage: 4f1c}}
  people: {PBOB0001: U02BOB}
"""
RULE = """\
approvals:
  rules:
    - projects: [together-prod]
      kinds: [scale_down]
"""


def _policy(text: str):  # type: ignore[no-untyped-def]
    return parse_policy(text, Path("policy.yml"), CATALOG)


def _problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        _policy(text)
    return [p.removeprefix("policy.yml: ") for p in caught.value.problems]


def test_a_rule_of_oncall_slots() -> None:
    policy = _policy(
        BASE
        + ONCALL
        + RULE
        + "      approvers: [{oncall: platform-primary, max_level: 2}, {oncall: storage}]\n"
        + "      escalate_after: 10m\n      fallback: groups\n"
        + "      requester_on_call_counts_as: 1\n"
    )
    rule = policy.approvals.rules[0]
    assert rule.needed == 2 and [s.oncall for s in rule.oncall] == ["platform-primary", "storage"]
    assert rule.escalation_delay == timedelta(minutes=10) and rule.top_level == 2
    assert rule.fallback == "groups" and rule.requester_on_call_counts_as == 1
    assert policy.oncall is not None
    assert policy.oncall.schedule("platform-primary") == ("pagerduty", "PPLATFRM")
    assert policy.oncall.schedule("storage") == ("opsgenie", "4f1c")
    assert policy.oncall.pagerduty is not None
    assert policy.oncall.pagerduty.token_env == "PAGERDUTY_TOKEN"
    assert unmeetable_rules(policy) == []  # who is on call is not in the file
    assert (
        "scale_down: 2 approvers from on call on platform-primary up to level 2 or on call "
        "on storage up to level 1 (approval rule)"
    ) in _approvals(policy, "together-prod")


def test_a_count_rule_is_as_before() -> None:
    rule = _policy(BASE + RULE + "      approvers: 2\n").approvals.rules[0]
    assert rule.needed == 2 and rule.oncall == () and rule.fallback == "refuse"


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        (
            "      approvers: [{oncall: platform-primry}]\n",
            "approvals.rules[0].approvers[0].oncall: unknown schedule 'platform-primry' (did "
            "you mean 'platform-primary'?) (oncall schedules: platform-primary, storage)",
        ),
        (
            "      approvers: [{oncall: storage, max_levl: 2}]\n",
            "approvals.rules[0].approvers[0].max_levl: unknown key (allowed: oncall, "
            "max_level); did you mean 'max_level'?",
        ),
        (
            "      approvers: 2\n      fallback: groups\n",
            "approvals.rules[0]: fallback: only for on-call approvers (approvers as a list of "
            "oncall entries)",
        ),
        (
            "      approvers: [{oncall: storage}]\n      requester_on_call_counts_as: 1\n",
            "approvals.rules[0]: requester_on_call_counts_as counts as one approval, never "
            "all: the rule needs at least 2 approvers for it",
        ),
        (
            "      approvers: [{oncall: storage}]\n      escalate_after: 10m\n",
            "approvals.rules[0]: escalate_after adds the next level: give an approver "
            "max_level 2 or more",
        ),
        (
            "      approvers: [{oncall: storage, max_level: 2}]\n      escalate_after: 10 min\n",
            "approvals.rules[0].escalate_after: '10 min' is not a duration like 10m, 90s or 1h",
        ),
        (
            "      approvers: 0\n",
            "approvals.rules[0].approvers: Input should be greater than or equal to 1",
        ),
        (
            "      approvers: [{oncall: storage}]\n      fallback: maybe\n",
            "approvals.rules[0].fallback: Input should be 'groups' or 'refuse'",
        ),
    ],
)
def test_a_broken_rule_is_named(rule: str, problem: str) -> None:
    assert _problems(BASE + ONCALL + RULE + rule) == [problem]


def test_a_schedule_without_an_oncall_section() -> None:
    assert _problems(BASE + RULE + "      approvers: [{oncall: night}]\n") == [
        "approvals.rules[0].approvers[0].oncall: unknown schedule 'night' (no oncall section)"
    ]


@pytest.mark.parametrize(
    ("oncall", "problem"),
    [
        ("oncall: {people: {}}\n", "oncall: oncall needs pagerduty or opsgenie (or both)"),
        (
            "oncall:\n  pagerduty: {schedules: {a: X}}\n  opsgenie: {schedules: {a: Y}}\n",
            "oncall: schedule name(s) a are in both pagerduty and opsgenie; name each once",
        ),
        (
            "oncall:\n  pagerduty: {schedules: {a: X}}\n  people: {P1: bob}\n",
            "oncall.people.P1: use the Slack user id (U… or W…), not a name or mention: 'bob'",
        ),
        (
            "oncall:\n  pagerduty: {schedules: {a: X}, token_env: pd-abc123}\n",
            "oncall.pagerduty.token_env: name the environment variable (capitals, digits, _), "
            "not the token",
        ),
        (
            "oncall:\n  pagerduty: {schedules: {a: X}, tokn_env: X}\n",
            "oncall.pagerduty.tokn_env: unknown key (allowed: token_env, base_url, schedules); "
            "did you mean 'token_env'?",
        ),
        (
            "oncall:\n  pagerduty: {schedules: {}}\n",
            "oncall.pagerduty.schedules: Dictionary should have at least 1 item after "
            "validation, not 0",
        ),
    ],
)
def test_a_broken_oncall_section_is_named(oncall: str, problem: str) -> None:
    assert _problems(BASE + oncall) == [problem]


def test_a_reload_that_drops_oncall_is_a_loss() -> None:
    rule = RULE + "      approvers: [{oncall: storage}]\n"
    in_force = _policy(BASE + ONCALL + rule)
    cut = _policy(BASE + RULE + "      approvers: 1\n")
    assert "oncall" in lost_sections(in_force, cut)
    assert where_lost(in_force, "oncall") == ["together-prod"]


def test_durations() -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1H") == timedelta(hours=1)
    for bad in ("0m", "10", "m", "1d"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)
