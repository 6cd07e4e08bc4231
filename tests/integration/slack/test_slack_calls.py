"""How many Slack calls each operation costs, exactly, and that fewer calls still tell the
same story: who asked for what, the result and the final state, in the thread, on the root
and in the notify channel (SPEC §4.3). A quick change's root goes from its opening state to
its result in one edit; a slow one says it is running meanwhile."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from bot.providers.base import ApplyOutcome, ChangePlan
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    NOTIFY_CHANNEL,
    Opened,
    click,
    request,
    slack_notifier,
    wait_mirror,
    wait_state,
)

SCALE_UP = "update together-prod tc-h200-ondemand num_gpus=16"
SCALE_101 = "action e2e-delhi 101 scale_cluster additional_nodes=1"
SHOW = "show together-prod tc-h200-ondemand"
RESPONSE_URL = "response_url"
NEVER = 3600.0  # seconds: a change never takes long enough to be shown running


@dataclass
class Calls:
    """The Slack calls made since it was started: Web API methods (with the channel they
    went to) and posts to response_urls, in order of arrival by kind."""

    stack: LocalStack
    web_api_from: int = 0
    responses_from: int = 0

    def start(self) -> None:
        self.web_api_from = len(self.stack.slack.calls)
        self.responses_from = len(self.stack.slack.response_posts)

    def made(self) -> list[tuple[str, str]]:
        web_api = [
            (c.method, str(c.args.get("channel", "")))
            for c in self.stack.slack.calls[self.web_api_from :]
        ]
        responses = [
            (RESPONSE_URL, p.channel)
            for p in self.stack.slack.response_posts[self.responses_from :]
        ]
        return web_api + responses


async def show(stack: LocalStack) -> None:
    """Dave sends ``/gpu show``; its answer (in the channel, through the response_url)."""
    before = len(stack.slack.response_posts)
    sent = await stack.sender.command(DAVE, CHANNEL, SHOW)
    assert sent.status == 200 and sent.acked_in_time, sent
    await stack.slack.wait_for(lambda: len(stack.slack.response_posts) > before)
    assert stack.slack.response_posts[-1].response_type == "in_channel"


async def warmed(stack: LocalStack, running_after: float) -> Calls:
    """Authorization's user groups are read (and cached) once, before counting."""
    slack_notifier(stack).running_after = running_after
    await show(stack)
    calls = Calls(stack)
    calls.start()
    return calls


def root_states(stack: LocalStack, opened: Opened) -> list[str]:
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None
    return [v.text.split("]", 1)[0].lstrip("[") for v in root.versions]


async def scale_up(stack: LocalStack) -> Opened:
    opened = await request(stack, DAVE, SCALE_UP, approval=False)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    await wait_mirror(stack, opened, "Change done")
    await stack.runtime.workflow.drain()
    return opened


def told_the_whole_story(stack: LocalStack, opened: Opened) -> None:
    """Who asked for what and how it ended: on the root, in the thread and in the mirror."""
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None and root.text.startswith("[done] <@U04DAVE> asks for update")
    assert "Together accepted the update" in str(root.blocks)
    [summary] = stack.slack.replies(opened.channel, opened.root_ts)
    assert summary.text.startswith("infer-h200 (tc-h200-ondemand) — ")
    assert summary.text.endswith(" · 16 GPUs\nTogether accepted the update")
    assert summary.blocks is not None and summary.blocks[0]["type"] == "header"
    assert ":large_green_circle: Together accepted the update" in str(summary.blocks[1])
    assert "requested by <@U04DAVE>" in str(summary.blocks)
    [mirrored] = [m for m in stack.slack.messages[NOTIFY_CHANNEL] if opened.id in m.text]
    assert mirrored.text.startswith("Change done (no approval needed) — [done] <@U04DAVE>")
    assert "num_gpus" in mirrored.text


