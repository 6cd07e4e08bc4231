"""The App Home tab: app_home_opened publishes it; its Approve, Deny, Cancel, Show and
Revoke (a token's) buttons act with no channel (decisions are checked in the request's
channel, answers go by DM)."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext

from bot.core.api import HomeActions, NeedsBreakGlass, Reply
from bot.slack.bolt_context import services
from bot.slack.home import REVOKE_TOKEN_ACTION_ID, SHOW_ACTION_ID
from bot.slack.interactions import DirectMessage, open_form, tell
from bot.slack.messenger import Messenger
from bot.slack.render import forms
from handlers.clicks import DECISIONS, ask_break_glass
from handlers.payloads import BlockAction, Payload, parse


async def from_home(body: Payload) -> bool:
    """A click in the Home tab (Slack sends the view it was on; a message has none)."""
    view = body.get("view")
    return isinstance(view, dict) and view.get("type") == "home"


def register(app: AsyncApp) -> None:
    """Register before the message buttons: the same action ids, told apart by the view."""
    app.event("app_home_opened")(handle_home_opened)
    for action_id in DECISIONS:
        app.action(action_id, matchers=[from_home])(handle_home_decision)
    app.action(SHOW_ACTION_ID)(handle_home_show)
    app.action(REVOKE_TOKEN_ACTION_ID)(handle_revoke_token)


async def handle_home_opened(event: Payload, context: AsyncBoltContext) -> None:
    user = event.get("user")
    if event.get("tab", "home") != "home" or not isinstance(user, str) or not user:
        return  # the Messages tab, or a payload without a person
    refresher = services(context).home_refresher
    refresher.opened(user[:64])


async def handle_home_decision(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    await ack()
    given = services(context)
    home, refresher, messenger = given.home, given.home_refresher, given.messenger
    action = parse(BlockAction, body)
    if action is None or not action.actions[0].value:
        return
    user, click = action.user.id, action.actions[0]
    request_id = str(click.value)
    if click.action_id == "deny_request":
        if await _ask_why_deny(home, messenger, action, request_id):
            refresher.schedule(user, delay=0.0)  # refused: the tab may be out of date
        return  # else the form's submission decides; the tab is republished when it does
    result = await home.decide(user, request_id, DECISIONS[click.action_id])
    if isinstance(result, NeedsBreakGlass):
        channel = await home.request_channel(request_id)
        await ask_break_glass(
            messenger, action, request_id, channel, DirectMessage(messenger, user)
        )
    if isinstance(result, Reply):
        await tell(result, DirectMessage(messenger, user), about="the answer to a Home click")
    refresher.schedule(user, delay=0.0)  # whatever happened, show it on their tab


async def _ask_why_deny(
    home: HomeActions, messenger: Messenger, action: BlockAction, request_id: str
) -> bool:
    """Deny asks for an optional reason first, as in the request's thread (the form decides
    in the request's channel); a refusal is told at once by DM, no form. True if refused."""
    by_dm = DirectMessage(messenger, action.user.id)
    channel, refused = await home.may_deny(action.user.id, request_id)
    if refused is not None:
        await tell(refused, by_dm, about="a refused Home deny")
        return True
    view = forms.deny_modal(request_id, channel, None)
    await open_form(messenger, action.trigger_id, view, "deny", by_dm)
    return False


async def handle_home_show(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    await ack()
    given = services(context)
    home, messenger = given.home, given.messenger
    action = parse(BlockAction, body)
    value = str(action.actions[0].value or "") if action is not None else ""
    project, _, cluster_id = value.partition(":")
    if action is None or not project or not cluster_id:
        return
    reply = await home.show(action.user.id, project, cluster_id)
    await tell(reply, DirectMessage(messenger, action.user.id), about="the answer to a Home click")


async def handle_revoke_token(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    """Revoke one of the clicker's own tokens (the value is its name), answer by DM and
    republish their tab."""
    await ack()
    given = services(context)
    action = parse(BlockAction, body)
    name = str(action.actions[0].value or "")[:64] if action is not None else ""
    if action is None or not name:
        return
    reply = await given.ops.revoke_token(action.user.id, name)
    await tell(reply, DirectMessage(given.messenger, action.user.id), about="a token's revoke")
    given.home_refresher.schedule(action.user.id, delay=0.0)
