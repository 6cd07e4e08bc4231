"""Answering a person who acted: the routes a reply may take (tried in turn), opening a
form or saying why it could not open, and reading back what gpuops's own modals carry."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.core.api import Reply
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render.answers import reply_message
from bot.slack.render.primitives import Block, SlackMessage, error

log = logging.getLogger(__name__)

Respond = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Whisper:
    """An ephemeral message to ``user`` in ``channel`` (in the thread of ``thread_ts``)."""

    messenger: Messenger
    channel: str
    user: str
    thread_ts: str | None = None

    async def send(self, message: SlackMessage, public: bool) -> None:
        await self.messenger.ephemeral(self.channel, self.user, message, thread_ts=self.thread_ts)


@dataclass(frozen=True)
class Post:
    """A message in ``channel`` (in the thread of ``thread_ts``) that everyone there sees."""

    messenger: Messenger
    channel: str
    thread_ts: str | None = None

    async def send(self, message: SlackMessage, public: bool) -> None:
        await self.messenger.post(self.channel, message, thread_ts=self.thread_ts)


@dataclass(frozen=True)
class DirectMessage:
    """A message in the person's DM with the bot (where a Home click is answered)."""

    messenger: Messenger
    user: str

    async def send(self, message: SlackMessage, public: bool) -> None:
        await self.messenger.post(self.user, message)


@dataclass(frozen=True)
class ResponseUrl:
    """Through the interaction's response_url, which works even where the bot is not a
    member: a public reply is shown to the channel, anything else to the person alone."""

    respond: Respond

    async def send(self, message: SlackMessage, public: bool) -> None:
        try:
            await self.respond(
                response_type="in_channel" if public else "ephemeral",
                replace_original=False,
                **message.as_kwargs(),
            )
        except Exception as exc:  # whatever Bolt's HTTP client raises: the next route is tried
            raise SlackDeliveryError("response_url", type(exc).__name__, None) from exc


Route = Whisper | Post | DirectMessage | ResponseUrl


async def tell(reply: Reply | SlackMessage, *routes: Route, about: str = "a reply") -> bool:
    """Deliver by the first route that works; False, logged, when none does (the person
    must not be left with silence, so it is logged as an error)."""
    message = reply_message(reply) if isinstance(reply, Reply) else reply
    public = isinstance(reply, Reply) and reply.public
    failures: list[str] = []
    for route in routes:
        try:
            await route.send(message, public)
        except SlackDeliveryError as exc:
            failures.append(f"{type(route).__name__}: {exc.code}")
        else:
            return True
    log.error("could not deliver %s (%s)", about, "; ".join(failures) or "no route")
    return False


async def open_form(
    messenger: Messenger, trigger_id: str | None, view: Block, name: str, *routes: Route
) -> bool:
    """Open a modal on the click's trigger; if Slack cannot (or sent no trigger), tell the
    person why by ``routes``."""
    try:
        if not trigger_id:
            raise SlackDeliveryError("views.open", "no_trigger", None)
        await messenger.open_view(trigger_id, view)
    except SlackDeliveryError as exc:
        failed = error(f"I could not open the {name} form ({exc.code}); try again.")
        await tell(failed, *routes, about=f"why the {name} form did not open")
        return False
    return True


def modal_metadata(raw: object) -> dict[str, str]:
    """The text values of a modal's ``private_metadata`` (gpuops writes it as a JSON
    object); empty when it is not one."""
    try:
        data = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)}