async def test_a_quick_scale_up_costs_five_calls_and_tells_it_all(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    calls = await warmed(stack, NEVER)
    opened = await scale_up(stack)
    assert calls.made() == [
        ("chat.postMessage", CHANNEL),  # the root: who asks for what
        ("chat.update", CHANNEL),  # the root: done, with the provider's answer
        ("chat.postMessage", CHANNEL),  # the thread: the answer and the cluster summary
        ("chat.postMessage", NOTIFY_CHANNEL),  # the mirror, once it has ended
        (RESPONSE_URL, CHANNEL),  # the requester's answer
    ]
    assert len(calls.made()) <= 5  # the target
    assert root_states(stack, opened) == ["approved", "done"]
    told_the_whole_story(stack, opened)


async def test_a_slow_scale_up_shows_it_running_meanwhile(
    sqlite_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = sqlite_stack
    calls = await warmed(stack, 0.05)
    adapter = stack.runtime.registry("together-prod")
    answered = adapter.apply

    def shown_running() -> bool:
        return any(m.text.startswith("[running]") for m in stack.slack.messages[CHANNEL])

    async def slow_apply(plan: ChangePlan) -> ApplyOutcome:
        await stack.slack.wait_for(shown_running)  # it answers once the root says running
        return await answered(plan)

    monkeypatch.setattr(adapter, "apply", slow_apply)
    opened = await scale_up(stack)
    assert root_states(stack, opened) == ["approved", "running", "done"]
    assert [method for method, _ in calls.made()] == [
        "chat.postMessage",
        "chat.update",  # running
        "chat.update",  # done
        "chat.postMessage",
        "chat.postMessage",
        RESPONSE_URL,
    ]
    told_the_whole_story(stack, opened)


async def test_an_approved_e2e_change_costs_eleven_calls(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    calls = await warmed(stack, NEVER)
    opened = await request(stack, DAVE, SCALE_101)
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    await wait_mirror(stack, opened, "Change done")
    await stack.runtime.workflow.drain()
    assert calls.made() == [
        ("chat.postMessage", CHANNEL),  # the root
        ("chat.postMessage", CHANNEL),  # the approval prompt
        ("chat.postMessage", NOTIFY_CHANNEL),  # the mirror: requested
        ("chat.update", CHANNEL),  # the prompt: approved, its buttons gone
        ("chat.update", CHANNEL),  # the root: approved
        ("chat.postMessage", CHANNEL),  # the thread: approved by Bob
        ("chat.update", CHANNEL),  # the root: done
        ("chat.postMessage", CHANNEL),  # the thread: the answer and the cluster summary
        ("chat.update", NOTIFY_CHANNEL),  # the mirror "requested", edited to done (#33.10)
        ("chat.postMessage", NOTIFY_CHANNEL),  # the mirror: done
        (RESPONSE_URL, CHANNEL),  # the requester's answer (waiting for approval)
    ]
    assert root_states(stack, opened) == ["pending approval", "approved", "done"]
    replies = [m.text for m in stack.slack.replies(CHANNEL, opened.root_ts)]
    assert replies[1] == ":white_check_mark: Approved by <@U02BOB>."
    assert replies[2].startswith("train-h100-a (101) — ")
    assert replies[2].endswith("\nAdding 1 node(s)")


async def test_show_costs_one_call(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    calls = await warmed(stack, NEVER)
    await show(stack)
    assert calls.made() == [(RESPONSE_URL, CHANNEL)]


async def test_a_scheduled_scale_up_is_mirrored_when_requested_too(
    sqlite_stack: LocalStack,
) -> None:
    """It does not run at once: the notify channel hears of it now, and again when it ends."""
    stack = sqlite_stack
    opened = await request(stack, DAVE, f"{SCALE_UP} in=1h", approval=False)
    mirrored = await wait_mirror(stack, opened, "Change requested (no approval needed)")
    assert "scheduled for" in mirrored.text
