"""Helpers for the Slack integration tests (tests/integration/slack/, forms/, commands/ …):
send a signed request through the local stack and wait for what the bot answers, and look
at what reached the providers."""

from __future__ import annotations

import json
from typing import Any

from bot.core.store import AuditEntry
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import RecordedRequest
from bot.local.slack.models import Ephemeral, Message, View


async def command_reply(stack: LocalStack, user: str, channel: str, text: str) -> Ephemeral:
    """``user`` types ``/gpu text`` in ``channel``; the first ephemeral answer they get."""
    before = len(stack.slack.ephemerals_for(user))
    result = await stack.sender.command(user, channel, text)
    assert result.status == 200, result.body
    assert result.acked_in_time, f"acked after {result.elapsed:.2f}s"
    return await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for(user)[before:]), None)
    )


async def whisper(stack: LocalStack, user: str, channel: str, text: str) -> Ephemeral:
    """As command_reply, and the answer went through the command's response_url as an
    ephemeral (only ``user`` sees it)."""
    answer = await command_reply(stack, user, channel, text)
    assert answer.source == "response_url", answer
    assert answer.channel == channel and answer.user == user
    post = stack.slack.response_posts[-1]
    assert post.response_type == "ephemeral" and post.user == user
    return answer


def bot_messages(stack: LocalStack, channel: str) -> list[Message]:
    return [m for m in stack.slack.messages.get(channel, []) if m.user == stack.slack.bot_user_id]


def roots(stack: LocalStack, channel: str) -> list[Message]:
    """The bot's top-level messages in a channel."""
    return [m for m in bot_messages(stack, channel) if m.thread_ts is None]


def provider_writes(stack: LocalStack) -> list[RecordedRequest]:
    """Every mutating request either simulator received (Together PUT, E2E action PUT)."""
    return [
        *stack.together.calls(method="PUT"),
        *stack.e2e.calls(method="PUT"),
    ]


async def refusals(stack: LocalStack, actor: str) -> list[AuditEntry]:
    return [
        e
        for e in await stack.runtime.store.list_audit(limit=100)
        if e.event == "refused" and e.actor == actor
    ]


def blocks_json(blocks: list[dict[str, Any]] | None) -> str:
    """All the text in a list of blocks, as one string (for substring assertions)."""
    return json.dumps(blocks or [], ensure_ascii=False)


async def opened_modal(stack: LocalStack, user: str, callback_id: str) -> View:
    """The modal the bot opened for ``user`` (views.open) once it has been filled in
    (views.update after the cluster was fetched)."""

    def ready() -> View | None:
        view = stack.slack.last_view_for(user, open_only=True)
        if view is None or view.callback_id != callback_id or not view.history:
            return None
        return view

    return await stack.slack.wait_for(ready)


async def updated_modal(stack: LocalStack, view_id: str, versions: int) -> View:
    """The modal ``view_id`` once it has more than ``versions`` earlier versions."""

    def updated() -> View | None:
        view = stack.slack.views[view_id]
        return view if len(view.history) > versions else None

    return await stack.slack.wait_for(updated)


def input_block(view: View, block_id: str) -> dict[str, Any]:
    block = next((b for b in view.blocks if b.get("block_id") == block_id), None)
    assert block is not None, f"no block {block_id} in {[b.get('block_id') for b in view.blocks]}"
    return block
