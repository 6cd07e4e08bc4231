"""The answer deadline over real HTTP: whatever a listener waits on, Slack gets its answer
within the 2.5 s budget, a listener that answers in time is passed through unchanged, and a
late listener still runs to its end."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier

from bot.metrics import SLACK_ANSWERS_PAST_BUDGET
from bot.slack.app import SlackEventsEndpoint
from bot.slack.deadline import (
    ANSWER_BUDGET_SECONDS,
    RUNNING_LISTENERS,
    Deadline,
    Send,
    answer_before_deadline,
)

SECRET = "deadline-test-signing-secret"


class Listeners:
    def __init__(self) -> None:
        self.finished = asyncio.Event()
        self.remaining_seen: list[float] = []
        self.work_after_ack_ended: list[float] = []

    def register(self, app: AsyncApp) -> None:
        app.command("/gpu")(self.gpu)

    async def gpu(self, ack: Any, command: dict[str, Any], context: Any) -> None:
        self.remaining_seen.append(context["deadline"].remaining())
        if command["text"] == "slow":
            await asyncio.sleep(ANSWER_BUDGET_SECONDS + 1.5)  # e.g. a rate-limited look-up
            await ack("too late to be seen")
            self.finished.set()
        elif command["text"] == "busy":
            await ack("answered first")
            time.sleep(0.5)  # work that holds the event loop, e.g. rendering a long list
            self.work_after_ack_ended.append(time.monotonic())
        else:
            await ack("in time")


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, Listeners]]:
    async def authorize(**_: Any) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=None, team_id="T0", bot_token="xoxb-deadline")

    bolt = AsyncApp(signing_secret=SECRET, authorize=authorize)
    listeners = Listeners()
    listeners.register(bolt)
    app = web.Application()
    app.router.add_post("/slack/events", SlackEventsEndpoint(bolt, SECRET).handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/slack/events", listeners
    finally:
        await runner.cleanup()


def signed_command(text: str) -> tuple[bytes, dict[str, str]]:
    body = urllib.parse.urlencode(
        {
            "command": "/gpu",
            "text": text,
            "user_id": "U01ALICE",
            "channel_id": "C0INCIDENT",
            "team_id": "T0",
            "trigger_id": "1.2.3",
            "response_url": "http://127.0.0.1:9/none",
        }
    )
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": str(
            SignatureVerifier(SECRET).generate_signature(timestamp=timestamp, body=body)
        ),
    }
    return body.encode(), headers


async def send_command(url: str, text: str) -> tuple[int, str, float]:
    body, headers = signed_command(text)
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status, await response.text(), time.monotonic() - started


async def test_a_listener_in_time_is_passed_through(served: tuple[str, Listeners]) -> None:
    url, listeners = served
    status, text, took = await send_command(url, "fast")
    assert (status, text) == (200, "in time")
    assert took < 1.0
    assert 0 < listeners.remaining_seen[0] <= ANSWER_BUDGET_SECONDS


async def test_a_slow_listener_is_answered_at_the_budget_and_goes_on(
    served: tuple[str, Listeners],
) -> None:
    url, listeners = served
    before = SLACK_ANSWERS_PAST_BUDGET.labels("command")._value.get()
    status, text, took = await send_command(url, "slow")
    assert status == 200 and text == ""
    assert ANSWER_BUDGET_SECONDS - 0.1 <= took < ANSWER_BUDGET_SECONDS + 0.4  # Slack waits 3 s
    assert SLACK_ANSWERS_PAST_BUDGET.labels("command")._value.get() == before + 1
    await asyncio.wait_for(listeners.finished.wait(), timeout=5)


def _post_blocking(url: str, body: bytes, headers: dict[str, str]) -> tuple[str, float]:
    response = httpx.post(url, content=body, headers=headers, timeout=10)
    return response.text, time.monotonic()


async def test_the_answer_is_written_before_the_work_after_the_ack(
    served: tuple[str, Listeners],
) -> None:
    """The client (in a thread of its own) has the answer although the listener held the
    event loop right after its ack: ack() wrote it before returning."""
    url, listeners = served
    body, headers = signed_command("busy")
    text, received = await asyncio.to_thread(_post_blocking, url, body, headers)
    assert text == "answered first"
    assert received < listeners.work_after_ack_ended[0]  # before the loop was free again


async def test_requests_that_arrive_together_are_all_answered_before_their_work_starts() -> None:
    """Many people typing at once: no answer waits behind another request's work after
    its ack (each of those holds the loop here for as long as it computes)."""

    async def authorize(**_: Any) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=None, team_id="T0", bot_token="xoxb-deadline")

    seen: list[str] = []
    bolt = AsyncApp(signing_secret=SECRET, authorize=authorize, process_before_response=True)

    @bolt.command("/gpu")
    async def gpu(ack: Any, command: dict[str, Any]) -> None:
        await ack()
        seen.append(f"work {command['text']}")  # nothing awaited: it holds the loop

    def answered(text: str) -> Send:
        async def send(_: BoltResponse) -> None:
            seen.append(f"answer {text}")

        return send

    def request(text: str) -> AsyncBoltRequest:
        body, headers = signed_command(text)
        bolt_headers: dict[str, str | Sequence[str]] = dict(headers)
        return AsyncBoltRequest(body=body.decode(), headers=bolt_headers)

    texts = ("a", "b", "c")
    await asyncio.gather(
        *(answer_before_deadline(bolt, request(t), Deadline(), answered(t)) for t in texts)
    )
    for listener in RUNNING_LISTENERS.running():
        await listener
    assert seen == [*(f"answer {t}" for t in texts), *(f"work {t}" for t in texts)]
