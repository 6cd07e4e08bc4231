"""SlackStepPort: the core's StepPort — ends a Workflow Builder step with
``functions.completeSuccess`` / ``functions.completeError`` and the bot token.

Slack takes the bot token of the app that owns the function for these methods; the token
it sends with ``function_executed`` would do too, but it expires 15 minutes after it is
issued, long before most approvals, and keeping it would store a secret. So no step
token is used or kept."""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.core.api import StepOutcome, StepRecord
from bot.core.steps import CompletionFailed
from bot.slack import blocks as render
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.text import escape

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
                outputs = {str(k): str(v) for k, v in payload.items()}
                outputs["summary"] = escape(outputs.get("summary", ""))
                await messenger.complete_function(step.execution_id, outputs=outputs)
            else:
                await messenger.complete_function(step.execution_id, error=error_text(payload))
        except SlackDeliveryError as exc:
            raise CompletionFailed(exc.code, retry=exc.code not in _FINAL) from None


def error_text(payload: dict[str, object]) -> str:
    """The text a person would have seen for the step's refusal (escaped as in a message)."""
    mentions = payload.get("mentions")
    allowed = [str(m) for m in mentions] if isinstance(mentions, list) else []
    return render.error(str(payload.get("error", "")), mentions=allowed).text
