"""SlackStepPort: the core's StepPort — ends a Workflow Builder step with
``functions.completeSuccess`` / ``functions.completeError``, using the token Slack gave
with the step's ``function_executed`` event (as Bolt's ``complete`` and ``fail`` do)."""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.core.steps import CompletionFailed
from bot.core.store.steps import StepOutcome, StepRecord
from bot.redact import register_secret
from bot.slack import blocks as render
from bot.slack.messenger import Messenger, SlackDeliveryError, build_web_client
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
    """Ends steps through the Web API of ``client`` (its URL and HTTP session)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def complete(self, step: StepRecord) -> None:
        register_secret(step.token)  # read back from the store: never in a log line
        client = build_web_client(step.token, self.client.base_url, self.client.session)
        messenger = Messenger(client)
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
