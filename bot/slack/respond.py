"""Bolt's ``respond()`` over the app's own HTTP session.

Bolt's AsyncRespond opens an aiohttp session, and so a TCP connection, for every reply to
a ``response_url`` and closes it afterwards; the replies here go over the session the Web
API calls keep alive (``response_url`` is on Slack's host too)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_bolt.context.respond.internals import _build_message
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.models.attachments import Attachment
from slack_sdk.models.blocks import Block
from slack_sdk.webhook import WebhookResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack.bolt_context import put_respond

Next = Callable[[], Awaitable[BoltResponse]]


class SessionRespond(AsyncRespond):
    """``respond()`` for one request: Bolt's, posting through ``session``."""

    def __init__(self, *, response_url: str, session: aiohttp.ClientSession) -> None:
        super().__init__(response_url=response_url)
        self.webhook = AsyncWebhookClient(url=response_url, session=session)

    async def __call__(  # Bolt's own signature: listeners call it so
        self,
        text: str | dict[str, Any] = "",
        blocks: Sequence[dict[str, object] | Block] | None = None,
        attachments: Sequence[dict[str, object] | Attachment] | None = None,
        response_type: str | None = None,
        replace_original: bool | None = None,
        delete_original: bool | None = None,
        unfurl_links: bool | None = None,
        unfurl_media: bool | None = None,
        thread_ts: str | None = None,
        metadata: dict[str, object] | None = None,
    ) -> WebhookResponse:
        if isinstance(text, dict):  # a whole message, as Bolt accepts it
            return await self.webhook.send_dict(_build_message(**text))
        message = _build_message(
            text=text,
            blocks=blocks,
            attachments=attachments,
            response_type=response_type,
            replace_original=replace_original,
            delete_original=delete_original,
            unfurl_links=unfurl_links,
            unfurl_media=unfurl_media,
            thread_ts=thread_ts,
            metadata=metadata,
        )
        return await self.webhook.send_dict(message)


class RespondOverSession(AsyncMiddleware):
    """Gives listeners a ``respond`` that posts through the Web API client's session (when
    the client has one; else Bolt's own stays)."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession | None]) -> None:
        self.session = session

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Next
    ) -> BoltResponse:
        url = req.context.response_url
        session = self.session()
        if url and session is not None and not session.closed:
            put_respond(req.context, SessionRespond(response_url=url, session=session))
        return await next()
