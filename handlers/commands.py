"""The /gpu slash command."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.context.respond.async_respond import AsyncRespond

from bot.core.api import (
    CommandService,
    FormRequest,
    Reply,
    StoreUnavailable,
    TimelineRequest,
    building,
    error,
    store_unavailable,
)
from bot.slack.bolt_context import delivery_key, services
from bot.slack.interactions import Respond, ResponseUrl, tell
from bot.slack.messenger import Messenger, OpenedView, SlackDeliveryError
from bot.slack.render import answers, forms
from bot.slack.timeline import TimelineSender
from handlers.payloads import Payload, SlashCommand, parse

log = logging.getLogger(__name__)


def register(app: AsyncApp) -> None:
    app.command("/gpu")(handle_gpu)


async def handle_gpu(
    ack: AsyncAck, body: Payload, respond: AsyncRespond, context: AsyncBoltContext
) -> None:
    await ack()
    given = services(context)
    ops, messenger = given.ops, given.messenger
    command = parse(SlashCommand, body)
    if command is None:
        await deliver(respond, error("I could not read that command; try /gpu help."))
        return
    # Forms first: the trigger expires 3 s after the command, so the form opens (loading)
    # before any provider call, group look-up or queueing behind other commands' work.
    read = ops.read(command.channel_id, command.text)  # read once: the form it opens, if any
    wanted = read.form
    loading = None
    if wanted is not None:
        if not await first_delivery(ops, context, respond, command.text):
            return
        loading = await open_loading(messenger, respond, command, wanted)
        if loading is None:
            return  # the person was told why the form could not open
    # Everything else after the ack queues here, behind other requests' acks, not inside them.
    async with ops.pacer.turn():
        if wanted is None and not await first_delivery(ops, context, respond, command.text):
            return
        try:
            outcome = await ops.handle_command(command.user_id, command.channel_id, read)
        except Exception as exc:  # a bug must not leave the person with silence
            log.exception("/gpu failed unexpectedly")
            outcome = internal_error(exc)
    if isinstance(outcome, TimelineRequest):  # never a form: wanted is None
        await send_timeline(ops, messenger, respond, outcome)
    elif loading is not None and wanted is not None:
        await fill_form(ops, messenger, respond, command, wanted, loading, outcome)
    elif isinstance(outcome, FormRequest):
        await open_modal(ops, messenger, respond, command, outcome)
    else:
        await deliver(respond, outcome)


async def open_loading(
    messenger: Messenger, respond: Respond, command: SlashCommand, request: FormRequest
) -> OpenedView | None:
    """Open the form's loading view at once; None (and the person told) when it cannot."""
    if not command.trigger_id:
        await deliver(
            respond,
            error("Slack sent no trigger to open a form; pass the fields on the command line."),
        )
        return None
    callback = forms.FORM_CALLBACKS[request.kind]
    loading = forms.loading_modal(callback, "gpuops", request.metadata())
    try:
        return await messenger.open(command.trigger_id, loading)
    except SlackDeliveryError as exc:
        await deliver(respond, form_failed(exc))
        return None


async def fill_form(
    ops: CommandService,
    messenger: Messenger,
    respond: Respond,
    command: SlashCommand,
    wanted: FormRequest,
    loading: OpenedView,
    outcome: Reply | FormRequest,
) -> None:
    """Replace the loading view with the form, or with the answer that stands in its place
    (a refusal: also answered in the channel, where it stays once the form is closed)."""
    callback = forms.FORM_CALLBACKS[wanted.kind]
    if isinstance(outcome, FormRequest):
        view = forms.change_form(await ops.forms.open(command.user_id, outcome))
    else:
        await deliver(respond, outcome)
        view = forms.reply_modal(callback, answers.reply_message(outcome), wanted.metadata())
    try:
        await messenger.update_view(loading.id, view, hash=loading.hash)
    except SlackDeliveryError as exc:
        log.warning("could not fill a form: %s", exc.code)
        if isinstance(outcome, FormRequest):
            await deliver(respond, form_failed(exc))


async def send_timeline(
    ops: CommandService, messenger: Messenger, respond: Respond, request: TimelineRequest
) -> None:
    """Say the file is coming, then build and share it (outside the pacer: reading a busy
    week of the store must not hold up other people's commands)."""
    await deliver(respond, building(request))
    try:
        failed = await TimelineSender(ops.timeline, messenger).send(request)
    except Exception as exc:  # a bug must not leave the person with silence
        log.exception("/gpu timeline failed unexpectedly")
        failed = internal_error(exc)
    if failed is not None:
        await deliver(respond, failed)


def form_failed(exc: SlackDeliveryError) -> Reply:
    return error(
        f"I could not open the form ({exc.code}); pass the fields on the command line, "
        "e.g. `/gpu update <project> <cluster_id> num_gpus=16`."
    )


async def first_delivery(
    ops: CommandService, context: AsyncBoltContext, respond: Respond, text: str
) -> bool:
    """False for a repeated delivery of the same command (it must act once), and for a
    command the store is needed for while it is unavailable (the person is told so; help,
    list and show go on without the de-dup, see CommandService.first_delivery)."""
    key = delivery_key(context)  # set by bot.slack.middleware.DeduplicateDeliveries
    try:
        if key is None or await ops.first_delivery(key, text):
            return True
    except StoreUnavailable:
        await deliver(respond, store_unavailable())
        return False
    log.info("ignored a repeated delivery of a slash command")
    return False


def internal_error(exc: Exception) -> Reply:
    return error(
        f"gpuops hit an internal error ({type(exc).__name__}) and could not finish this; "
        "it is logged for the gpuops admins. Check the channel before trying again."
    )


async def deliver(respond: Respond, reply: Reply) -> None:
    """Answer through the command's response_url (works even where the bot is not a member)."""
    await tell(reply, ResponseUrl(respond), about="a reply through response_url")


async def open_modal(
    ops: CommandService,
    messenger: Messenger,
    respond: Respond,
    command: SlashCommand,
    request: FormRequest,
) -> None:
    callback = forms.FORM_CALLBACKS[request.kind]
    if not command.trigger_id:
        await deliver(
            respond,
            error("Slack sent no trigger to open a form; pass the fields on the command line."),
        )
        return
    try:
        opened = await messenger.open(
            command.trigger_id, forms.loading_modal(callback, "gpuops", request.metadata())
        )
        view = forms.change_form(await ops.forms.open(command.user_id, request))
        await messenger.update_view(opened.id, view, hash=opened.hash)
    except SlackDeliveryError as exc:
        await deliver(respond, form_failed(exc))
