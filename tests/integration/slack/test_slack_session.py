"""The bot's Web API calls and its replies to response_urls share one HTTP session:
connections are kept alive instead of a new session and TCP connection per call, and the
session is closed on shutdown."""

from __future__ import annotations

import logging
from collections import Counter
from functools import partial
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

import bot.runtime
from bot.local.demo.stack import LocalStack
from bot.local.slack.server import FakeSlack
from bot.slack.messenger import SLACK_TIMEOUT_SECONDS, build_web_client, slack_http_session
from bot.slack.respond import SessionRespond
from tests.conftest import StackFactory

RESPONDS = 5


def posted(stack: LocalStack, count: int) -> bool:
    return len(stack.slack.response_posts) >= count


def trace_the_session(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the requests and the new connections of the runtime's Slack HTTP session."""
    seen: Counter[str] = Counter()

    async def on_request(_: Any, __: SimpleNamespace, params: Any) -> None:
        seen["requests"] += 1

    async def on_new_connection(_: Any, __: SimpleNamespace, params: Any) -> None:
        seen["connections"] += 1

    def traced_session() -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(on_request)
        trace.on_connection_create_end.append(on_new_connection)
        session = slack_http_session()
        session.trace_configs.append(trace)
        trace.freeze()
        return session

    monkeypatch.setattr(bot.runtime, "slack_http_session", traced_session)
    return seen


async def test_every_web_api_call_of_a_change_reuses_one_connection(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = trace_the_session(monkeypatch)
    stack = await make_stack(transition_seconds=0)
    await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
    )
    await stack.slack.wait_for(lambda: stack.slack.ephemerals_for("U04DAVE"))
    await stack.runtime.workflow.drain()
    posts = len(stack.slack.calls_to("chat.postMessage")) + len(stack.slack.calls_to("chat.update"))
    assert posts >= 4  # root, its edit, the summary, the mirror …
    assert len(stack.slack.response_posts) == 1  # the command's answer: respond()
    assert seen["requests"] == len(stack.slack.calls) + 1
    assert seen["connections"] == 1


async def test_respond_posts_over_the_shared_session(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = trace_the_session(monkeypatch)
    stack = await make_stack()
    for answered in range(1, RESPONDS + 1):
        await stack.sender.command("U04DAVE", "C0INCIDENT", "help")
        await stack.slack.wait_for(partial(posted, stack, answered))
    assert all("/gpu list" in post.text for post in stack.slack.response_posts)
    # auth.test at start-up, then every answer over that same connection
    assert seen["requests"] == len(stack.slack.calls) + RESPONDS
    assert seen["connections"] == 1


async def test_the_session_is_the_clients_and_closes_with_the_runtime(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    session = stack.runtime.web_client.session
    assert isinstance(session, aiohttp.ClientSession) and not session.closed
    assert session.timeout.total == SLACK_TIMEOUT_SECONDS
    await stack.runtime.close()
    assert session.closed


async def test_build_web_client_uses_the_session_it_is_given() -> None:
    session = slack_http_session()
    try:
        client = build_web_client("xoxb-test", "http://127.0.0.1:9/api/", session)
        assert client.session is session
        assert client.timeout == SLACK_TIMEOUT_SECONDS
    finally:
        await session.close()


async def test_respond_takes_a_whole_message_as_bolts_does() -> None:
    fake = FakeSlack("xoxb-test", channels={"C0INCIDENT": "incident"})
    await fake.start()
    session = slack_http_session()
    try:
        url = fake.new_response_url("C0INCIDENT", "U04DAVE")
        respond = SessionRespond(response_url=url, session=session)
        answer = await respond({"text": "whole", "response_type": "ephemeral"})
        assert answer.status_code == 200
        await respond(text="in parts", response_type="ephemeral")
    finally:
        await session.close()
        await fake.stop()
    assert [(p.text, p.response_type) for p in fake.response_posts] == [
        ("whole", "ephemeral"),
        ("in parts", "ephemeral"),
    ]


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
async def test_a_web_api_call_builds_debug_lines_only_when_debug_is_on(
    level: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """slack_sdk formats a call's whole request and reply into debug lines whenever its
    logger's own level is NOTSET; the client's logger carries the level logging is at."""
    caplog.set_level(level)
    sdk = logging.getLogger("slack_sdk.web.async_base_client")
    monkeypatch.setattr(sdk, "level", logging.NOTSET)  # as a fresh process has it
    built: list[str] = []
    real_debug = sdk.debug

    def debug(message: str, *args: Any, **kwargs: Any) -> None:
        built.append(message)
        real_debug(message, *args, **kwargs)

    monkeypatch.setattr(sdk, "debug", debug)
    fake = FakeSlack("xoxb-test", channels={"C0INCIDENT": "incident"})
    await fake.start()
    session = slack_http_session()
    try:
        client = build_web_client("xoxb-test", fake.api_url, session)
        await client.chat_postMessage(channel="C0INCIDENT", text="hello")
    finally:
        await session.close()
        await fake.stop()
    assert sdk.level == level
    if level == logging.DEBUG:
        assert any(m.startswith("Sending a request") for m in built)
        assert any(r.getMessage().startswith("Sending a request") for r in caplog.records)
    else:
        assert built == []  # not formatted, not only not shown
