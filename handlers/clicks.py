"""What the buttons share: reading a click (or saying it could not be read), the decision
each request button stands for, and asking an admin why they break glass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.core.api import Decision
from bot.slack import blocks as render
from bot.slack.interactions import Respond, ResponseUrl, Route, open_form, tell
from bot.slack.messenger import Messenger
from handlers.payloads import BlockAction, parse

# The request buttons, in a request's thread and on the Home tab alike.
DECISIONS: dict[str, Decision] = {
    "approve_request": "approve",
    "deny_request": "deny",
    "cancel_request": "cancel",
}

UNREADABLE = "I could not read that click; try again."


@dataclass(frozen=True)
class Click:
    """A button pressed in a channel: who, where, and the value it carries."""

    action: BlockAction
    channel: str
    value: str

    @property
    def user(self) -> str:
        return self.action.user.id

    @property
    def action_id(self) -> str:
        return self.action.actions[0].action_id

    @property
    def thread_ts(self) -> str | None:
        return self.action.thread_ts


def read_click(body: dict[str, Any]) -> Click | None:
    """The click, if it has a channel and a value (a message button's always do)."""
    action = parse(BlockAction, body)
    if action is None or action.channel_id is None or not action.actions[0].value:
        return None
    return Click(action, action.channel_id, str(action.actions[0].value))


async def read_click_or_say(body: dict[str, Any], respond: Respond) -> Click | None:
    """The click; None, and the person told so, when it cannot be read."""
    click = read_click(body)
    if click is None:
        await tell(render.error(UNREADABLE), ResponseUrl(respond), about="an unreadable click")
    return click


async def ask_break_glass(
    messenger: Messenger,
    action: BlockAction,
    request_id: str,
    channel: str | None,
    *routes: Route,
) -> None:
    """An admin approving their own request is asked why first; ``routes`` tell them if
    the form cannot open."""
    view = render.break_glass_modal(request_id, channel)
    await open_form(messenger, action.trigger_id, view, "break-glass", *routes)
