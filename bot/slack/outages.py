"""One answer to a store outage for every listener: a click or submission whose de-dup write
failed is answered here and never reaches its listener, and a store error a listener let
escape is answered by the app's error handler — both to the person, in the channel they
acted in (a Home click: by DM)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.core.api import Reply, StoreUnavailable, error
from bot.core.api import store_unavailable as store_unavailable_reply
from bot.slack.bolt_context import find_services, store_unavailable
from bot.slack.home import SHOW_ACTION_ID
from bot.slack.interactions import DirectMessage, Route, Whisper, modal_metadata, tell
from bot.slack.messenger import Messenger
from bot.slack.middleware import Next
from bot.slack.render import watch

log = logging.getLogger(__name__)

# Clicks that only read or open a form (a repeat of them is harmless): they go on without
# the store. Every other click and every submission acts, and is refused while it is down.
READ_ONLY_ACTIONS = frozenset(
    {
        "action",  # the action select inside the gpu_action form
        SHOW_ACTION_ID,
        watch.OPEN_UPDATE_FORM,
        watch.OPEN_ACTION_FORM,
        watch.EXTEND_RESERVATION,
    }
)
CUT_OFF_TEXT = (
    "gpuops lost contact with its state store while handling this, so it cannot say here "
    "what was done; the message you acted on shows it once the store is back."
)


def acts(body: Mapping[str, object]) -> bool:
    """Whether this interaction changes something (a click or a form submission)."""
    kind = body.get("type")
    if kind == "view_submission":
        return True
    if kind != "block_actions":
        return False
    actions = body.get("actions")
    first = actions[0] if isinstance(actions, list) and actions else {}
    return isinstance(first, dict) and first.get("action_id") not in READ_ONLY_ACTIONS


class AnswerStoreOutages(AsyncMiddleware):
    """A click or submission that could not be checked for repeats (the store is down or
    silent) is acknowledged and answered "nothing was changed" here, for every listener."""

    def __init__(self) -> None:
        self._answering: set[asyncio.Task[None]] = set()

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Next
    ) -> BoltResponse | None:
        if not store_unavailable(req.context) or not acts(req.body):
            return await next()
        services = find_services(req.context)
        if services is not None:
            answer = tell_whoever_acted(services.messenger, req.body, store_unavailable_reply())
            task = asyncio.create_task(answer)
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
        return BoltResponse(status=200, body="")


async def answer_store_error(
    error: Exception, body: Mapping[str, object], context: Mapping[str, object]
) -> bool:
    """For the app's error handler: True when ``error`` is a store outage a listener let
    escape, now told to the person (truthfully: it may have been cut off midway)."""
    if not isinstance(error, StoreUnavailable):
        return False
    log.warning("a listener was cut off by the store: %s", error)
    services = find_services(context)
    if services is not None and acts(body):
        await tell_whoever_acted(services.messenger, body, cut_off())
    return True


def cut_off() -> Reply:
    return error(CUT_OFF_TEXT)


async def tell_whoever_acted(
    messenger: Messenger, body: Mapping[str, object], reply: Reply
) -> None:
    """Whisper to whoever acted where they acted; DM them from Home or when that fails."""
    user = _field(body.get("user"), "id")
    if not user:
        return
    channel = _channel(body)
    routes: list[Route] = [Whisper(messenger, channel, user)] if channel else []
    routes.append(DirectMessage(messenger, user))
    await tell(reply, *routes, about=f"the store-outage answer to {user}")


def _channel(body: Mapping[str, object]) -> str | None:
    channel = _field(body.get("channel"), "id")
    if channel:
        return channel
    view = body.get("view")
    if not isinstance(view, dict) or view.get("type") == "home":
        return None
    return modal_metadata(view.get("private_metadata")).get("channel") or None


def _field(value: object, key: str) -> str | None:
    found = value.get(key) if isinstance(value, dict) else None
    return found[:64] if isinstance(found, str) and found else None
