"""Modal submissions: gpu_update, gpu_action, gpu_break_glass."""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.core.answers import Reply, error, store_unavailable
from bot.core.forms import ReadySubmission, SubmissionErrors
from bot.core.requests.decisions import NeedsBreakGlass
from bot.core.service import CommandService
from bot.slack import blocks as render
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.middleware import STORE_UNAVAILABLE
from handlers.payloads import ViewSubmission, parse, state_values

log = logging.getLogger(__name__)


def register(app: AsyncApp) -> None:
    for callback_id in render.FORM_CALLBACKS.values():
        app.view(callback_id)(handle_change_submission)
    app.view(render.BREAK_GLASS_CALLBACK)(handle_break_glass)


async def handle_change_submission(ack: Any, body: dict[str, Any], context: Any) -> None:
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    submission = parse(ViewSubmission, body)
    if submission is None:
        await ack(
            response_action="errors",
            errors={"num_gpus": "This form could not be read; run the command again."},
        )
        return
    result = await ops.check_submission(
        submission.user.id,
        render.form_kind(submission.view.callback_id),
        submission.view.private_metadata,
        state_values(submission.view),
    )
    if isinstance(result, SubmissionErrors):
        await ack(response_action="errors", errors=result.errors)
        return
    await ack()
    if context.get(STORE_UNAVAILABLE):  # the submission could not be checked for repeats
        await whisper_or_dm(messenger, result, submission.user.id, store_unavailable())
        return
    reply = await ops.submit(submission.user.id, result)
    await whisper_or_dm(messenger, result, submission.user.id, reply)


async def whisper_or_dm(
    messenger: Messenger, where: ReadySubmission | str, user: str, reply: Reply
) -> None:
    """Whisper to the person in the channel; DM them if the bot cannot post there."""
    channel = where.channel if isinstance(where, ReadySubmission) else where
    message = render.reply_message(reply)
    try:
        await messenger.ephemeral(channel, user, message)
    except SlackDeliveryError as exc:
        try:
            await messenger.post(user, message)
        except SlackDeliveryError:
            log.error("could not tell %s the outcome of a form (%s)", user, exc.code)


async def handle_break_glass(ack: Any, body: dict[str, Any], context: Any) -> None:
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    submission = parse(ViewSubmission, body)
    values = state_values(submission.view) if submission else {}
    reason = (values.get("reason") or "").strip()
    if submission is None or len(reason) < 10:
        await ack(
            response_action="errors", errors={"reason": "Give a reason of at least 10 characters."}
        )
        return
    meta = _metadata(submission.view.private_metadata)
    await ack()
    if context.get(STORE_UNAVAILABLE):  # the submission could not be checked for repeats
        where = meta.get("channel", submission.user.id)
        await whisper_or_dm(messenger, where, submission.user.id, store_unavailable())
        return
    result = await ops.decide(
        user=submission.user.id,
        channel=meta.get("channel", ""),
        request_id=meta.get("request_id", ""),
        decision="approve",
        break_glass_reason=reason,
    )
    if isinstance(result, Reply):
        await whisper_or_dm(
            messenger, meta.get("channel", submission.user.id), submission.user.id, result
        )
    elif isinstance(result, NeedsBreakGlass):
        await whisper_or_dm(
            messenger,
            meta.get("channel", submission.user.id),
            submission.user.id,
            error("Break glass needs a reason."),
        )


def _metadata(raw: str) -> dict[str, str]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
