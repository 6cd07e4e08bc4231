"""Helpers for the MCP tests (tests/integration/mcp/, demo): a person's token made in Slack,
and the ``mcp`` SDK's own client connected to the bot's ``/mcp`` over streamable HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Implementation, TextContent

from bot.local.demo.stack import LocalStack
from tests.support.slack_support import whisper
from tests.support.workflow_kit import CHANNEL

TOKEN = re.compile(r"gpo_[A-Za-z0-9_\-]{40,}")


async def make_token(
    stack: LocalStack, user: str, name: str = "agent", ttl: str = "1d", channel: str = CHANNEL
) -> str:
    """``user`` types ``/gpu token new``; the token their ephemeral answer shows once."""
    answer = await whisper(stack, user, channel, f"token new ttl={ttl} name={name}")
    found = TOKEN.search(answer.text)
    assert found is not None, answer.text
    return found.group(0)


@asynccontextmanager
async def agent(
    url: str, token: str | None, client_name: str = "claude-code"
) -> AsyncIterator[Client]:
    """The SDK's client on ``url`` (a bot's ``/mcp``) with ``token`` as its bearer."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        info = Implementation(name=client_name, version="1.0")
        async with Client(transport, client_info=info) as client:
            yield client


def mcp_url(stack: LocalStack) -> str:
    return f"{stack.base_url}/mcp"


def answer_of(result: CallToolResult) -> dict[str, Any]:
    """A tool's structured answer (and its text twin says the same)."""
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None, result
    return dict(result.structured_content)


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def error_of(result: CallToolResult) -> str:
    assert result.is_error, json.dumps(result.structured_content)
    return text_of(result)
