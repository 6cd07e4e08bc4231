"""Helpers for the watcher's tests: a watched demo policy, finding what it posted in the
notify channel, and clicking its buttons."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.simulators.together_remediations import NewRemediation
from bot.local.slack.models import Message
from bot.local.slack.sender import SenderResult, SlackSender
from tests.conftest import StackFactory
from tests.support.workflow_kit import buttons, readable_text

NOTIFY = "C0GPUAUDIT"
CLUSTER = "tc-h100-reserved"
WATCH_EVERY = 0.3  # the test override of every_seconds (never allowed in a policy)

_TOGETHER_NOTIFY = "    project_id: proj-123\n    notify_channel: C0GPUAUDIT\n"
assert _TOGETHER_NOTIFY in DEMO_POLICY
WATCH_POLICY = DEMO_POLICY.replace(
    _TOGETHER_NOTIFY,
    _TOGETHER_NOTIFY
    + "    watch:\n      every_seconds: 15\n      status: false\n"
    + "      reservation_reminders: []\n",
)

HEALTH_POLICY = WATCH_POLICY.replace("      status: false\n", "      status: true\n").replace(
    "      remediations: true\n", ""
)


def incident_roots(stack: LocalStack, cluster_id: str) -> list[Message]:
    """The root messages in the notify channel about one cluster's health."""
    return [
        m
        for m in stack.slack.messages.get(NOTIFY, [])
        if m.thread_ts in (None, m.ts)
        and "Incident" in readable_text(m)
        and f"`{cluster_id}`" in readable_text(m)
    ]


async def watched_stack(make_stack: StackFactory, **overrides: Any) -> LocalStack:
    extra = {"gpuops_watch_every_seconds": WATCH_EVERY, **overrides.pop("extra_settings", {})}
    policy = overrides.pop("policy_yaml", WATCH_POLICY)
    return await make_stack(policy_yaml=policy, extra_settings=extra, **overrides)


def remediation_roots(stack: LocalStack, remediation_id: str) -> list[Message]:
    """The root messages in the notify channel about one remediation."""
    return [
        m
        for m in stack.slack.messages.get(NOTIFY, [])
        if m.thread_ts in (None, m.ts) and f"`{remediation_id}`" in readable_text(m)
    ]


async def pending_remediation(
    stack: LocalStack, spec: NewRemediation | None = None, *, within: float = 10.0
) -> tuple[str, Message]:
    """Create a remediation awaiting approval; wait for its message. (id, message)"""
    created = stack.together.create_remediation(CLUSTER, spec or NewRemediation())
    remediation_id = str(created["id"])
    message = await stack.slack.wait_for(
        lambda: next(iter(remediation_roots(stack, remediation_id)), None), within=within
    )
    return remediation_id, message


async def press(
    stack: LocalStack,
    message: Message,
    user: str,
    action_id: str,
    *,
    sender: SlackSender | None = None,
) -> SenderResult:
    value = buttons(message).get(action_id) or _value_of(message, action_id)
    result = await (sender or stack.sender).block_action(
        user, NOTIFY, action_id=action_id, value=value, message_ts=message.ts
    )
    assert result.ok, result
    return result


def _value_of(message: Message, action_id: str) -> str:
    """The button's value in the message as first posted (its buttons may be gone now)."""
    for version in message.versions:
        for block in version.blocks or []:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                if element.get("action_id") == action_id:
                    return str(element.get("value"))
    raise AssertionError(f"no {action_id} button on {message.ts}")


def decisions_sent(stack: LocalStack, remediation_id: str) -> list[str]:
    """The approve / reject / cancel calls Together received for one remediation."""
    return [
        call.path.rsplit("/", 1)[-1]
        for call in stack.together.calls("remediation_decision")
        if f"/remediations/{remediation_id}/" in call.path
    ]


def thread(stack: LocalStack, message: Message) -> list[str]:
    return [readable_text(m) for m in stack.slack.replies(NOTIFY, message.ts)]


async def until(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    """Wait for a condition that no Slack event announces (re-checked every 20 ms)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met in {within}s")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def polls_held(stack: LocalStack) -> AsyncIterator[None]:
    """No poll of a watched project runs inside (one in flight finishes first): what a test
    sets up there is seen by the next poll whole, at the next tick after it."""
    projects = stack.runtime.watcher.projects
    for project in projects:
        project.due = math.inf
    await until(lambda: all(p.polling is None or p.polling.done() for p in projects))
    for project in projects:
        project.due = math.inf  # a poll that just ended set its own next time
    try:
        yield
    finally:
        for project in projects:
            project.due = 0.0
