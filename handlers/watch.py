"""The watcher's buttons and form: approve_remediation, reject_remediation (which asks for
a comment in a modal first) and that modal's submission; open_update_form and
open_action_form under a health alert; extend_reservation under a reminder."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext

from bot.core.api import FormKind, FormRequest
from bot.slack.bolt_context import Services, services
from bot.slack.interactions import Whisper, modal_metadata, tell
from bot.slack.render import watch as render
from bot.slack.render.primitives import error as render_error
from handlers.clicks import UNREADABLE, Click, on_click
from handlers.commands import open_modal
from handlers.payloads import Payload, SlashCommand, ViewSubmission, parse, state_values


def register(app: AsyncApp) -> None:
    app.action(render.APPROVE_REMEDIATION)(handle_approve)
    app.action(render.REJECT_REMEDIATION)(handle_reject)
    app.view(render.REJECT_REMEDIATION_CALLBACK)(handle_reject_submission)
    app.action(render.OPEN_UPDATE_FORM)(handle_open_form)
    app.action(render.OPEN_ACTION_FORM)(handle_open_form)
    app.action(render.EXTEND_RESERVATION)(handle_open_form)


@on_click
async def handle_approve(click: Click, services: Services) -> None:
    desk = services.desk
    reply = await desk.decide(
        user=click.user, channel=click.channel, record_id=click.value, verb="approve"
    )
    await click.answer(reply, about="a remediation approval")


@on_click
async def handle_reject(click: Click, services: Services) -> None:
    desk = services.desk
    refusal = await desk.may_decide(
        user=click.user, channel=click.channel, record_id=click.value, verb="reject"
    )
    if refusal is not None:
        await click.answer(refusal, about="a refused remediation reject")
        return
    await click.open_form(
        render.reject_modal(click.value, click.channel, click.thread_ts), "reject"
    )


async def handle_reject_submission(ack: AsyncAck, body: Payload, context: AsyncBoltContext) -> None:
    given = services(context)
    desk, messenger = given.desk, given.messenger
    submission = parse(ViewSubmission, body)
    comment = (state_values(submission.view).get("comment") or "").strip() if submission else ""
    if submission is None or len(comment) < 3:
        await ack(response_action="errors", errors={"comment": "Say why, in 3 characters or more."})
        return
    await ack()
    meta = modal_metadata(submission.view.private_metadata)
    channel, user = meta.get("channel", ""), submission.user.id
    reply = await desk.decide(
        user=user, channel=channel, record_id=meta.get("record", ""), verb="reject", comment=comment
    )
    whisper = Whisper(messenger, channel, user, meta.get("thread_ts"))
    await tell(reply, whisper, about=f"the outcome of {user}'s rejection")


@on_click
async def handle_open_form(click: Click, services: Services) -> None:
    """A next step under a health alert or a reminder: the prefilled form, as `/gpu
    update|action` opens it (and under the same policy); extending a reservation starts in
    its end time."""
    ops = services.ops
    project, _, cluster_id = click.value.partition(":")
    if not project or not cluster_id:
        await click.answer(render_error(UNREADABLE), about="an unreadable click")
        return
    kind: FormKind = "choice" if click.action_id == render.OPEN_ACTION_FORM else "single"
    extend = click.action_id == render.EXTEND_RESERVATION
    request = FormRequest(
        kind=kind,
        project=project,
        cluster_id=cluster_id,
        channel=click.channel,
        focus="reservation_end_time" if extend else None,
    )
    opener = SlashCommand(
        user_id=click.user, channel_id=click.channel, trigger_id=click.action.trigger_id
    )
    await open_modal(ops, click.messenger, click.respond, opener, request)
