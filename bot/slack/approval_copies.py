"""The approval prompt's DM copies for on-call approvers (SPEC §16), in Slack: the same
prompt and buttons, headed with where the request lives, posted into the bot's DM with
each person; and the thread notes of escalations."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from bot.core.api import ChangeRequestRecord, view_of
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render import requests
from bot.slack.render.primitives import SlackMessage, context, user_ref

log = logging.getLogger(__name__)


def prompt_minutes(record: ChangeRequestRecord) -> int:
    """The expiry the prompt stated when it was posted."""
    if record.expires_at is None:
        return 0
    return max(1, round((record.expires_at - record.created_at).total_seconds() / 60))


def dm_copy(record: ChangeRequestRecord, message: SlackMessage) -> SlackMessage:
    """``message`` (the prompt as it is now) as its DM copy: headed with who asks where."""
    head = (
        f":pager: You are on call: {user_ref(record.requester)} asks for approval of "
        f"`{record.id}` in <#{record.channel}>."
    )
    return SlackMessage(text=f"{head} {message.text}", blocks=[context(head), *message.blocks])


class SlackApprovalCopies:
    """The core's CopyPoster over a Messenger."""

    def __init__(self, messenger: Messenger) -> None:
        self.messenger = messenger

    async def post_copy(self, record: ChangeRequestRecord, user: str) -> tuple[str, str] | None:
        prompt = requests.approval_prompt(view_of(record), expire_minutes=prompt_minutes(record))
        try:
            return await self.messenger.post_to_person(user, dm_copy(record, prompt))
        except SlackDeliveryError as exc:
            log.warning("%s: could not DM the prompt to %s: %s", record.id, user, exc.code)
            return None

    async def thread_note(
        self, record: ChangeRequestRecord, text: str, mentions: Iterable[str]
    ) -> None:
        note = requests.thread_note(text, icon=":pager:", mentions=mentions)
        try:
            await self.messenger.post(record.channel, note, thread_ts=record.root_ts)
        except SlackDeliveryError as exc:
            log.warning("%s: could not post the escalation note: %s", record.id, exc.code)
