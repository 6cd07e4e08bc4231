"""One answer deadline for every Slack request: over HTTP and over Socket Mode, Slack gets
an answer within 2.5 s of arrival whatever the listener is waiting on; the listener goes on
and reports in the thread, the view or ephemerally."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.request import SocketModeRequest

from bot.logs import log_context
from bot.metrics import SLACK_ANSWERS_PAST_BUDGET

log = logging.getLogger(__name__)

ANSWER_BUDGET_SECONDS = 2.5  # Slack shows people an error after 3 s; keep a margin


@dataclass(frozen=True)
class Deadline:
    """When the answer to one Slack request is due; listeners read it from
    ``context["deadline"]`` to bound the work they do before ``ack()``."""

    arrived: float = field(default_factory=time.monotonic)
    budget: float = ANSWER_BUDGET_SECONDS

    def remaining(self) -> float:
        return max(0.0, self.arrived + self.budget - time.monotonic())

    def passed(self) -> bool:
        return self.remaining() <= 0.0


class LateListeners:
    """Listeners still running after their request was answered: kept referenced until they
    end, and their failures logged."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[BoltResponse]] = set()

    def keep(self, task: asyncio.Task[BoltResponse]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[BoltResponse]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a listener answered late failed: %s", type(task.exception()).__name__)


LATE_LISTENERS = LateListeners()


def _kind(body: Any) -> str:
    if not isinstance(body, dict):
        return "unknown"
    if body.get("command"):
        return "command"
    return str(body.get("type") or "unknown")[:32]


async def dispatch_before_deadline(
    bolt: AsyncApp, request: AsyncBoltRequest, deadline: Deadline
) -> BoltResponse:
    """Bolt's answer to ``request`` if it comes before ``deadline``; otherwise an empty 200
    (the listener keeps running)."""
    request.context["deadline"] = deadline
    # The listener's task (and every task it starts) copies this context: each line it
    # logs names the user and channel.
    with log_context(user=request.context.user_id, channel=request.context.channel_id):
        task = asyncio.create_task(bolt.async_dispatch(request))
        done, _ = await asyncio.wait({task}, timeout=deadline.remaining())
        if task in done:
            return task.result()
        LATE_LISTENERS.keep(task)
        kind = _kind(request.body)
        SLACK_ANSWERS_PAST_BUDGET.labels(kind).inc()
        log.warning(
            "answered a %s empty at the %.1f s budget; its listener goes on", kind, deadline.budget
        )
    return BoltResponse(status=200, body="")


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

    async def handle(self, client: Any, req: SocketModeRequest) -> None:
        started, deadline = time.time(), Deadline()
        request = AsyncBoltRequest(mode="socket_mode", body=req.payload, headers=build_headers(req))
        response = await dispatch_before_deadline(self.app, request, deadline)
        await send_async_response(client, req, response, started)


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
