"""The fault-injecting TCP proxy over real sockets: pass, refuse, drop, hang, slow, heal."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from bot.local.faults.proxy import (
    FaultMode,
    FaultProxy,
    _frame,
    _FrontendMessages,
    _is_commit,
)
from tests.conftest import PG_URL_TEMPLATE, create_pg_database, drop_pg_database


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        # The proxy resetting this link is what several tests do: not an echo failure.
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
    finally:
        writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    fault_proxy = FaultProxy(target_port=server.sockets[0].getsockname()[1])
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.close()
    server.close()


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", proxy.port), 5)


async def _round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"ping")
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(4), 5)


async def test_passes_bytes_both_ways(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    assert await _round_trip(reader, writer) == b"ping"
    assert proxy.mode is FaultMode.FORWARD and proxy.accepted == 1
    writer.close()


async def test_refuse_then_heal_listens_again_on_the_same_port(proxy: FaultProxy) -> None:
    port = proxy.port
    proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        await _connect(proxy)
    await proxy.heal_async()
    assert proxy.port == port
    reader, writer = await _connect(proxy)
    assert await _round_trip(reader, writer) == b"ping"
    writer.close()


async def test_drop_resets_open_connections(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    assert await _round_trip(reader, writer) == b"ping"
    assert proxy.drop() == 1
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await _round_trip(reader, writer)
    assert proxy.open_connections == 0


async def test_outage_refuses_and_drops(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await proxy.outage()
    assert not proxy.listening
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await _round_trip(reader, writer)
    with pytest.raises(ConnectionRefusedError):
        await _connect(proxy)


async def test_hang_holds_bytes_until_healed(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    proxy.hang()
    writer.write(b"held")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(4), 0.5)
    late_reader, late_writer = await _connect(proxy)  # still accepts while hanging
    late_writer.write(b"late")
    await late_writer.drain()
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"
    assert await asyncio.wait_for(late_reader.readexactly(4), 5) == b"late"
    writer.close()
    late_writer.close()


async def test_slow_delays_each_chunk(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    proxy.slow(0.3)
    started = time.monotonic()
    assert await _round_trip(reader, writer) == b"ping"
    # One chunk each way: at least two delays.
    assert time.monotonic() - started >= 0.55
    proxy.heal()
    started = time.monotonic()
    assert await _round_trip(reader, writer) == b"ping"
    assert time.monotonic() - started < 0.3
    writer.close()


async def test_a_lost_commit_answer_commits_at_the_server_and_never_answers() -> None:
    """The COMMIT reaches PostgreSQL and is applied; the client's connection is reset before
    any answer: what a database lost right after a commit looks like to gpuops."""
    name = await create_pg_database()
    pg_proxy = FaultProxy(target_port=5432)
    await pg_proxy.start()
    try:
        dsn = f"postgresql://postgres@127.0.0.1:{pg_proxy.port}/{name}"
        conn = await asyncpg.connect(dsn, timeout=10)
        await conn.execute("CREATE TABLE t (v int)")
        assert await conn.fetchval("SELECT count(*) FROM t WHERE v = $1", 1) == 0
        pg_proxy.lose_commit_answer()
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises((ConnectionError, asyncpg.PostgresConnectionError)):
            await asyncio.wait_for(transaction.commit(), 10)
        await asyncio.wait_for(pg_proxy.commit_answer_lost.wait(), 10)
        assert pg_proxy.commit_answers_lost == 1
        conn.terminate()
        direct = await asyncpg.connect(PG_URL_TEMPLATE.format(name=name), timeout=10)
        try:
            assert await direct.fetchval("SELECT count(*) FROM t") == 1
        finally:
            await direct.close()
        # Disarmed after one: the next commit through the proxy is answered.
        again = await asyncpg.connect(dsn, timeout=10)
        async with again.transaction():
            await again.execute("INSERT INTO t VALUES (2)")
        assert await again.fetchval("SELECT count(*) FROM t") == 2
        await again.close()
    finally:
        await pg_proxy.close()
        await drop_pg_database(name)


def test_the_frontend_parser_splits_startup_and_typed_messages() -> None:
    parser = _FrontendMessages()
    ssl_request = struct.pack("!ii", 8, 80877103)
    startup = struct.pack("!ii", 13, 196608) + b"user\x00"
    query = b"Q" + struct.pack("!i", 12) + b"COMMIT;\x00"
    stream = ssl_request + startup + query
    seen = [m for i in range(len(stream)) for m in parser.feed(stream[i : i + 1])]
    assert [kind for kind, _ in seen] == [None, None, ord("Q")]
    assert _is_commit(*seen[2]) and not _is_commit(*seen[1])
    assert b"".join(_frame(kind, body) for kind, body in seen) == stream
    assert _FrontendMessages().feed(b"ping") == [(-1, b"ping")]  # not the protocol: opaque
