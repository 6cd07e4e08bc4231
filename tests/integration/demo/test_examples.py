"""The example policy in the repository stays valid."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.core.policy import Role
from bot.local.demo.stack import DEMO_POLICY, DEMO_POLICY_FILE, WATCHED_DEMO_POLICY
from tests.support.catalog import load_policy, project_model

ROOT = Path(__file__).resolve().parents[3]


def test_example_policy_loads_with_both_providers_and_every_role_kind() -> None:
    policy = load_policy(ROOT / "examples" / "policy.yml")
    assert set(policy.projects) == {"together-prod", "e2e-delhi"}
    assert isinstance(policy.projects["e2e-delhi"], project_model("e2e"))
    assert {g.role for g in policy.grants} == {Role.admin, Role.approver, Role.operator}
    assert policy.requires_approval("together-prod", ["scale_down"])
    assert not policy.requires_approval("together-prod", ["scale_up"])


def test_the_demo_policy_ships_as_a_file_the_demo_reads() -> None:
    """examples/demo-policy.yml is the policy `gpuops demo` runs with: the stack's default
    policy (what the tests use) with both projects watched."""
    shipped = ROOT / "examples" / "demo-policy.yml"
    assert shipped.resolve() == DEMO_POLICY_FILE.resolve()
    assert shipped.read_text(encoding="utf-8") == WATCHED_DEMO_POLICY
    watched = yaml.safe_load(WATCHED_DEMO_POLICY)
    for project in watched["projects"].values():
        assert project.pop("watch")["every_seconds"] >= 15
        project.pop("limits", None)  # the demo's guardrails (SPEC §8)
        project.pop("prices", None)
    assert watched.pop("freezes") and watched["approvals"].pop("rules")
    assert watched.pop("oncall")["pagerduty"]["schedules"]  # the on-call demo (SPEC §16)
    assert watched == yaml.safe_load(DEMO_POLICY)
    policy = load_policy(shipped)
    assert policy.approvals.break_glass
    assert all(project.watch is not None for project in policy.projects.values())


def test_example_policy_shows_every_guardrail_key() -> None:
    policy = load_policy(ROOT / "examples" / "policy.yml")
    together = policy.projects["together-prod"]
    assert together.limits is not None and together.limits.max_gpus == 256
    assert together.limits.max_hourly_increase is not None
    assert getattr(together, "prices", None) is not None
    e2e = policy.projects["e2e-delhi"]
    assert e2e.limits is not None and e2e.limits.max_nodes == 16
    rule = policy.approvals.rules[0]
    assert rule.approvers == 2 and rule.usergroups and rule.kinds
    assert {f.name for f in policy.freezes} == {"year-end", "weekend"}
    weekly = policy.freezes[1].weekly
    assert weekly is not None and weekly.timezone == "Europe/Berlin"
