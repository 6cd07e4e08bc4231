"""PostgreSQL connections are pinged before use only after sitting idle: a ping at every
checkout (asyncpg pings inside a transaction of its own) cost the server one more
transaction per store transaction, the bench's 8 server transactions per update where the
replicas counted 4. An idle connection whose server end is gone is replaced unseen."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.store import engine as store_engine
from bot.core.store.engine import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_OPERATION_TIMEOUT,
    create_engine,
    normalize_database_url,
)
from tests.conftest import PG_ADMIN_DSN

pytestmark = pytest.mark.postgres


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every ping the dialect sends, counted."""
    seen: list[int] = []
    original: Callable[[AsyncAdapt_asyncpg_connection], None] = AsyncAdapt_asyncpg_connection.ping

    def counted(self: AsyncAdapt_asyncpg_connection) -> None:
        seen.append(1)
        original(self)

    monkeypatch.setattr(AsyncAdapt_asyncpg_connection, "ping", counted)
    yield seen


async def _engine(url: str) -> AsyncEngine:
    return create_engine(
        normalize_database_url(url),
        schema=None,
        echo=False,
        connect_timeout=DEFAULT_CONNECT_TIMEOUT,
        statement_timeout=DEFAULT_OPERATION_TIMEOUT,
    )


@pytest.fixture
async def engine(pg_database_url: str) -> AsyncIterator[AsyncEngine]:
    made = await _engine(pg_database_url)
    yield made
    await made.dispose()


async def _backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    assert isinstance(pid, int)
    return pid


async def test_a_connection_in_steady_use_is_not_pinged(
    engine: AsyncEngine, pings: list[int]
) -> None:
    first = await _backend_pid(engine)
    for _ in range(20):
        assert await _backend_pid(engine) == first  # the same pooled connection
    assert pings == []


async def test_an_idle_connection_is_pinged_and_replaced_when_its_server_end_is_gone(
    pg_database_url: str, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_engine, "PING_AFTER_IDLE_SECONDS", 0.0)  # every return is idle
    engine = await _engine(pg_database_url)
    try:
        gone = await _backend_pid(engine)
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", gone)
        finally:
            await admin.close()
        replaced = await _backend_pid(engine)  # no error reaches the store
        assert replaced != gone
        assert len(pings) >= 1
    finally:
        await engine.dispose()
