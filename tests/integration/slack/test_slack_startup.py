"""The start-up token check (bot.slack.startup) against the Slack stand-in over real HTTP,
and the one line per failed Socket Mode connection attempt (slack_sdk's own client)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack.server import FakeSlack
from bot.slack.deadline import SOCKET_MODE_LOGGER, socket_mode_logger
from bot.slack.messenger import build_web_client
from bot.slack.startup import Backoff, Readiness, TokenRefused, check_bot_token
from tests.support.reliability import closed_port

TOKEN = "xoxb-1-startup-test"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(TOKEN)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.mark.parametrize(
    "refusal", ["invalid_auth", "not_authed", "account_inactive", "token_revoked"]
)
async def test_a_refused_token_is_final(slack: FakeSlack, refusal: str) -> None:
    slack.token_refusal = refusal
    client = build_web_client(TOKEN, slack.api_url)
    readiness = Readiness("starting")
    with pytest.raises(TokenRefused) as refused:
        await check_bot_token(client, readiness)
    assert refused.value.code == refusal
    assert "SLACK_BOT_TOKEN" in str(refused.value) and TOKEN not in str(refused.value)
    assert [call.method for call in slack.calls] == ["auth.test"]  # not retried


async def test_the_stand_in_refuses_a_revoked_token_on_every_method(slack: FakeSlack) -> None:
    slack.token_refusal = "token_revoked"
    client = AsyncWebClient(token=TOKEN, base_url=slack.api_url)
    with pytest.raises(SlackApiError) as refused:
        await client.api_call("chat.postMessage", json={"channel": "C0INCIDENT", "text": "x"})
    assert refused.value.response["error"] == "token_revoked"


async def test_unreachable_slack_is_retried_with_backoff_and_the_reason_shown(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.slack.startup")
    unreachable = f"http://127.0.0.1:{closed_port()}/api/"
    client = build_web_client(TOKEN, unreachable)
    readiness = Readiness("starting")
    waits: list[float] = []
    reasons: list[str | None] = []

    async def sleep(seconds: float) -> None:  # the back-off, without waiting it out
        waits.append(seconds)
        reasons.append(readiness.reason)
        if len(waits) == 3:
            client.base_url = slack.api_url  # Slack is back

    identity = await check_bot_token(
        client, readiness, backoff=Backoff(initial=1, maximum=3), sleep=sleep
    )
    assert identity.user_id == slack.bot_user_id and identity.team_id == slack.team_id
    assert waits == [1, 2, 3]
    assert reasons[0] is not None and reasons[0].startswith(
        f"Slack is unreachable at {unreachable}"
    )
    assert reasons[0].endswith("checking SLACK_BOT_TOKEN again in 1 s")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and lines[1].startswith("auth.test attempt 2: Slack is unreachable")
    assert all(r.exc_info is None for r in caplog.records)


async def test_a_slack_error_answer_is_retried_not_fatal(slack: FakeSlack) -> None:
    slack.fail("auth.test", "service_unavailable", times=1)
    readiness = Readiness("starting")
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    client = build_web_client(TOKEN, slack.api_url)
    await check_bot_token(client, readiness, sleep=sleep)
    assert waits == [1.0]


async def test_socket_mode_logs_one_line_per_failed_connection_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=SOCKET_MODE_LOGGER)
    web = AsyncWebClient(token=TOKEN, base_url=f"http://127.0.0.1:{closed_port()}/api/")
    client = SocketModeClient(
        app_token="xapp-1-A0-startup-test",
        web_client=web,
        logger=socket_mode_logger(0.05),
        ping_interval=0.05,
    )
    connecting = asyncio.create_task(client.connect())  # type: ignore[no-untyped-call]
    try:
        async with asyncio.timeout(30):
            while sum("cannot connect" in r.getMessage() for r in caplog.records) < 3:
                await asyncio.sleep(0.05)
    finally:
        client.closed = True
        await asyncio.wait_for(connecting, 5)
        await client.close()  # type: ignore[no-untyped-call]
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) >= 3
    for record in failures:
        assert record.exc_info is None and record.exc_text is None  # no traceback
        assert record.getMessage().startswith("Socket Mode: cannot connect to Slack (")
        assert record.getMessage().endswith("; retrying in 0.05 s")
        assert "ClientConnectorError" in record.getMessage()
    assert not any("WSS URL" in r.getMessage() for r in caplog.records)
