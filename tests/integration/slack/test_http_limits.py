"""The HTTP server of ``gpuops serve`` under hostile or broken clients, over real sockets:
idle and slow requests are closed, open connections are capped, clients that go away are
logged in one quiet line, a non-UTF-8 unsigned body is 401, and /healthz follows the store."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest

from bot.local.demo.stack import LocalStack
from bot.local.faults.proxy import FaultProxy
from bot.slack.http_server import HttpLimits
from tests.conftest import StackFactory

IDLE = 1.0
BODY = 1.0
SLACK = 4.0  # scheduling margin on a loaded machine
CAP = 12


@pytest.fixture
async def tight(make_stack: StackFactory) -> LocalStack:
    return await make_stack(
        http_limits=HttpLimits(idle_seconds=IDLE, body_seconds=BODY, max_connections=CAP)
    )


async def _open(stack: LocalStack) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = urlsplit(stack.base_url)
    assert address.hostname is not None and address.port is not None
    return await asyncio.open_connection(address.hostname, address.port)


def _head(length: int, extra: str = "") -> bytes:
    return (
        "POST /slack/events HTTP/1.1\r\nHost: gpuops\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sends until it closes; fails if it is still open after."""
    return await asyncio.wait_for(reader.read(), seconds)


async def test_an_idle_connection_is_closed(tight: LocalStack) -> None:
    reader, writer = await _open(tight)
    started = time.monotonic()
    assert await _closed_within(reader, IDLE + SLACK) == b""
    assert time.monotonic() - started >= IDLE * 0.9
    writer.close()


async def test_headers_that_trickle_in_are_cut_off(tight: LocalStack) -> None:
    reader, writer = await _open(tight)
    started = time.monotonic()

    async def trickle() -> None:
        for byte in _head(10):
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)

    sending = asyncio.create_task(trickle())
    try:
        await _closed_within(reader, IDLE + SLACK)
    finally:
        sending.cancel()
    assert time.monotonic() - started < IDLE + SLACK
    writer.close()


async def test_a_slow_body_gets_408_and_the_connection_closes(
    tight: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    reader, writer = await _open(tight)
    writer.write(_head(100) + b"command=%2Fgpu")
    await writer.drain()
    answer = await _closed_within(reader, BODY + SLACK)
    assert answer.startswith(b"HTTP/1.1 408 ")
    writer.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_clients_that_go_away_mid_body_are_logged_quietly(
    tight: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(20):
        _, writer = await _open(tight)
        writer.write(_head(5000) + b"command=%2Fgpu&text=")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.transport.abort()
    await asyncio.sleep(0.5)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info]
    quiet = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(quiet) == 20
    result = await tight.sender.command("U04DAVE", "C0INCIDENT", "help")
    assert result.status == 200 and result.acked_in_time


async def test_connections_beyond_the_cap_get_503_then_service_resumes(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(http_limits=HttpLimits(idle_seconds=60, max_connections=CAP))
    held = [await _open(stack) for _ in range(CAP)]
    await asyncio.sleep(0.2)
    reader, writer = await _open(stack)
    assert (await _closed_within(reader, SLACK)).startswith(b"HTTP/1.1 503 ")
    writer.close()
    for _, holder in held:
        holder.close()
    await asyncio.sleep(1.5)  # past the factory's grace for connections still opening
    result = await stack.sender.command("U04DAVE", "C0INCIDENT", "help")
    assert result.status == 200 and result.acked_in_time


async def test_a_non_utf8_body_is_401_signed_or_not(tight: LocalStack) -> None:
    body = b"command=%2Fgpu&text=\xff\xfe"
    form = "application/x-www-form-urlencoded"
    # What a client that signs bytes would send: the signature of the body read as Latin-1.
    headers = tight.sender.signed_headers(body.decode("latin-1"), form)
    async with httpx.AsyncClient() as client:
        unsigned = await client.post(tight.events_url, content=body, headers={"Content-Type": form})
        signed = await client.post(tight.events_url, content=body, headers=headers)
    assert unsigned.status_code == 401 and signed.status_code == 401


async def test_a_10_mb_body_is_still_413(tight: LocalStack) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            tight.events_url,
            content=b"x" * (10 * 1024 * 1024),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    assert response.status_code == 413


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(target_port=5432)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.close()


@pytest.mark.postgres
async def test_healthz_follows_the_store(
    pg_database_url: str, proxy: FaultProxy, make_stack: StackFactory
) -> None:
    url = pg_database_url.replace(":5432/", f":{proxy.port}/")
    stack = await make_stack(database_url=url)
    async with httpx.AsyncClient(base_url=stack.base_url) as client:
        assert (await client.get("/healthz")).status_code == 200
        await proxy.outage()
        started = time.monotonic()
        down = await client.get("/healthz", timeout=30)
        assert down.status_code == 503 and down.json() == {"ok": False}
        assert time.monotonic() - started < 2.0 + SLACK
        await proxy.heal_async()
        assert (await client.get("/healthz")).status_code == 200
