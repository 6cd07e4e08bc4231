"""The bot's Web API calls share one HTTP session: connections are kept alive instead of a
new session and TCP connection per call, and the session is closed on shutdown."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

import bot.runtime
from bot.slack.messenger import SLACK_TIMEOUT_SECONDS, build_web_client, slack_http_session
from tests.conftest import StackFactory


async def test_every_web_api_call_of_a_change_reuses_one_connection(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    stack = await make_stack(transition_seconds=0)
    await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
    )
    await stack.slack.wait_for(lambda: stack.slack.ephemerals_for("U04DAVE"))
    await stack.runtime.workflow.drain()
    posts = len(stack.slack.calls_to("chat.postMessage")) + len(stack.slack.calls_to("chat.update"))
    assert posts >= 5  # root, mirror, thread note, summary, edits …
    assert seen["requests"] == len(stack.slack.calls) >= posts
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
