"""The watcher's buttons and form: approve_remediation, reject_remediation (which asks for
a comment in a modal first) and that modal's submission; open_update_form and
open_action_form under a health alert; extend_reservation under a reminder."""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.core.answers import Reply, error
from bot.core.api import RemediationDesk
from bot.core.forms import FormKind, FormRequest
from bot.core.service import CommandService
from bot.slack import watch_blocks as render
from bot.slack.blocks import reply_message
from bot.slack.messenger import Messenger, SlackDeliveryError
from handlers.actions import whisper
from handlers.commands import open_modal
from handlers.payloads import BlockAction, SlashCommand, ViewSubmission, parse, state_values

log = logging.getLogger(__name__)

_UNREADABLE = "I could not read that click; try again."


def register(app: AsyncApp) -> None:
    app.action(render.APPROVE_REMEDIATION)(handle_approve)
    app.action(render.REJECT_REMEDIATION)(handle_reject)
    app.view(render.REJECT_REMEDIATION_CALLBACK)(handle_reject_submission)
    app.action(render.OPEN_UPDATE_FORM)(handle_open_form)
    app.action(render.OPEN_ACTION_FORM)(handle_open_form)
    app.action(render.EXTEND_RESERVATION)(handle_open_form)


def _click(body: dict[str, Any]) -> tuple[BlockAction, str, str] | None:
    action = parse(BlockAction, body)
    if action is None or action.channel_id is None or not action.actions[0].value:
        return None
    return action, action.channel_id, str(action.actions[0].value)


async def handle_approve(ack: Any, body: dict[str, Any], context: Any, respond: Any) -> None:
    await ack()
    desk: RemediationDesk = context["watch"]
    messenger: Messenger = context["messenger"]
    click = _click(body)
    if click is None:
        await respond(
            response_type="ephemeral",
            replace_original=False,
            text="I could not read that click; try again.",
        )
        return
    action, channel, record_id = click
    reply = await desk.decide(
        user=action.user.id, channel=channel, record_id=record_id, verb="approve"
    )
    await whisper(messenger, respond, channel, action.user.id, reply, action.thread_ts)


async def handle_reject(ack: Any, body: dict[str, Any], context: Any, respond: Any) -> None:
    await ack()
    desk: RemediationDesk = context["watch"]
    messenger: Messenger = context["messenger"]
    click = _click(body)
    if click is None:
        await respond(
            response_type="ephemeral",
            replace_original=False,
            text="I could not read that click; try again.",
        )
        return
    action, channel, record_id = click
    refusal = await desk.may_decide(
        user=action.user.id, channel=channel, record_id=record_id, verb="reject"
    )
    if refusal is not None:
        await whisper(messenger, respond, channel, action.user.id, refusal, action.thread_ts)
        return
    try:
        if not action.trigger_id:
            raise SlackDeliveryError("views.open", "no_trigger", None)
        await messenger.open_view(
            action.trigger_id, render.reject_modal(record_id, channel, action.thread_ts)
        )
    except SlackDeliveryError as exc:
        failed = error(f"I could not open the reject form ({exc.code}); try again.")
        await whisper(messenger, respond, channel, action.user.id, failed, action.thread_ts)


async def handle_reject_submission(ack: Any, body: dict[str, Any], context: Any) -> None:
    desk: RemediationDesk = context["watch"]
    messenger: Messenger = context["messenger"]
    submission = parse(ViewSubmission, body)
    comment = (state_values(submission.view).get("comment") or "").strip() if submission else ""
    if submission is None or len(comment) < 3:
        await ack(response_action="errors", errors={"comment": "Say why, in 3 characters or more."})
        return
    await ack()
    meta = _metadata(submission.view.private_metadata)
    channel, user = meta.get("channel", ""), submission.user.id
    reply = await desk.decide(
        user=user, channel=channel, record_id=meta.get("record", ""), verb="reject", comment=comment
    )
    await _tell(messenger, channel, user, reply, meta.get("thread_ts"))


async def _tell(
    messenger: Messenger, channel: str, user: str, reply: Reply, thread_ts: str | None
) -> None:
    message = reply_message(reply)
    try:
        await messenger.ephemeral(channel, user, message, thread_ts=thread_ts)
    except SlackDeliveryError as exc:
        log.warning("could not tell %s how their rejection went: %s", user, exc.code)


def _metadata(raw: str) -> dict[str, str]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if v is not None}


async def handle_open_form(ack: Any, body: dict[str, Any], context: Any, respond: Any) -> None:
    """A next step under a health alert or a reminder: the prefilled form, as `/gpu
    update|action` opens it (and under the same policy); extending a reservation starts in
    its end time."""
    await ack()
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    click = _click(body)
    project, _, cluster_id = click[2].partition(":") if click else ("", "", "")
    if click is None or not project or not cluster_id:
        await respond(response_type="ephemeral", replace_original=False, text=_UNREADABLE)
        return
    action, channel, _ = click
    kind: FormKind = (
        "action" if action.actions[0].action_id == render.OPEN_ACTION_FORM else "update"
    )
    extend = action.actions[0].action_id == render.EXTEND_RESERVATION
    request = FormRequest(
        kind=kind,
        project=project,
        cluster_id=cluster_id,
        channel=channel,
        focus="reservation_end_time" if extend else None,
    )
    opener = SlashCommand(user_id=action.user.id, channel_id=channel, trigger_id=action.trigger_id)
    await open_modal(ops, messenger, respond, opener, request)
