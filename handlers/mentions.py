"""@gpuops mentions: `show`, `timeline` and `help`, answered in the thread they came from."""

from __future__ import annotations

import logging
import re

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from bot.core.api import TimelineRequest
from bot.slack.bolt_context import services
from bot.slack.interactions import Post, Route, Whisper, tell
from bot.slack.timeline import TimelineSender
from handlers.commands import internal_error
from handlers.payloads import AppMention, Payload, parse

_LEADING_MENTION = re.compile(r"^\s*<@[A-Z0-9]+>\s*")


def register(app: AsyncApp) -> None:
    app.event("app_mention")(handle_mention)


async def handle_mention(event: Payload, context: AsyncBoltContext, logger: logging.Logger) -> None:
    given = services(context)
    ops, messenger = given.ops, given.messenger
    mention = parse(AppMention, event)
    if mention is None:
        logger.warning("ignored an app_mention that did not fit the expected shape")
        return
    text = _LEADING_MENTION.sub("", mention.text)
    try:
        reply = await ops.handle_mention(mention.user, mention.channel, text)
    except Exception as exc:  # a bug must not leave the person with silence
        logger.exception("a mention failed unexpectedly")
        reply = internal_error(exc)
    thread_ts = mention.thread_ts or mention.ts
    if isinstance(reply, TimelineRequest):
        try:
            failed = await TimelineSender(ops.timeline, messenger).send(reply, thread_ts=thread_ts)
        except Exception as exc:  # a bug must not leave the person with silence
            logger.exception("a timeline mention failed unexpectedly")
            failed = internal_error(exc)
        if failed is None:
            return
        reply = failed
    where: Route = (
        Post(messenger, mention.channel, thread_ts)
        if reply.public
        else Whisper(messenger, mention.channel, mention.user, thread_ts)
    )
    await tell(reply, where, about=f"the answer to a mention in {mention.channel}")
