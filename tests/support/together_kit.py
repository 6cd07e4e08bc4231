"""Helpers shared by the Together tests: a started simulator, a client against it with
tiny retry waits, and a transport that keeps every response the client received."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from bot.local.simulators.together import TogetherSimulator
from bot.providers.http import ClientSettings
from bot.providers.together import TogetherClient, build_together_transport

# Short waits between attempts, but timeouts with room for a loaded machine (as E2E's kit
# has): a test that means a timeout sets its own (``total_timeout=0.3``).
FAST = ClientSettings(
    attempts=3,
    wait_initial=0.01,
    wait_max=0.05,
    retry_after_cap=0.05,
    total_timeout=5.0,
    connect_timeout=2.0,
)


@dataclass
class Exchange:
    method: str
    path: str
    status: int
    body: Any


class RecordingTransport(httpx.AsyncHTTPTransport):
    """An HTTP transport that remembers each response (status and parsed body)."""

    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        raw = await response.aread()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.exchanges.append(
            Exchange(request.method, request.url.path, response.status_code, body)
        )
        return httpx.Response(
            response.status_code, headers=response.headers, content=raw, request=request
        )


@asynccontextmanager
async def running_simulator(
    api_key: str = "sim-together-key", transition_seconds: float = 0.2
) -> AsyncIterator[TogetherSimulator]:
    sim = TogetherSimulator(api_key=api_key, transition_seconds=transition_seconds)
    await sim.start(port=0)
    try:
        yield sim
    finally:
        await sim.stop()


def client_for(
    base_url: str,
    api_key: str = "sim-together-key",
    *,
    project_id: str | None = None,
    settings: ClientSettings = FAST,
    transport: httpx.AsyncBaseTransport | None = None,
) -> TogetherClient:
    return TogetherClient(
        build_together_transport(api_key, base_url, settings, transport=transport),
        project_id=project_id,
    )
