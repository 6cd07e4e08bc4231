"""The guardrail keys of the policy (SPEC §8) and their pure parts: validation that names
the key, freeze windows (absolute, weekly in a time zone, overnight, merged weekends, DST),
limits, prices and the approval requirement."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from bot.core.guardrails.approvals import Requirement, requirement_for, who_to_ask
from bot.core.guardrails.checks import ChangeSize, limit_refusal
from bot.core.guardrails.describe import describe_project
from bot.core.guardrails.freezes import active_freeze, freezes_soon, frozen_text
from bot.core.policy import PolicyError, Role
from bot.core.policy.guardrails import Freeze, Limits
from tests.support.catalog import load_policy, policy_model

TOGETHER = "projects:\n  together-prod:\n    provider: together\n"


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            TOGETHER + "    limits: {max_gpu: 8}\n",
            "projects.together-prod.limits.max_gpu: unknown key (allowed: max_gpus, max_nodes",
        ),
        (TOGETHER + "    limits: {max_gpus: 0}\n", "projects.together-prod.limits.max_gpus"),
        (TOGETHER + "    limits: {max_nodes: 2}\n", "max_nodes applies to E2E projects"),
        (
            TOGETHER + "    prices: {currency: usd, as_of: 2026-11-01, per_gpu_hour: {H100: 2}}\n",
            "prices.currency: use a three-letter currency code",
        ),
        (
            TOGETHER + "    prices: {as_of: yesterday, per_gpu_hour: {H100: 2}}\n",
            "prices.as_of",
        ),
        (
            TOGETHER + "approvals:\n  rules:\n    - {projects: [nope], approvers: 2}\n",
            "approvals.rules[0].projects: unknown project 'nope'",
        ),
        (
            TOGETHER + "approvals:\n  rules:\n    - {projects: ['*'], kinds: [reboot]}\n",
            "approvals.rules[0].kinds: unknown change kind 'reboot'",
        ),
        (
            TOGETHER + "approvals:\n  rules:\n    - {projects: ['*'], approverz: 2}\n",
            "approvals.rules[0].approverz: unknown key (allowed: projects, kinds, approvers",
        ),
        (
            TOGETHER + "freezes:\n  - {name: x, from: '2026-12-24T00:00:00Z'}\n",
            "from and to are both needed",
        ),
        (
            TOGETHER + "freezes:\n  - {name: x, from: '2026-12-24T00:00:00'"
            ", to: '2026-12-25T00:00:00Z'}\n",
            "give the time zone",
        ),
        (
            TOGETHER + "freezes:\n  - name: x\n    weekly: {days: [sat], from: '25:00', "
            "to: '24:00'}\n",
            "freezes[0].weekly.from: use HH:MM",
        ),
        (
            TOGETHER + "freezes:\n  - name: x\n    weekly: {days: [sat], from: '00:00', "
            "to: '24:00', timezone: Mars/Olympus}\n",
            "unknown time zone 'Mars/Olympus'",
        ),
        (
            TOGETHER + "freezes:\n  - name: x\n    weekly: {days: [caturday], from: '00:00', "
            "to: '24:00'}\n",
            "freezes[0].weekly.days[0]",
        ),
    ],
)
def test_a_bad_guardrail_key_is_named(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _error(tmp_path, text)


def _freeze(**fields: object) -> Freeze:
    return Freeze.model_validate({"name": "f", **fields})


WEEKEND = _freeze(
    name="weekend",
    weekly={"days": ["sat", "sun"], "from": "00:00", "to": "24:00", "timezone": "Europe/Berlin"},
)


def test_a_weekend_in_berlin_is_one_window_in_utc() -> None:
    window = active_freeze([WEEKEND], "p", ["scale_up"], datetime(2026, 12, 5, 12, tzinfo=UTC))
    assert window is not None
    assert window.start == datetime(2026, 12, 4, 23, tzinfo=UTC)
    assert window.end == datetime(2026, 12, 6, 23, tzinfo=UTC)
    assert frozen_text("p", window) == "p is frozen (weekend) until 2026-12-06 23:00 UTC"
    assert active_freeze([WEEKEND], "p", ["x"], datetime(2026, 12, 4, 22, 59, tzinfo=UTC)) is None
    assert active_freeze([WEEKEND], "p", ["x"], datetime(2026, 12, 6, 23, tzinfo=UTC)) is None


def test_summer_time_moves_the_window_in_utc() -> None:
    window = active_freeze([WEEKEND], "p", ["x"], datetime(2026, 7, 4, 12, tzinfo=UTC))
    assert window is not None and window.start == datetime(2026, 7, 3, 22, tzinfo=UTC)


def test_an_overnight_window_runs_past_midnight() -> None:
    nights = _freeze(weekly={"days": ["fri"], "from": "22:00", "to": "06:00"})
    friday_night = datetime(2026, 12, 5, 3, tzinfo=UTC)  # Saturday 03:00, from Friday 22:00
    window = active_freeze([nights], "p", ["x"], friday_night)
    assert window is not None and window.end == datetime(2026, 12, 5, 6, tzinfo=UTC)


def test_kinds_and_projects_narrow_a_freeze() -> None:
    freeze = _freeze(
        projects=["a"],
        kinds=["decommission"],
        **{"from": "2026-01-01T00:00:00Z"},
        to="2027-01-01T00:00:00Z",
    )
    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert active_freeze([freeze], "a", ["decommission"], now) is not None
    assert active_freeze([freeze], "a", ["scale_up"], now) is None
    assert active_freeze([freeze], "b", ["decommission"], now) is None
    assert [w.freeze.name for w in freezes_soon([freeze], "a", now)] == ["f"]


def test_freezes_soon_lists_only_the_next_seven_days() -> None:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)  # a Tuesday
    windows = freezes_soon([WEEKEND], "p", now)
    assert [w.start for w in windows] == [datetime(2026, 12, 4, 23, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (ChangeSize(gpus_before=16, gpus_after=512), "num_gpus 512 is over p's limit of 256"),
        (ChangeSize(gpus_before=512, gpus_after=300), None),  # lowered: allowed
        (ChangeSize(nodes_before=2, nodes_after=20), "20 nodes is over p's limit of 16 nodes"),
        (
            ChangeSize(gpu_type="X", gpus_before=8, gpus_after=16),
            "no price for GPU type X; p's limit on the hourly increase cannot be checked",
        ),
        (ChangeSize(gpus_before=16, gpus_after=8), None),  # no capacity added: no price needed
        (
            ChangeSize(gpus_before=8, gpus_after=200, hourly=Decimal("598"), currency="USD"),
            "≈ +$598.00/h is over p's limit of +$500.00/h per change",
        ),
    ],
)
def test_limits(size: ChangeSize, expected: str | None) -> None:
    limits = Limits(max_gpus=256, max_nodes=16, max_hourly_increase=Decimal(500))
    refusal = limit_refusal("p", limits, size)
    assert refusal == expected if expected is None else (refusal or "").startswith(expected)


def test_the_first_matching_rule_decides_and_no_match_is_one_approver() -> None:
    policy = policy_model().model_validate(
        {
            "projects": {"p": {"provider": "together"}},
            "approvals": {
                "rules": [
                    {"projects": ["p"], "kinds": ["decommission"], "approvers": 2},
                    {"projects": ["*"], "approvers": 3, "usergroups": ["S1"]},
                ]
            },
        }
    )
    first = requirement_for(policy, "p", ["decommission"])
    assert first is not None and (first.needed, first.by_rule) == (2, True)
    second = requirement_for(policy, "p", ["scale_down"])
    assert second is not None and (second.needed, second.usergroups) == (3, ("S1",))
    assert requirement_for(policy, "p", ["scale_up"]) is None  # needs no approval at all
    lines = describe_project(policy, "p", Role.viewer, datetime(2026, 12, 1, tzinfo=UTC))
    assert "scale_down: 3 approvers from group S1 (approval rule)" in lines
    assert "prices: none in the policy (no price is shown)" in lines


def test_a_prompt_asks_the_grants_approvers_or_the_rules_groups() -> None:
    policy = policy_model().model_validate(
        {
            "projects": {"p": {"provider": "together"}, "q": {"provider": "together"}},
            "grants": [
                {"users": ["U1ADMIN", "U2REQ"], "projects": ["*"], "role": "admin"},
                {
                    "users": ["U3BOB"],
                    "usergroups": ["S1OPS"],
                    "projects": ["p"],
                    "role": "approver",
                },
                {"users": ["U4ONLY"], "projects": ["p"], "role": "approver", "channels": ["C2"]},
                {"users": ["U5OP"], "projects": ["p"], "role": "operator"},
                {"users": ["U6Q"], "projects": ["q"], "role": "approver"},
            ],
        }
    )
    default = Requirement(1, (), ("scale_down",), by_rule=False)
    asked = who_to_ask(policy, default, project="p", channel="C1", requester="U2REQ")
    assert asked == {"users": ["U1ADMIN", "U3BOB"], "usergroups": ["S1OPS"]}
    in_c2 = who_to_ask(policy, default, project="p", channel="C2", requester="U2REQ")
    assert in_c2["users"] == ["U1ADMIN", "U3BOB", "U4ONLY"]
    ruled = Requirement(2, ("S9ONCALL",), ("decommission",), by_rule=True)
    only_groups = who_to_ask(policy, ruled, project="p", channel="C1", requester="U2REQ")
    assert only_groups == {"users": [], "usergroups": ["S9ONCALL"]}
