"""The guardrail tests' policy (SPEC §8): the demo policy with limits, prices, approval rules
and a freeze, and helpers to read what a person was told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.local.demo.stack import DEMO_POLICY, LocalStack
from tests.support.workflow_kit import next_ephemeral

TOGETHER_HEAD = "    project_id: proj-123\n    notify_channel: C0GPUAUDIT\n"
E2E_HEAD = "    location: Delhi\n"
APPROVALS_HEAD = "approvals:\n  expire_after_minutes: 30\n  break_glass: true\n"
assert TOGETHER_HEAD in DEMO_POLICY and E2E_HEAD in DEMO_POLICY and APPROVALS_HEAD in DEMO_POLICY

RECENT = (datetime.now(UTC) - timedelta(days=10)).date().isoformat()

LIMITS = f"""\
    limits:
      max_gpus: 64
      max_hourly_increase: 100
    prices:
      currency: USD
      as_of: "{RECENT}"
      per_gpu_hour: {{H100_SXM: 2.99, H200_SXM: 3.79}}
"""
E2E_LIMITS = "    limits:\n      max_nodes: 6\n"
RULES = """\
  rules:
    - projects: [together-prod]
      kinds: [decommission, change_type]
      approvers: 2
    - projects: [e2e-delhi]
      kinds: [restart_cluster]
      usergroups: [S0PLATFORM]
"""


def guard_policy(freezes: str = "") -> str:
    """The demo policy with the guardrails above, and ``freezes`` (YAML list items)."""
    policy = (
        DEMO_POLICY.replace(TOGETHER_HEAD, TOGETHER_HEAD + LIMITS)
        .replace(E2E_HEAD, E2E_HEAD + E2E_LIMITS)
        .replace(APPROVALS_HEAD, APPROVALS_HEAD + RULES)
    )
    return policy + (f"freezes:\n{freezes}" if freezes else "")


def absolute_freeze(name: str, start: datetime, end: datetime, projects: str = '["*"]') -> str:
    return (
        f"  - name: {name}\n    projects: {projects}\n"
        f'    from: "{start.isoformat()}"\n    to: "{end.isoformat()}"\n'
    )


async def answer_to(stack: LocalStack, user: str, text: str, channel: str = "C0INCIDENT") -> str:
    """``user`` types ``/gpu text``; the ephemeral answer they get."""
    seen = len(stack.slack.ephemerals_for(user))
    result = await stack.sender.command(user, channel, text)
    assert result.status == 200 and result.acked_in_time, result
    return (await next_ephemeral(stack, user, seen)).text
