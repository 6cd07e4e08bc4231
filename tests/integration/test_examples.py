"""The example policy in the repository stays valid."""

from __future__ import annotations

from pathlib import Path

from bot.core.policy import E2EProject, Role, load_policy

ROOT = Path(__file__).resolve().parents[2]


def test_example_policy_loads_with_both_providers_and_every_role_kind() -> None:
    policy = load_policy(ROOT / "examples" / "policy.yml")
    assert set(policy.projects) == {"together-prod", "e2e-delhi"}
    assert isinstance(policy.projects["e2e-delhi"], E2EProject)
    assert {g.role for g in policy.grants} == {Role.admin, Role.approver, Role.operator}
    assert policy.requires_approval("together-prod", ["scale_down"])
    assert not policy.requires_approval("together-prod", ["scale_up"])
