"""The App Home tab: app_home_opened publishes it; its Approve, Deny, Cancel and Show buttons
act with no channel (decisions are checked in the request's channel, answers go by DM)."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.core.answers import Reply, error
from bot.core.api import NeedsBreakGlass
from bot.core.home import HomeActions
from bot.core.home_refresh import HomeRefresher
from bot.slack import blocks as render
from bot.slack.home import SHOW_ACTION_ID
from bot.slack.messenger import Messenger, SlackDeliveryError
from handlers.payloads import BlockAction, parse

log = logging.getLogger(__name__)

DECISIONS = {"approve_request": "approve", "deny_request": "deny", "cancel_request": "cancel"}


async def from_home(body: dict[str, Any]) -> bool:
    """A click in the Home tab (Slack sends the view it was on; a message has none)."""
    view = body.get("view")
    return isinstance(view, dict) and view.get("type") == "home"


def register(app: AsyncApp) -> None:
    """Register before the message buttons: the same action ids, told apart by the view."""
    app.event("app_home_opened")(handle_home_opened)
    for action_id in DECISIONS:
        app.action(action_id, matchers=[from_home])(handle_home_decision)
    app.action(SHOW_ACTION_ID)(handle_home_show)


async def handle_home_opened(event: dict[str, Any], context: Any) -> None:
    user = event.get("user")
    if event.get("tab", "home") != "home" or not isinstance(user, str) or not user:
        return  # the Messages tab, or a payload without a person
    refresher: HomeRefresher = context["home_refresher"]
    refresher.opened(user[:64])


async def handle_home_decision(ack: Any, body: dict[str, Any], context: Any) -> None:
    await ack()
    home: HomeActions = context["home"]
    refresher: HomeRefresher = context["home_refresher"]
    messenger: Messenger = context["messenger"]
    action = parse(BlockAction, body)
    if action is None or not action.actions[0].value:
        return
    user, click = action.user.id, action.actions[0]
    request_id = str(click.value)
    if click.action_id == "deny_request":
        if await _ask_why_deny(home, messenger, action, request_id):
            refresher.schedule(user, delay=0.0)  # refused: the tab may be out of date
        return  # else the form's submission decides; the tab is republished when it does
    result = await home.decide(user, request_id, DECISIONS[click.action_id])  # type: ignore[arg-type]
    if isinstance(result, NeedsBreakGlass):
        await _ask_break_glass(home, messenger, action, request_id)
    if isinstance(result, Reply):
        await tell_by_dm(messenger, user, result)
    refresher.schedule(user, delay=0.0)  # whatever happened, show it on their tab


async def _ask_why_deny(
    home: HomeActions, messenger: Messenger, action: BlockAction, request_id: str
) -> bool:
    """Deny asks for an optional reason first, as in the request's thread (the form decides
    in the request's channel); a refusal is told at once by DM, no form. True if refused."""
    channel, refused = await home.may_deny(action.user.id, request_id)
    if refused is not None:
        await tell_by_dm(messenger, action.user.id, refused)
        return True
    try:
        if not action.trigger_id:
            raise SlackDeliveryError("views.open", "no_trigger", None)
        await messenger.open_view(action.trigger_id, render.deny_modal(request_id, channel, None))
    except SlackDeliveryError as exc:
        await tell_by_dm(
            messenger,
            action.user.id,
            error(f"I could not open the deny form ({exc.code}); try again."),
        )
    return False


async def _ask_break_glass(
    home: HomeActions, messenger: Messenger, action: BlockAction, request_id: str
) -> None:
    channel = await home.request_channel(request_id)
    try:
        if not action.trigger_id:
            raise SlackDeliveryError("views.open", "no_trigger", None)
        await messenger.open_view(action.trigger_id, render.break_glass_modal(request_id, channel))
    except SlackDeliveryError as exc:
        await tell_by_dm(
            messenger,
            action.user.id,
            error(f"I could not open the break-glass form ({exc.code}); try again."),
        )


async def handle_home_show(ack: Any, body: dict[str, Any], context: Any) -> None:
    await ack()
    home: HomeActions = context["home"]
    messenger: Messenger = context["messenger"]
    action = parse(BlockAction, body)
    value = str(action.actions[0].value or "") if action is not None else ""
    project, _, cluster_id = value.partition(":")
    if action is None or not project or not cluster_id:
        return
    reply = await home.show(action.user.id, project, cluster_id)
    await tell_by_dm(messenger, action.user.id, reply)


async def tell_by_dm(messenger: Messenger, user: str, reply: Reply) -> None:
    """A Home click has no channel to whisper in: the answer goes to the person's DM."""
    try:
        await messenger.post(user, render.reply_message(reply))
    except SlackDeliveryError as exc:
        log.error("could not DM %s the answer to a Home click (%s)", user, exc.code)
