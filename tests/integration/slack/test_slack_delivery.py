"""Slack Web API errors reach the person as clear messages, and a request whose thread
could not be started is withdrawn before anything is sent to the provider."""

from __future__ import annotations

import pytest

from bot.local.demo.stack import LocalStack
from tests.support.slack_support import bot_messages, opened_modal, provider_writes, roots, whisper


async def test_bot_not_in_channel_withdraws_the_request(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.slack.set_bot_member("C0RANDOM", False)
    answer = await whisper(
        stack, "U04DAVE", "C0RANDOM", "update together-prod tc-h200-ondemand num_gpus=16"
    )
    assert "/invite @gpuops" in answer.text and "Nothing was changed" in answer.text
    await stack.runtime.workflow.drain()
    assert provider_writes(stack) == []
    assert stack.together.clusters["tc-h200-ondemand"]["num_gpus"] == 8

    [request] = await stack.runtime.store.list_requests()
    assert str(request.state) == "cancelled" and request.id in answer.text
    assert "not_in_channel" in (request.result_message or "")
    events = {e.event: e for e in await stack.runtime.store.list_audit(request_id=request.id)}
    assert events["withdrawn"].outcome == "cancelled"
    assert bot_messages(stack, "C0RANDOM") == []


async def test_bot_not_in_channel_for_an_action_needing_approval(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.slack.set_bot_member("C0RANDOM", False)
    answer = await whisper(
        stack, "U04DAVE", "C0RANDOM", "action e2e-delhi 101 scale_cluster additional_nodes=2"
    )
    assert "/invite @gpuops" in answer.text
    [request] = await stack.runtime.store.list_requests()
    assert str(request.state) == "cancelled"
    # No approval prompt, and nothing mirrored for a request that never started.
    assert roots(stack, "C0GPUAUDIT") == []
    assert provider_writes(stack) == []


async def test_show_works_where_the_bot_is_not_a_member(sqlite_stack: LocalStack) -> None:
    """show answers through the command's response_url, which needs no membership."""
    stack = sqlite_stack
    stack.slack.set_bot_member("C0RANDOM", False)
    await stack.sender.command("U04DAVE", "C0RANDOM", "show together-prod tc-h100-reserved")
    posted = await stack.slack.wait_for(lambda: next(iter(bot_messages(stack, "C0RANDOM")), None))
    assert posted.source == "response_url" and "tc-h100-reserved" in posted.text


async def test_a_modal_request_in_a_channel_without_the_bot_is_reported_by_dm(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    stack.slack.set_bot_member("C0RANDOM", False)
    await stack.sender.command("U04DAVE", "C0RANDOM", "update together-prod tc-h200-ondemand")
    view = await opened_modal(stack, "U04DAVE", "gpu_update")
    submitted = await stack.sender.view_submission("U04DAVE", view.id, {"num_gpus": "16"})
    assert submitted.status == 200 and submitted.json is None
    dm_channel = stack.slack.dm_channel("U04DAVE")
    dm = await stack.slack.wait_for(lambda: next(iter(bot_messages(stack, dm_channel)), None))
    assert "/invite @gpuops" in dm.text and "Nothing was changed" in dm.text
    [request] = await stack.runtime.store.list_requests()
    assert str(request.state) == "cancelled"
    assert provider_writes(stack) == []


async def test_a_rate_limited_post_is_retried(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.slack.fail("chat.postMessage", "ratelimited", retry_after=0)
    await whisper(
        stack, "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
    )
    await stack.runtime.workflow.drain()
    [request] = await stack.runtime.store.list_requests()
    assert str(request.state) == "succeeded"
    [root] = roots(stack, "C0INCIDENT")
    assert root.text.startswith("[done]")
    assert stack.slack.calls_to("chat.postMessage")[0].status == 429
    assert len(provider_writes(stack)) == 1


async def test_a_redelivered_command_is_acked_and_runs_once(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    first = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
    )
    again = await stack.sender.redeliver(first, retry_num=1)
    assert first.status == 200 and again.status == 200 and again.acked_in_time
    await stack.slack.wait_for(lambda: stack.slack.ephemerals_for("U04DAVE"))
    await stack.runtime.workflow.drain()
    assert len(stack.slack.ephemerals_for("U04DAVE")) == 1
    assert len(await stack.runtime.store.list_requests()) == 1
    assert len(provider_writes(stack)) == 1


async def test_an_unexpected_error_is_never_silence(
    sqlite_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = sqlite_stack

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug, with secret detail xoxb-should-not-show")

    monkeypatch.setattr(stack.runtime.ops.queries, "show", broken)
    answer = await whisper(stack, "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved")
    assert "internal error" in answer.text and "RuntimeError" in answer.text
    assert "xoxb" not in answer.text and "Traceback" not in answer.text

    root = await stack.slack.post_user_message("C0INCIDENT", "U04DAVE", "thread")
    await stack.sender.mention(
        "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved", thread_ts=root.ts
    )
    whispered = await stack.slack.wait_for(
        lambda: next((e for e in stack.slack.ephemerals_for("U04DAVE") if e.thread_ts), None)
    )
    assert whispered.thread_ts == root.ts and "internal error" in whispered.text
