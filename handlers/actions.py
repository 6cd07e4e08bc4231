"""Buttons: approve_request, deny_request, cancel_request, revert_request; and the action
select in the gpu_action modal."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.core.answers import Reply
from bot.core.api import NeedsBreakGlass
from bot.core.service import CommandService
from bot.slack import blocks as render
from bot.slack.messenger import Messenger, SlackDeliveryError
from handlers.payloads import BlockAction, parse, state_values

log = logging.getLogger(__name__)

DECISIONS = {"approve_request": "approve", "deny_request": "deny", "cancel_request": "cancel"}


def register(app: AsyncApp) -> None:
    for action_id in DECISIONS:
        app.action(action_id)(handle_decision)
    app.action("revert_request")(handle_revert)
    app.action("action")(handle_action_select)


async def handle_decision(ack: Any, body: dict[str, Any], context: Any, respond: Any) -> None:
    await ack()
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    action = parse(BlockAction, body)
    if action is None or action.channel_id is None or not action.actions[0].value:
        await _whisper_via(respond, render.error("I could not read that click; try again."))
        return
    click = action.actions[0]
    if click.action_id == "deny_request":
        await _ask_why_deny(ops, messenger, respond, action, str(click.value))
        return
    result = await ops.decide(
        user=action.user.id,
        channel=action.channel_id,
        request_id=str(click.value),
        decision=DECISIONS[click.action_id],  # type: ignore[arg-type]
    )
    if isinstance(result, NeedsBreakGlass):
        await _ask_break_glass(messenger, respond, action, result.request_id)
    elif isinstance(result, Reply):
        await whisper(
            messenger, respond, action.channel_id, action.user.id, result, action.thread_ts
        )


async def handle_revert(ack: Any, body: dict[str, Any], context: Any, respond: Any) -> None:
    await ack()
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    action = parse(BlockAction, body)
    if action is None or action.channel_id is None or not action.actions[0].value:
        await _whisper_via(respond, render.error("I could not read that click; try again."))
        return
    reply = await ops.revert(
        user=action.user.id, channel=action.channel_id, request_id=str(action.actions[0].value)
    )
    await whisper(messenger, respond, action.channel_id, action.user.id, reply, action.thread_ts)


async def whisper(
    messenger: Messenger,
    respond: Any,
    channel: str,
    user: str,
    reply: Reply,
    thread_ts: str | None,
) -> None:
    message = render.reply_message(reply)
    try:
        await messenger.ephemeral(channel, user, message, thread_ts=thread_ts)
    except SlackDeliveryError:
        await _whisper_via(respond, message)


async def _whisper_via(respond: Any, message: render.SlackMessage) -> None:
    try:
        await respond(response_type="ephemeral", replace_original=False, **message.as_kwargs())
    except Exception as exc:
        log.error("could not deliver an ephemeral reply: %s", type(exc).__name__)


async def _ask_why_deny(
    ops: CommandService, messenger: Messenger, respond: Any, action: BlockAction, request_id: str
) -> None:
    """Deny asks for an optional reason first (a refusal is told at once, no form)."""
    assert action.channel_id is not None
    refused = await ops.may_deny(
        user=action.user.id, channel=action.channel_id, request_id=request_id
    )
    if refused is not None:
        await whisper(
            messenger, respond, action.channel_id, action.user.id, refused, action.thread_ts
        )
        return
    view = render.deny_modal(request_id, action.channel_id, action.thread_ts)
    try:
        if not action.trigger_id:
            raise SlackDeliveryError("views.open", "no_trigger", None)
        await messenger.open_view(action.trigger_id, view)
    except SlackDeliveryError as exc:
        await _whisper_via(
            respond, render.error(f"I could not open the deny form ({exc.code}); try again.")
        )


async def _ask_break_glass(
    messenger: Messenger, respond: Any, action: BlockAction, request_id: str
) -> None:
    view = render.break_glass_modal(request_id, action.channel_id)
    try:
        if not action.trigger_id:
            raise SlackDeliveryError("views.open", "no_trigger", None)
        await messenger.open_view(action.trigger_id, view)
    except SlackDeliveryError as exc:
        await _whisper_via(
            respond, render.error(f"I could not open the break-glass form ({exc.code}); try again.")
        )


async def handle_action_select(ack: Any, body: dict[str, Any], context: Any) -> None:
    await ack()
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    action = parse(BlockAction, body)
    if action is None or action.view is None:
        return  # a select outside our modal: nothing to update
    option = action.actions[0].selected_option or {}
    selected = str(option.get("value", ""))[:64]
    form = await ops.forms.with_action(
        action.user.id, action.view.private_metadata, selected, state_values(action.view)
    )
    view = render.change_form(form)
    try:
        await messenger.update_view(action.view.id, view, hash=action.view.hash)
    except SlackDeliveryError as exc:
        if exc.code == "hash_conflict":  # a later choice updated the form first: it wins
            log.info("the action modal changed meanwhile; kept the later choice")
            return
        log.warning("could not update the action modal: %s", exc.code)
