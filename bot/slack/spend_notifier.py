"""SlackSpendNotifier: the spend port (bot.core.spend.notifier) in Slack — a budget's
warning in a notify channel, and the weekly digest with its chart, shared by the external
upload flow as ``/gpu timeline``'s file is."""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence

from bot.core.api import NotDelivered
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render.requests import thread_note
from bot.slack.render.spend import spend_messages
from bot.slack.upload_bytes import FileUpload

log = logging.getLogger(__name__)


class SlackSpendNotifier:
    def __init__(self, messenger: Messenger) -> None:
        self.messenger = messenger

    async def announce(self, channel: str, text: str) -> str:
        try:
            return await self.messenger.post(channel, thread_note(text))
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc

    async def digest(
        self, channel: str, scopes: Sequence[Sequence[str]], chart: bytes, filename: str
    ) -> str:
        first, *rest = spend_messages(scopes)
        try:
            ts = await self.messenger.post(channel, first)
            for more in rest:  # a long digest goes on in its thread
                await self.messenger.post(channel, more, thread_ts=ts)
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc
        upload = FileUpload(
            channel=channel,
            filename=filename,
            title="Spend per day against the budget",
            content=io.BytesIO(chart),
            length=len(chart),
            initial_comment="Spend per day this month, against each budget's line.",
            thread_ts=ts,
        )
        try:
            await self.messenger.upload_file(upload)
        except SlackDeliveryError as exc:  # the figures are out; the chart is said missing
            log.warning("the digest's chart was not shared: %s", exc.code)
            with_note = f"The chart could not be shared: {exc.user_message}"
            try:
                await self.messenger.post(channel, thread_note(with_note), thread_ts=ts)
            except SlackDeliveryError:
                log.warning("nor could the digest say so: %s", exc.code)
        return ts
