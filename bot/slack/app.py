"""The Bolt app: its middleware in order, the listeners it is given, and the aiohttp route
that feeds it ``POST /slack/events``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.bolt_context import Services
from bot.slack.deadline import Deadline, answer_before_deadline
from bot.slack.middleware import (
    DeduplicateDeliveries,
    DeliveryLog,
    DropMalformedPayloads,
    InjectServices,
    RememberTeam,
    malformed_interaction,
)
from bot.slack.outages import AnswerStoreOutages, answer_store_error
from bot.slack.respond import RespondOverSession

log = logging.getLogger(__name__)
# The logger AsyncApp.__init__ warns on (slack_bolt.logger.get_bolt_logger(AsyncApp)).
BOLT_APP_LOGGER = "slack_bolt.AsyncApp"


class DropTokenUnusedWarning(logging.Filter):
    """Drops Bolt's "As you gave `client` as well, `token` will be unused." and nothing
    else: AsyncApp reads SLACK_BOT_TOKEN from the environment when no token is passed (so
    no argument silences it while the variable is set, as it is in production), and warns
    that it is unused beside our client, which was built with that very token."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def quiet_token_unused_warning() -> None:
    """Install DropTokenUnusedWarning on Bolt's app logger, once however often it is called."""
    bolt = logging.getLogger(BOLT_APP_LOGGER)
    if not any(isinstance(f, DropTokenUnusedWarning) for f in bolt.filters):
        bolt.addFilter(DropTokenUnusedWarning())


Listeners = Callable[[AsyncApp], None]


def build_bolt_app(
    *,
    client: AsyncWebClient,
    signing_secret: str | None,
    services: Services,
    deliveries: DeliveryLog,
    register_listeners: Listeners,
) -> AsyncApp:
    """A Bolt app that verifies signatures, drops unreadable payloads, acts once per
    delivery and gives the listeners ``services`` in their context."""
    quiet_token_unused_warning()
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret or "socket-mode-has-no-signing-secret",
        request_verification_enabled=True,
        raise_error_for_unhandled_request=False,
        # The listener runs in the dispatch itself (no 10 ms poll for its ack): its ack()
        # writes the answer (bot.slack.deadline.Answer) and clicks and events are
        # acknowledged by DeduplicateDeliveries before anything else runs.
        process_before_response=True,
    )
    app.use(RespondOverSession(lambda: client.session))
    app.use(DropMalformedPayloads())
    app.use(DeduplicateDeliveries(deliveries))
    app.use(RememberTeam())
    app.use(InjectServices(services))
    app.use(AnswerStoreOutages())
    register_listeners(app)

    @app.error
    async def on_error(
        error: Exception, body: dict[str, object], context: AsyncBoltContext, logger: logging.Logger
    ) -> None:
        if not await answer_store_error(error, body, context):
            logger.error("unhandled error in a handler: %s", type(error).__name__)

    return app


class SlackEventsEndpoint:
    """``POST /slack/events``: every signed Slack request to Bolt, answered within the
    budget (bot.slack.deadline) and even when Bolt cannot read it."""

    def __init__(self, bolt: AsyncApp, signing_secret: str | None) -> None:
        self.bolt = bolt
        self.signing_secret = signing_secret

    async def handle(self, request: web.Request) -> web.StreamResponse:
        # Bolt (its built-in middleware too) indexes some payload fields unguarded
        # (view.type, event.type …): such a payload gets an answer, not a 500 — after the
        # signature check Bolt did not get to.
        deadline = Deadline()
        written: list[web.StreamResponse] = []

        async def send(bolt_response: BoltResponse) -> None:
            written.append(await self._write(request, bolt_response))

        try:
            bolt_request = await to_bolt_request(request)
            problem = malformed_interaction(bolt_request.body)
            if problem is None:
                await answer_before_deadline(self.bolt, bolt_request, deadline, send)
        except Exception as exc:
            problem = type(exc).__name__
        if written:
            return written[0]
        if problem is not None and not self._signed(await request.text(), request.headers):
            return web.Response(status=401)
        log.warning("ignored a Slack request Bolt could not read (%s)", problem)
        return web.Response(status=200)

    @staticmethod
    async def _write(request: web.Request, bolt_response: BoltResponse) -> web.StreamResponse:
        """Write the answer now (aiohttp sends nothing more for a prepared response)."""
        response = await to_aiohttp_response(bolt_response)
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError as exc:  # the listener that acked goes on regardless
            log.info("Slack went away before its answer was written (%s)", type(exc).__name__)
        return response

    def _signed(self, body: str, headers: Mapping[str, str]) -> bool:
        if self.signing_secret is None:
            return False
        return SignatureVerifier(self.signing_secret).is_valid_request(body, dict(headers))
