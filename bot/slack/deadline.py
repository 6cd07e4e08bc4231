"""One answer deadline for every Slack request: over HTTP and over Socket Mode, Slack gets
an answer within 2.5 s of arrival whatever the listener is waiting on; the listener goes on
and reports in the thread, the view or ephemerally. A listener's ``ack()`` writes the answer
before it returns: no work after the ack runs before Slack has it."""

from __future__ import annotations

import asyncio
import logging
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from bot.logs import log_context
from bot.metrics import SLACK_ANSWERS_PAST_BUDGET
from bot.slack.bolt_context import ANSWER_BUDGET_SECONDS as ANSWER_BUDGET_SECONDS
from bot.slack.bolt_context import Deadline as Deadline
from bot.slack.bolt_context import put_answer

log = logging.getLogger(__name__)

Send = Callable[[BoltResponse], Awaitable[None]]


class Answer(AsyncAck):
    """A request's ``ack()``: its first call hands the response to ``send``, which writes it
    to Slack before the call returns, so whatever the listener does next runs after Slack
    has its answer (no poll), and after the answers of the other requests ready by then.
    Once an answer went out (the listener's, Bolt's, or the empty one at the deadline),
    later calls change nothing."""

    def __init__(self, send: Send) -> None:
        self.response = None  # AsyncAck's whole __init__ (which is untyped)
        self._send = send
        self.sent: asyncio.Future[BoltResponse] = asyncio.get_running_loop().create_future()

    async def __call__(self, *args: Any, **kwargs: Any) -> BoltResponse:
        if self.sent.done():
            return self.sent.result()
        response = await super().__call__(*args, **kwargs)
        await self.give(response)
        # The listener's work goes on behind the other requests ready now, so that of many
        # arriving at once (people typing during an incident) every answer goes out before
        # any of their work starts: no ack waits behind another request's work.
        await asyncio.sleep(0)
        return response

    async def give(self, response: BoltResponse) -> None:
        """Send ``response``, unless an answer was sent already."""
        if self.sent.done():
            return
        self.sent.set_result(response)  # first: a second caller during the write sends nothing
        await self._send(response)


class RunningListeners:
    """Dispatches still running after their request was answered (the listener's work
    after its ack, or a listener past the deadline): kept referenced until they end."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[BoltResponse]] = set()

    def keep(self, task: asyncio.Task[BoltResponse]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def running(self) -> list[asyncio.Task[BoltResponse]]:
        """The dispatches not ended yet (the demo and the tests wait on them)."""
        return [task for task in self._tasks if not task.done()]

    def _done(self, task: asyncio.Task[BoltResponse]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a listener answered early failed: %s", type(task.exception()).__name__)


RUNNING_LISTENERS = RunningListeners()


def _kind(body: object) -> str:
    if not isinstance(body, dict):
        return "unknown"
    if body.get("command"):
        return "command"
    return str(body.get("type") or "unknown")[:32]


async def answer_before_deadline(
    bolt: AsyncApp, request: AsyncBoltRequest, deadline: Deadline, send: Send
) -> None:
    """Dispatch ``request`` to Bolt and ``send`` its answer once: the listener's ``ack()``
    sends it at once; else Bolt's response when the dispatch ends; else an empty 200 at
    ``deadline`` (the listener goes on). Returns once an answer was sent."""
    answer = Answer(send)
    put_answer(request.context, answer, deadline)
    # The listener's task (and every task it starts) copies this context: each line it
    # logs names the user and channel.
    with log_context(user=request.context.user_id, channel=request.context.channel_id):
        task = asyncio.create_task(bolt.async_dispatch(request))
        RUNNING_LISTENERS.keep(task)
        done, _ = await asyncio.wait(
            {task, answer.sent}, timeout=deadline.remaining(), return_when=FIRST_COMPLETED
        )
        if answer.sent.done():
            return
        if task in done:
            await answer.give(acknowledged(task.result()))
            return
        kind = _kind(request.body)
        SLACK_ANSWERS_PAST_BUDGET.labels(kind).inc()
        log.warning(
            "answered a %s empty at the %.1f s budget; its listener goes on", kind, deadline.budget
        )
    await answer.give(BoltResponse(status=200, body=""))


def acknowledged(response: BoltResponse) -> BoltResponse:
    """What Slack is answered for Bolt's ``response``: a signed request no listener wants (an
    event type, a form or a button of an older version; Bolt's 404) is acknowledged empty, or
    Slack retries events and shows people an error (over Socket Mode, Bolt sends nothing
    for a 404 at all)."""
    return BoltResponse(status=200, body="") if response.status == 404 else response


class DeadlineSocketModeHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, acknowledging every envelope within the same budget, and
    logging one line per failed connection attempt."""

    def __init__(self, app: AsyncApp, app_token: str, *, ping_interval: float = 10) -> None:
        super().__init__(
            app,
            app_token,
            logger=socket_mode_logger(ping_interval),
            ping_interval=ping_interval,
        )

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        started, deadline = time.time(), Deadline()
        request = AsyncBoltRequest(mode="socket_mode", body=req.payload, headers=build_headers(req))

        async def send(response: BoltResponse) -> None:
            try:
                await send_async_response(client, req, response, started)
            except Exception as exc:  # the listener that acked must go on regardless
                log.warning("could not acknowledge a Socket Mode envelope: %s", type(exc).__name__)

        await answer_before_deadline(self.app, request, deadline, send)


SOCKET_MODE_LOGGER = "gpuops.socket_mode"


class OneLinePerReconnect(logging.Filter):
    """slack_sdk's Socket Mode client logs a full traceback for every failed connection
    attempt (every ping interval while Slack is unreachable), after a separate line about
    the connection URL it could not get. Keep one line per attempt, saying why and when
    the next one is."""

    def __init__(self, retry_seconds: float) -> None:
        super().__init__()
        self.retry_seconds = retry_seconds

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("Failed to retrieve WSS URL"):
            return False  # the "Failed to connect" line that follows says it
        if message.startswith("Failed to connect") and record.exc_info:
            error = record.exc_info[1]
            why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            record.msg = "Socket Mode: cannot connect to Slack (%s); retrying in %g s"
            record.args = (why, self.retry_seconds)
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def socket_mode_logger(retry_seconds: float) -> logging.Logger:
    logger = logging.getLogger(SOCKET_MODE_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, OneLinePerReconnect):
            existing.retry_seconds = retry_seconds  # the newest client's interval
            return logger
    logger.addFilter(OneLinePerReconnect(retry_seconds))
    return logger
