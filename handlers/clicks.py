"""What the buttons share: a click read once (or the person told it could not be), answered
to the person alone, the decision each request button stands for, and asking an admin why
they break glass."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.context.respond.async_respond import AsyncRespond

from bot.core.api import Decision, Reply
from bot.slack.bolt_context import Services, services
from bot.slack.interactions import Respond, ResponseUrl, Route, Whisper, open_form, tell
from bot.slack.messenger import Messenger
from bot.slack.render import forms, primitives
from handlers.payloads import BlockAction, Payload, parse

# The request buttons, in a request's thread and on the Home tab alike.
DECISIONS: dict[str, Decision] = {
    "approve_request": "approve",
    "deny_request": "deny",
    "cancel_request": "cancel",
}

UNREADABLE = "I could not read that click; try again."


@dataclass(frozen=True)
class Click:
    """A button pressed in a channel: who, where, the value it carries, and how to answer."""

    action: BlockAction
    channel: str
    value: str
    messenger: Messenger
    respond: Respond

    @property
    def user(self) -> str:
        return self.action.user.id

    @property
    def action_id(self) -> str:
        return self.action.actions[0].action_id

    @property
    def thread_ts(self) -> str | None:
        return self.action.thread_ts

    @property
    def privately(self) -> tuple[Route, Route]:
        """To the person alone: a whisper in the click's thread, else by response_url."""
        whisper = Whisper(self.messenger, self.channel, self.user, self.thread_ts)
        return whisper, ResponseUrl(self.respond)

    async def answer(self, reply: Reply | primitives.SlackMessage, *, about: str) -> None:
        await tell(reply, *self.privately, about=about)

    async def open_form(self, view: primitives.Block, name: str, *routes: Route) -> None:
        """Open a modal on the click's trigger; if it cannot open, say why by ``routes``
        (by default, to the person alone)."""
        await open_form(
            self.messenger, self.action.trigger_id, view, name, *(routes or self.privately)
        )


ClickHandler = Callable[[Click, Services], Awaitable[None]]


def on_click(handle: ClickHandler) -> Callable[..., Awaitable[None]]:
    """The Bolt listener of a message button: ack, read the click (an unreadable one is
    told so and goes no further), then ``handle(click, services)``."""

    async def listener(
        ack: AsyncAck, body: Payload, context: AsyncBoltContext, respond: AsyncRespond
    ) -> None:
        await ack()
        action = parse(BlockAction, body)
        if action is None or action.channel_id is None or not action.actions[0].value:
            unreadable = primitives.error(UNREADABLE)
            await tell(unreadable, ResponseUrl(respond), about="an unreadable click")
            return
        value = str(action.actions[0].value)
        given = services(context)
        await handle(Click(action, action.channel_id, value, given.messenger, respond), given)

    listener.__name__ = listener.__qualname__ = handle.__name__
    return listener


async def ask_break_glass(
    messenger: Messenger,
    action: BlockAction,
    request_id: str,
    channel: str | None,
    *routes: Route,
) -> None:
    """An admin approving their own request is asked why first; ``routes`` tell them if
    the form cannot open."""
    view = forms.break_glass_modal(request_id, channel)
    await open_form(messenger, action.trigger_id, view, "break-glass", *routes)
