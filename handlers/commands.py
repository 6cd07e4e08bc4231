"""The /gpu slash command."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.core.answers import Reply, error, store_unavailable
from bot.core.forms import FormRequest
from bot.core.service import CommandService
from bot.core.store import StoreUnavailable
from bot.slack import blocks as render
from bot.slack.messenger import Messenger, SlackDeliveryError
from handlers.payloads import SlashCommand, parse

log = logging.getLogger(__name__)


def register(app: AsyncApp) -> None:
    app.command("/gpu")(handle_gpu)


async def handle_gpu(ack: Any, body: dict[str, Any], respond: Any, context: Any) -> None:
    await ack()
    ops: CommandService = context["gpuops"]
    messenger: Messenger = context["messenger"]
    # Everything after the ack queues here, behind other requests' acks, not inside them.
    async with ops.pacer.turn():
        key = context.get("delivery_key")  # set by bot.slack.middleware.DeduplicateDeliveries
        try:
            if key is not None and not await ops.first_delivery(key, body.get("text")):
                log.info("ignored a repeated delivery of a slash command")
                return
        except StoreUnavailable:
            await deliver(respond, store_unavailable())
            return
        command = parse(SlashCommand, body)
        if command is None:
            await deliver(respond, error("I could not read that command; try /gpu help."))
            return
        try:
            outcome = await ops.handle_command(command.user_id, command.channel_id, command.text)
        except Exception as exc:  # a bug must not leave the person with silence
            log.exception("/gpu failed unexpectedly")
            await deliver(respond, internal_error(exc))
            return
    if isinstance(outcome, FormRequest):
        await open_modal(ops, messenger, respond, command, outcome)
        return
    await deliver(respond, outcome)


def internal_error(exc: Exception) -> Reply:
    return error(
        f"gpuops hit an internal error ({type(exc).__name__}) and could not finish this; "
        "it is logged for the gpuops admins. Check the channel before trying again."
    )


async def deliver(respond: Any, reply: Reply) -> None:
    """Answer through the command's response_url (works even where the bot is not a member)."""
    try:
        await respond(
            response_type="in_channel" if reply.public else "ephemeral",
            replace_original=False,
            **render.reply_message(reply).as_kwargs(),
        )
    except Exception as exc:  # the person must not be left with silence: log it loudly
        log.error("could not deliver a reply through response_url: %s", type(exc).__name__)


async def open_modal(
    ops: CommandService,
    messenger: Messenger,
    respond: Any,
    command: SlashCommand,
    request: FormRequest,
) -> None:
    callback = render.FORM_CALLBACKS[request.kind]
    if not command.trigger_id:
        await deliver(
            respond,
            error("Slack sent no trigger to open a form; pass the fields on the command line."),
        )
        return
    try:
        view_id = await messenger.open_view(
            command.trigger_id, render.loading_modal(callback, "gpuops", request.metadata())
        )
        view = render.change_form(await ops.forms.open(command.user_id, request))
        await messenger.update_view(view_id, view)
    except SlackDeliveryError as exc:
        await deliver(
            respond,
            error(
                f"I could not open the form ({exc.code}); pass the fields on the command line, "
                "e.g. `/gpu update <project> <cluster_id> num_gpus=16`."
            ),
        )
