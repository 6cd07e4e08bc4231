"""What the on-call tests share (SPEC §16): the night the simulators start at, the demo
policy with e2e-delhi approved by who is on call, and the DM copies of a prompt."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.slack.models import Message

NIGHT = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)  # Bob on call (level 1), Alice behind (2)
SCALE_101 = "action e2e-delhi 101 scale_cluster additional_nodes=2"
PEOPLE = "{PBOB0001: U02BOB, PALICE01: U01ALICE}"


def oncall_policy(
    rule: str = "",
    people: str = PEOPLE,
    approvers: str = "[{oncall: platform-primary, max_level: 2}]",
) -> str:
    """The demo policy with e2e-delhi's changes approved by whoever is on call on
    platform-primary (PagerDuty), up to level 2, and ``rule``'s keys."""
    head, approvals = DEMO_POLICY.split("approvals:\n")
    return (
        head
        + "oncall:\n"
        + "  pagerduty: {schedules: {platform-primary: PPLATFRM}}\n"
        + "  opsgenie: {schedules: {storage: PPLATFRM}}\n"
        + f"  people: {people}\n"
        + "approvals:\n"
        + approvals
        + "  rules:\n"
        + "    - projects: [e2e-delhi]\n"
        + f"      approvers: {approvers}\n"
        + rule
    )


def dm_messages(stack: LocalStack, user: str) -> list[Message]:
    """What the bot posted in its DM with ``user``."""
    return list(stack.slack.messages.get(stack.slack.dm_channel(user), []))
