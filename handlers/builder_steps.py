"""The Workflow Builder step ``request_gpu_change`` (``function_executed``, SPEC §11)."""

from __future__ import annotations

import logging

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from bot.core.api import StepStart
from bot.redact import register_secret
from bot.slack.bolt_context import services
from handlers.commands import internal_error
from handlers.payloads import FunctionExecuted, Payload, parse

log = logging.getLogger(__name__)

STEP_CALLBACK_ID = "request_gpu_change"


def register(app: AsyncApp) -> None:
    # Bolt acknowledges the event before the listener runs (auto_acknowledge).
    app.function(STEP_CALLBACK_ID)(handle_step)


async def handle_step(event: Payload, context: AsyncBoltContext) -> None:
    steps = services(context).steps
    executed = parse(FunctionExecuted, event)
    if executed is None:
        log.warning("ignored a function_executed event that did not fit the expected shape")
        return
    register_secret(executed.bot_access_token)  # never used nor kept, never logged either
    inputs, not_text = executed.step_inputs()
    start = StepStart(
        execution_id=executed.function_execution_id,
        project=inputs["project"],
        cluster_id=inputs["cluster_id"],
        change=inputs["change"],
        reason=inputs["reason"],
        requester=inputs["requester"],
        channel=inputs["channel"],
        not_text=not_text,
    )
    try:
        await steps.run(start)
    except Exception as exc:  # a bug must not leave the workflow waiting forever
        log.exception("workflow step %s failed unexpectedly", start.execution_id)
        await steps.give_up(start.execution_id, internal_error(exc))
