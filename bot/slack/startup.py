"""The bot token checked before serving (SPEC §12): ``auth.test`` once at start.

A token Slack refuses stops the process with one line naming ``SLACK_BOT_TOKEN``; while
Slack cannot be reached the check is retried with back-off, and ``/healthz`` says why the
replica is not ready yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import GpuopsError

log = logging.getLogger(__name__)

# auth.test's answers for a token that will never work; anything else may pass.
REFUSED_TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "not_allowed_token_type"}
)


class TokenRefused(GpuopsError):
    """Slack refused the bot token: the process must not serve with it."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(
            f"Slack refused SLACK_BOT_TOKEN ({code}): set the bot token (xoxb-…) "
            "of this app's installation"
        )


class Readiness:
    """Whether this replica may take Slack's requests yet, and if not, why."""

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason

    @property
    def ready(self) -> bool:
        return self.reason is None

    def wait_for(self, reason: str) -> None:
        self.reason = reason

    def set_ready(self) -> None:
        self.reason = None


@dataclass(frozen=True)
class BotIdentity:
    """Who the token is, from auth.test."""

    user_id: str
    bot_id: str
    team_id: str


@dataclass(frozen=True)
class Backoff:
    """How long to wait before each new try: doubling from ``initial`` up to ``maximum``."""

    initial: float = 1.0
    maximum: float = 30.0

    def waits(self) -> Callable[[], float]:
        wait = self.initial

        def next_wait() -> float:
            nonlocal wait
            current, wait = wait, min(wait * 2, self.maximum)
            return current

        return next_wait


async def check_bot_token(
    client: AsyncWebClient,
    readiness: Readiness,
    *,
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> BotIdentity:
    """``auth.test`` until Slack answers: the token's identity, or TokenRefused. Each
    failed try says why in ``readiness`` and in one log line."""
    next_wait = backoff.waits()
    attempt = 1
    while True:
        problem = await auth_test_once(client)
        if isinstance(problem, BotIdentity):
            return problem
        wait = next_wait()
        readiness.wait_for(f"{problem}; checking SLACK_BOT_TOKEN again in {wait:g} s")
        log.warning("auth.test attempt %d: %s; trying again in %g s", attempt, problem, wait)
        await sleep(wait)
        attempt += 1


async def auth_test_once(client: AsyncWebClient) -> BotIdentity | str:
    """One ``auth.test``: the identity, or why Slack could not be asked; TokenRefused when
    Slack refuses the token."""
    try:
        response = await client.auth_test()
    except SlackApiError as exc:
        code = str(exc.response.get("error") or f"HTTP {exc.response.status_code}")
        if code in REFUSED_TOKEN_ERRORS:
            raise TokenRefused(code) from None
        return f"Slack answered auth.test with {code}"
    except (aiohttp.ClientError, SlackClientError, TimeoutError, OSError) as exc:
        return f"Slack is unreachable at {client.base_url} ({_describe(exc)})"
    return BotIdentity(
        user_id=str(response.get("user_id") or ""),
        bot_id=str(response.get("bot_id") or ""),
        team_id=str(response.get("team_id") or ""),
    )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
