"""``gpuops check-config --online`` counts the members of the user groups an approval rule
draws its approvers from (``usergroups.users.list`` on the Slack stand-in, with the team an
org-level token needs): a rule needing more approvers than its groups have is unmeetable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.local.demo.stack import DEMO_POLICY
from tests.support.process_kit import World, base_env, run_gpuops, running_world

RULES = """\
  rules:
    - projects: [together-prod]
      kinds: [decommission]
      approvers: 2
      usergroups: [S0PLATFORM]
    - projects: [e2e-delhi]
      approvers: 2
      usergroups: [S0PLATFORM, S0ONCALL]
"""


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with running_world() as world:
        world.slack.usergroups["S0ONCALL"] = ["U03CAROL", "U02BOB"]
        world.slack.org_install = True  # usergroups.users.list then refuses without team_id
        yield world


def policy_with_group_rules(tmp_path: Path) -> Path:
    policy = tmp_path / "policy.yml"
    policy.write_text(DEMO_POLICY.replace("  break_glass: true\n", "  break_glass: true\n" + RULES))
    return policy


async def test_a_rule_its_groups_cannot_meet_is_named_and_fails(
    tmp_path: Path, world: World
) -> None:
    env = base_env(tmp_path, policy_with_group_rules(tmp_path), **world.urls())
    done = await run_gpuops(["check-config", "--online"], env, tmp_path)
    assert done.code == 1, done.stdout + done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert (
        "FAIL approvals.rules[0] (2 approvers from S0PLATFORM): the groups have 1 member(s): "
        "no request it matches can ever be approved (add members or lower approvers)" in lines
    )
    assert (
        "ok approvals.rules[1] (2 approvers from S0PLATFORM, S0ONCALL): the groups have 2 "
        "member(s) (a member's own request has one fewer: the requester cannot approve it, "
        "and this count does not leave them out)" in lines
    )
    assert "error: 1 online check(s) failed" in lines
    lookups = world.slack.calls_to("usergroups.users.list")
    assert sorted(c.args["usergroup"] for c in lookups) == ["S0ONCALL", "S0PLATFORM"]  # once each
    assert all(c.ok and c.args["team_id"] == world.slack.team_id for c in lookups)


async def test_a_group_slack_cannot_list_is_said(tmp_path: Path, world: World) -> None:
    world.slack.scopes = world.slack.scopes - {"usergroups:read"}
    env = base_env(tmp_path, policy_with_group_rules(tmp_path), **world.urls())
    done = await run_gpuops(["check-config", "--online"], env, tmp_path)
    assert done.code == 1
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert (
        "FAIL approvals.rules[0] (2 approvers from S0PLATFORM): S0PLATFORM: the app lacks the "
        "scope usergroups:read: reinstall it from manifest.yml" in lines
    )
