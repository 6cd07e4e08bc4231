"""Buttons: approve_request, deny_request, cancel_request, revert_request, confirm_request
(an agent's proposal, by its requester), a staged plan's plan_pause, plan_resume,
plan_abort and plan_revert; and the action select in the gpu_action modal."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext

from bot.core.api import CommandService, NeedsBreakGlass, PlanVerb, Reply
from bot.slack.bolt_context import Services, services
from bot.slack.interactions import ResponseUrl
from bot.slack.messenger import SlackDeliveryError
from bot.slack.render import forms
from handlers.clicks import DECISIONS, Click, ask_break_glass, on_click
from handlers.payloads import BlockAction, Payload, parse, state_values

log = logging.getLogger(__name__)


def register(app: AsyncApp) -> None:
    for action_id in DECISIONS:
        app.action(action_id)(handle_decision)
    app.action("revert_request")(handle_revert)
    app.action("confirm_request")(handle_confirm)
    for action_id in PLAN_BUTTONS:
        app.action(action_id)(handle_plan)
    app.action("action")(handle_action_select)


@on_click
async def handle_decision(click: Click, services: Services) -> None:
    ops = services.ops
    if click.action_id == "deny_request":
        await _ask_why_deny(ops, click)
        return
    result = await ops.decide(
        user=click.user,
        channel=click.channel,
        request_id=click.value,
        decision=DECISIONS[click.action_id],
    )
    if isinstance(result, NeedsBreakGlass):
        await ask_break_glass(
            click.messenger,
            click.action,
            result.request_id,
            click.channel,
            ResponseUrl(click.respond),
        )
    elif isinstance(result, Reply):
        await click.answer(result, about="a decision's answer")


@on_click
async def handle_revert(click: Click, services: Services) -> None:
    ops = services.ops
    reply = await ops.revert(user=click.user, channel=click.channel, request_id=click.value)
    await click.answer(reply, about="a revert's answer")


@on_click
async def handle_confirm(click: Click, services: Services) -> None:
    reply = await services.ops.confirm(
        user=click.user, channel=click.channel, request_id=click.value
    )
    await click.answer(reply, about="a confirmation's answer")


PLAN_BUTTONS: dict[str, PlanVerb] = {
    "plan_pause": "pause",
    "plan_resume": "resume",
    "plan_abort": "abort",
    "plan_revert": "revert",
}


@on_click
async def handle_plan(click: Click, services: Services) -> None:
    reply = await services.ops.steer_plan(
        user=click.user,
        channel=click.channel,
        request_id=click.value,
        verb=PLAN_BUTTONS[click.action_id],
    )
    await click.answer(reply, about="a plan's button")


async def _ask_why_deny(ops: CommandService, click: Click) -> None:
    """Deny asks for an optional reason first (a refusal is told at once, no form)."""
    refused = await ops.may_deny(user=click.user, channel=click.channel, request_id=click.value)
    if refused is not None:
        await click.answer(refused, about="a refused deny")
        return
    view = forms.deny_modal(click.value, click.channel, click.thread_ts)
    await click.open_form(view, "deny", ResponseUrl(click.respond))


async def handle_action_select(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    await ack()
    given = services(context)
    ops, messenger = given.ops, given.messenger
    action = parse(BlockAction, body)
    if action is None or action.view is None:
        return  # a select outside our modal: nothing to update
    option = action.actions[0].selected_option or {}
    selected = str(option.get("value", ""))[:64]
    form = await ops.forms.with_action(
        action.user.id, action.view.private_metadata, selected, state_values(action.view)
    )
    view = forms.change_form(form)
    try:
        await messenger.update_view(action.view.id, view, hash=action.view.hash)
    except SlackDeliveryError as exc:
        if exc.code == "hash_conflict":  # a later choice updated the form first: it wins
            log.info("the action modal changed meanwhile; kept the later choice")
            return
        log.warning("could not update the action modal: %s", exc.code)
