"""@gpuops mentions (SPEC §4.4): answered in the thread they were written in."""

from __future__ import annotations

from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Message
from tests.support.slack_support import provider_writes, refusals, roots


def bot_replies(stack: LocalStack, channel: str, root_ts: str) -> list[Message]:
    return [m for m in stack.slack.replies(channel, root_ts) if m.bot_id]


async def mention_in_thread(
    stack: LocalStack, user: str, channel: str, text: str, root_ts: str
) -> Message:
    """``user`` writes ``@gpuops text`` in the thread ``root_ts``; the bot's answer there."""
    before = len(bot_replies(stack, channel, root_ts))
    result = await stack.sender.mention(user, channel, text, thread_ts=root_ts)
    assert result.status == 200 and result.acked_in_time
    return await stack.slack.wait_for(
        lambda: next(iter(bot_replies(stack, channel, root_ts)[before:]), None)
    )


async def test_show_in_a_thread_is_answered_in_that_thread(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    root = await stack.slack.post_user_message("C0INCIDENT", "U05ERIN", "GPUs look stuck?")
    answer = await mention_in_thread(
        stack, "U05ERIN", "C0INCIDENT", "show together-prod tc-h100-reserved", root.ts
    )
    assert answer.thread_ts == root.ts
    assert answer.text.startswith("train-h100-reserved (tc-h100-reserved)")
    assert "16 GPUs" in answer.text
    assert roots(stack, "C0INCIDENT") == []  # nothing at the top of the channel

    e2e = await mention_in_thread(stack, "U04DAVE", "C0INCIDENT", "show e2e-delhi 101", root.ts)
    assert e2e.thread_ts == root.ts and "train-h100-a (101)" in e2e.text


async def test_help_in_a_thread_is_answered_there_only_for_that_user(
    sqlite_stack: LocalStack,
) -> None:
    """Help lists the person's projects and roles, so it is whispered in the thread."""
    stack = sqlite_stack
    root = await stack.slack.post_user_message("C0INCIDENT", "U04DAVE", "deploy thread")

    async def help_for(user: str) -> str:
        result = await stack.sender.mention(user, "C0INCIDENT", "help", thread_ts=root.ts)
        assert result.status == 200 and result.acked_in_time
        whisper = await stack.slack.wait_for(
            lambda: next(iter(stack.slack.ephemerals_for(user, "C0INCIDENT")), None)
        )
        assert whisper.thread_ts == root.ts
        return whisper.text

    operator = await help_for("U04DAVE")
    assert "/gpu update" in operator and "/gpu audit" not in operator
    viewer = await help_for("U05ERIN")
    assert "/gpu show" in viewer and "/gpu update" not in viewer
    assert bot_replies(stack, "C0INCIDENT", root.ts) == []  # nothing public in the thread


async def test_another_command_gets_guidance_and_changes_nothing(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    root = await stack.slack.post_user_message("C0INCIDENT", "U04DAVE", "scale it?")
    answer = await mention_in_thread(
        stack, "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16", root.ts
    )
    assert answer.thread_ts == root.ts
    assert "/gpu update" in answer.text and "@gpuops show" in answer.text
    await stack.runtime.workflow.drain()
    assert provider_writes(stack) == [] and await stack.runtime.store.list_requests() == []


async def test_a_mention_outside_a_thread_starts_one(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    result = await stack.sender.mention("U04DAVE", "C0INCIDENT", "show e2e-delhi 103")
    assert result.status == 200
    mention = next(m for m in stack.slack.messages["C0INCIDENT"] if m.user == "U04DAVE")
    answer = await stack.slack.wait_for(
        lambda: next(iter(bot_replies(stack, "C0INCIDENT", mention.ts)), None)
    )
    assert answer.thread_ts == mention.ts and "train-a100-small (103)" in answer.text


async def test_a_refused_mention_is_whispered_in_the_thread(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    root = await stack.slack.post_user_message("C0INCIDENT", "U06MALLORY", "what's this?")
    await stack.sender.mention(
        "U06MALLORY", "C0INCIDENT", "show together-prod tc-h100-reserved", thread_ts=root.ts
    )
    whisper = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for("U06MALLORY")), None)
    )
    assert whisper.thread_ts == root.ts and "no access" in whisper.text
    assert bot_replies(stack, "C0INCIDENT", root.ts) == []
    [entry] = await refusals(stack, "U06MALLORY")
    assert entry.project == "together-prod" and entry.outcome == "not_authorized"


async def test_a_redelivered_mention_is_answered_once(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    root = await stack.slack.post_user_message("C0INCIDENT", "U04DAVE", "thread")
    first = await stack.sender.mention(
        "U04DAVE", "C0INCIDENT", "show e2e-delhi 101", thread_ts=root.ts, event_id="Ev0REPEAT"
    )
    await stack.slack.wait_for(lambda: bot_replies(stack, "C0INCIDENT", root.ts))
    again = await stack.sender.mention(
        "U04DAVE", "C0INCIDENT", "ignored", event_id="Ev0REPEAT", retry_num=1
    )
    assert first.status == 200 and again.status == 200
    await stack.runtime.workflow.drain()
    assert len(bot_replies(stack, "C0INCIDENT", root.ts)) == 1
