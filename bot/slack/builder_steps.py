"""SlackStepPort: the core's StepPort — ends a Workflow Builder step with
``functions.completeSuccess`` / ``functions.completeError`` and the bot token.

Slack takes the bot token of the app that owns the function for these methods (they need no
scope, and a bot token is among the token types Slack lists for them); the token it sends
with ``function_executed`` would do too, but it lives only while the execution runs and
keeping it for a step that waits on an approval would store a secret. So no step token is
used or kept.

Slack shows a step's error and its outputs as plain text: they are sent as written, not
escaped as mrkdwn (``&lt;`` would be read as such)."""

from __future__ import annotations

import re

from slack_sdk.web.async_client import AsyncWebClient

from bot.core.api import CompletionFailed, StepOutcome, StepRecord
from bot.slack.messenger import Messenger, SlackDeliveryError

# A bare channel link or mention as the core writes them (``<#C…>``, ``<@U…>``): shown as
# ``#C…`` / ``@U…`` in plain text.
_ENTITY = re.compile(r"<([#@])([A-Z0-9]{2,32})>")

# Answers after which telling Slack again cannot help: the execution is over or gone, the
# token is no longer good, or the call itself is wrong.
_FINAL = frozenset(
    {
        "execution_not_in_running_state",
        "function_execution_not_found",
        "token_revoked",
        "token_expired",
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "parameter_validation_failed",
        "invalid_arguments",
    }
)


class SlackStepPort:
    """Ends steps through ``client``: the bot's Web API client (its token, URL, session)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def complete(self, step: StepRecord) -> None:
        messenger = Messenger(self.client)
        payload = step.payload or {}
        try:
            if step.outcome is StepOutcome.SUCCESS:
                outputs = {str(k): plain_text(str(v)) for k, v in payload.items()}
                await messenger.complete_function(step.execution_id, outputs=outputs)
            else:
                await messenger.complete_function(step.execution_id, error=error_text(payload))
        except SlackDeliveryError as exc:
            raise CompletionFailed(exc.code, retry=exc.code not in _FINAL) from None


def error_text(payload: dict[str, object]) -> str:
    """The text a person would have seen for the step's refusal, as plain text."""
    return plain_text(str(payload.get("error") or "gpuops could not make this request."))


def plain_text(text: str) -> str:
    """A text the core composed, for a field Slack shows as plain text: as written, its
    channel links and mentions as ``#C…`` and ``@U…``."""
    return _ENTITY.sub(r"\1\2", text)
