"""The Web API client every Slack call of the process goes through: one kept-alive HTTP
session, slack_sdk's rate-limit retries, and its logger at the level it logs at."""

from __future__ import annotations

import logging

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.calls import count_slack_calls

SLACK_TIMEOUT_SECONDS = 10


def slack_http_session() -> aiohttp.ClientSession:
    """One HTTP session (kept-alive connections) for every Web API call of the process;
    without one, slack_sdk opens and closes a session and a TCP connection per call.
    Create it inside the running event loop and close it on shutdown."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=SLACK_TIMEOUT_SECONDS),
        middlewares=(count_slack_calls,),
    )


def _web_client_logger() -> logging.Logger:
    """slack_sdk's client logger, set to the level it logs at now (as Bolt sets its own).
    slack_sdk tests the logger's own level (``logger.level <= DEBUG``), not the effective
    one: left at NOTSET, every call formatted its whole request and reply into debug lines
    that were then dropped."""
    logger = logging.getLogger("slack_sdk.web.async_base_client")
    logger.setLevel(logger.getEffectiveLevel())
    return logger


def build_web_client(
    token: str, base_url: str, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    client = AsyncWebClient(
        token=token,
        base_url=base_url,
        timeout=SLACK_TIMEOUT_SECONDS,
        session=session,
        logger=_web_client_logger(),
    )
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    return client
