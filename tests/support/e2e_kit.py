"""Shared helpers for the E2E tests (no tests here): a running simulator, a client
against it, and a tiny server that answers with whatever status and body it is given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from bot.local.simulators.e2e import E2ESimulator
from bot.providers.e2e import E2EAdapter, E2EClient, build_e2e_transport
from bot.providers.http import ClientSettings
from tests.support.openapi_contract import SPECS_DIR

API_KEY = "sim-e2e-apikey"
AUTH_TOKEN = "sim-e2e-token"
PREFIX = "/myaccount/api/v1/gpu"

FAST = ClientSettings(
    connect_timeout=2.0,
    total_timeout=5.0,
    attempts=3,
    wait_initial=0.01,
    wait_max=0.05,
    retry_after_cap=0.05,
    retry_budget=5.0,
)


def fast(**changes: Any) -> ClientSettings:
    return replace(FAST, **changes)


def doc_examples() -> dict[str, Any]:
    with open(SPECS_DIR / "e2e-tir-training-cluster.doc-examples.json", encoding="utf-8") as fh:
        examples: dict[str, Any] = json.load(fh)
    return examples


@asynccontextmanager
async def running_simulator(**kwargs: Any) -> AsyncIterator[E2ESimulator]:
    kwargs.setdefault("transition_seconds", 0.0)
    sim = E2ESimulator(**kwargs)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()


def make_client(
    base_url: str,
    *,
    api_key: str = API_KEY,
    auth_token: str = AUTH_TOKEN,
    settings: ClientSettings = FAST,
    project_id: int = 12345,
    location: str = "Delhi",
    active_iam: int | None = None,
    per_page: int = 50,
) -> E2EClient:
    transport = build_e2e_transport(api_key, auth_token, base_url, settings)
    return E2EClient(transport, project_id, location, active_iam=active_iam, per_page=per_page)


def make_adapter(base_url: str, **kwargs: Any) -> E2EAdapter:
    return E2EAdapter(make_client(base_url, **kwargs), "e2e-delhi")


@dataclass
class CannedServer:
    """Answers every request with ``status`` and ``body`` (JSON) or ``raw`` text."""

    status: int = 200
    body: Any = None
    raw: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hits: int = 0
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PREFIX}"

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        if self.raw is not None:
            return web.Response(status=self.status, text=self.raw, headers=self.headers)
        return web.Response(
            status=self.status,
            text=json.dumps(self.body),
            content_type="application/json",
            headers=self.headers,
        )

    def answer(self, status: int, body: Any = None, *, raw: str | None = None) -> None:
        self.status, self.body, self.raw, self.hits = status, body, raw, 0


@asynccontextmanager
async def canned_server() -> AsyncIterator[CannedServer]:
    server = CannedServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        await runner.cleanup()
