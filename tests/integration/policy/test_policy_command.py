"""``/gpu policy [project]`` over real HTTP (SPEC §8): ephemeral, per project the person may
see — their role, what needs how many approvals from whom, limits, the prices' date, and
freezes now or within 7 days; nothing about projects they have no grant for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.conftest import StackFactory
from tests.support.guard_kit import RECENT, absolute_freeze, answer_to, guard_policy
from tests.support.workflow_kit import CHANNEL, DAVE, ERIN, MALLORY, readable_text, request


async def test_policy_tells_each_person_what_applies_to_them(make_stack: StackFactory) -> None:
    now = datetime.now(UTC)
    soon = absolute_freeze(
        "launch", now + timedelta(days=2), now + timedelta(days=3), "[together-prod]"
    )
    later = absolute_freeze("far-off", now + timedelta(days=20), now + timedelta(days=21))
    stack = await make_stack(policy_yaml=guard_policy(soon + later))
    text = await answer_to(stack, DAVE, "policy")
    assert "together-prod" in text and "e2e-delhi" in text
    assert "your role: operator" in text
    assert "decommission: 2 approvers (approval rule)" in text
    assert "scale_down: 1 approver (default)" in text
    assert "no approval: extend_reservation, scale_up" in text
    assert "restart_cluster: 1 approver from group S0PLATFORM (approval rule)" in text
    assert "at most 64 GPUs per cluster" in text and "at most +$100.00/h per change" in text
    assert "at most 6 nodes per cluster" in text
    assert f"prices of {RECENT}: H100_SXM $2.99, H200_SXM $3.79 per GPU-hour" in text
    assert "freeze launch: " in text and "far-off" not in text
    assert not any(m.text == text for m in stack.slack.messages.get(CHANNEL, []))  # ephemeral

    one = await answer_to(stack, DAVE, "policy e2e-delhi")
    assert "e2e-delhi" in one and "together-prod" not in one
    assert "freezes: none now or in the next 7 days" in one
    viewer = await answer_to(stack, ERIN, "policy")
    assert "your role: viewer" in viewer
    assert "no access to any project" in await answer_to(stack, MALLORY, "policy")
    assert "no such project or no access" in await answer_to(stack, MALLORY, "policy e2e-delhi")


async def test_an_old_price_table_is_flagged(make_stack: StackFactory) -> None:
    stale = (datetime.now(UTC) - timedelta(days=120)).date().isoformat()
    stack = await make_stack(policy_yaml=guard_policy().replace(RECENT, stale))
    text = await answer_to(stack, DAVE, "policy together-prod")
    assert f"prices of {stale} — old: over 90 days" in text
    opened = await request(stack, DAVE, "update together-prod tc-h100-reserved num_gpus=8")
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None and f"prices of {stale} (old: over 90 days)" in readable_text(root)
