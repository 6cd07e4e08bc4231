"""Modal submissions: gpu_update, gpu_action, gpu_break_glass, gpu_deny."""

from __future__ import annotations

import asyncio
import logging

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext

from bot.core.api import (
    ChangeAsk,
    CommandService,
    NeedsBreakGlass,
    Reply,
    StoreUnavailable,
    SubmissionErrors,
    error,
    store_unavailable,
)
from bot.slack.bolt_context import Deadline, services
from bot.slack.bolt_context import deadline as answer_deadline
from bot.slack.interactions import DirectMessage, Whisper, modal_metadata, tell
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render import answers, forms
from bot.slack.render.primitives import Block
from handlers.payloads import Payload, ViewSubmission, parse, state_values

log = logging.getLogger(__name__)

ANSWER_MARGIN = 1.0  # seconds kept for answering itself on a busy loop (measured in bench)


def register(app: AsyncApp) -> None:
    for callback_id in forms.FORM_CALLBACKS.values():
        app.view(callback_id)(handle_change_submission)
    app.view(forms.BREAK_GLASS_CALLBACK)(handle_break_glass)
    app.view(forms.DENY_CALLBACK)(handle_deny)


async def handle_change_submission(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    given = services(context)
    ops, messenger = given.ops, given.messenger
    deadline = answer_deadline(context) or Deadline()
    raw = body.get("view")
    raw_view: Block = raw if isinstance(raw, dict) else {}
    submission = parse(ViewSubmission, body)
    if submission is None:
        await ack(
            response_action="errors",
            errors=errors_for_view(
                {"": "This form could not be read; run the command again."}, raw_view
            ),
        )
        return
    checking = asyncio.create_task(
        ops.check_submission(
            submission.user.id,
            forms.form_kind(submission.view.callback_id),
            submission.view.private_metadata,
            state_values(submission.view),
        )
    )
    done, _ = await asyncio.wait({checking}, timeout=max(0.0, deadline.remaining() - ANSWER_MARGIN))
    if checking in done:
        await answer_in_time(ops, messenger, ack, submission, raw_view, checking.result())
        return
    # The checks outlast Slack's deadline: keep the form open on a "checking…" view and
    # tell the person through it (and ephemerally) once they end.
    await ack(
        response_action="update",
        view=forms.checking_modal(submission.view.callback_id, "gpuops", {}),
    )
    try:
        result = await checking
    except Exception:  # a bug must not leave the form saying "checking…" for ever
        log.exception("checking a form failed unexpectedly")
        failed = error("gpuops could not check this form; it is logged. Run the command again.")
        await show(messenger, submission.view.id, _answer_view(submission, failed))
        return
    if isinstance(result, SubmissionErrors):
        again = forms.form_with_problems(raw_view, result.errors)
        if not await show(messenger, submission.view.id, again):  # closed meanwhile
            problems = "; ".join(result.errors.values())
            await whisper_or_dm(
                messenger, result_channel(submission), submission.user.id, error(problems)
            )
        return
    reply, first = await request_once(ops, submission, result)
    if first:  # a second submission of this view leaves the view to the first
        await show(messenger, submission.view.id, _answer_view(submission, reply))
    await whisper_or_dm(messenger, result, submission.user.id, reply)


def _answer_view(submission: ViewSubmission, reply: Reply) -> Block:
    return forms.reply_modal(submission.view.callback_id, answers.reply_message(reply), {})


def result_channel(submission: ViewSubmission) -> str:
    """Where the form's command was typed (its metadata), else the person's DM."""
    return modal_metadata(submission.view.private_metadata).get("channel") or submission.user.id


async def answer_in_time(
    ops: CommandService,
    messenger: Messenger,
    ack: AsyncAck,
    submission: ViewSubmission,
    raw_view: Block,
    result: SubmissionErrors | ChangeAsk,
) -> None:
    if isinstance(result, SubmissionErrors):
        await ack(response_action="errors", errors=errors_for_view(result.errors, raw_view))
        return
    await ack()
    reply, _ = await request_once(ops, submission, result)
    await whisper_or_dm(messenger, result, submission.user.id, reply)


async def request_once(
    ops: CommandService, submission: ViewSubmission, ready: ChangeAsk
) -> tuple[Reply, bool]:
    """Request the change unless this view already did (and say whether this was the first
    submission, whose answer the view shows): a form submitted again (Slack showed an error,
    the person pressed again) is the same view with a new trigger. With the state store
    unavailable nothing is requested and the person is told so (in the view too)."""
    try:
        first = await ops.first_delivery(f"view:{submission.view.id}")
    except StoreUnavailable as exc:
        log.warning("refused a form: %s", exc)
        return store_unavailable(), True
    if not first:
        log.info("ignored a second submission of the same form")
        return error("This form was already submitted; its request is in the channel."), False
    return await ops.submit(ready), True


async def show(messenger: Messenger, view_id: str, view: Block) -> bool:
    """Replace a submitted form's view; False when it is gone (closed by the person). It
    replaces the "checking…" view of a ``response_action: update``, whose hash Slack never
    tells the app: this is the one ``views.update`` sent without one."""
    try:
        await messenger.update_view(view_id, view)
    except SlackDeliveryError as exc:
        log.info("could not update a submitted form: %s", exc.code)
        return False
    return True


def errors_for_view(errors: dict[str, str], view: Block) -> dict[str, str]:
    """Slack rejects a whole errors answer naming a block the form does not have: an error
    for a missing block goes to the form's first input block instead."""
    inputs = [
        str(b.get("block_id"))
        for b in view.get("blocks") or []
        if isinstance(b, dict) and b.get("type") == "input" and b.get("block_id")
    ]
    shown: dict[str, str] = {}
    for key, message in errors.items():
        where = key if key in inputs else (inputs[0] if inputs else key)
        shown[where] = f"{shown[where]} {message}" if where in shown else message
    return shown


async def whisper_or_dm(
    messenger: Messenger, where: ChangeAsk | str, user: str, reply: Reply
) -> None:
    """Whisper to the person in the channel; DM them if the bot cannot post there."""
    channel = where.channel if isinstance(where, ChangeAsk) else where
    routes = Whisper(messenger, channel, user), DirectMessage(messenger, user)
    await tell(reply, *routes, about=f"the outcome of a form to {user}")


async def handle_break_glass(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    given = services(context)
    ops, messenger = given.ops, given.messenger
    submission = parse(ViewSubmission, body)
    values = state_values(submission.view) if submission else {}
    reason = (values.get("reason") or "").strip()
    if submission is None or len(reason) < 10:
        await ack(
            response_action="errors", errors={"reason": "Give a reason of at least 10 characters."}
        )
        return
    meta = modal_metadata(submission.view.private_metadata)
    await ack()
    result = await ops.decide(
        user=submission.user.id,
        channel=meta.get("channel", ""),
        request_id=meta.get("request_id", ""),
        decision="approve",
        break_glass_reason=reason,
    )
    if isinstance(result, NeedsBreakGlass):
        result = error("Break glass needs a reason.")
    if isinstance(result, Reply):
        where = meta.get("channel") or submission.user.id
        await whisper_or_dm(messenger, where, submission.user.id, result)


async def handle_deny(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    """The deny form: deny with the reason given (or none)."""
    given = services(context)
    ops, messenger = given.ops, given.messenger
    await ack()
    submission = parse(ViewSubmission, body)
    if submission is None:
        return
    meta = modal_metadata(submission.view.private_metadata)
    where = meta.get("channel") or submission.user.id
    result = await ops.decide(
        user=submission.user.id,
        channel=meta.get("channel", ""),
        request_id=meta.get("request_id", ""),
        decision="deny",
        reason=state_values(submission.view).get("reason") or None,
    )
    if isinstance(result, Reply):
        await whisper_or_dm(messenger, where, submission.user.id, result)
