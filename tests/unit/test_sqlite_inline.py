"""The SQLite store runs sqlite3 on the event loop's thread: a transaction completes within
one step of the loop (no worker-thread round trips), so store writes never queue behind
each other's round trips, and the loop gets a turn between transactions."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import greenlet
from sqlalchemy import event

from bot.core.store import Store
from bot.core.store.sqlite_inline import InlineConnection


async def test_a_sqlite_transaction_is_one_step_of_the_event_loop(tmp_path: Path) -> None:
    """aiosqlite needs a worker-thread round trip, hence loop turns, for each of the nine
    sqlite3 calls of a transaction; inline, nothing else runs until it has committed, and
    the store then yields once so that what is ready (an ack) runs before the caller goes
    on."""
    store = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    loop = asyncio.get_running_loop()
    turns = 0
    counting = True
    seen_by_statements: list[int] = []

    def tick() -> None:
        nonlocal turns
        turns += 1
        if counting:
            loop.call_soon(tick)

    def on_statement(*_: Any) -> None:
        seen_by_statements.append(turns)

    try:
        await store.remember_delivery("warm-up")  # the pool's first connection
        event.listen(store.engine.sync_engine, "after_cursor_execute", on_statement)
        loop.call_soon(tick)
        assert await store.remember_delivery("command:T1:1")
        after_first = turns
        assert await store.acquire_lease("exec:CR-2345AB", "bot-1", 30)
        counting = False
        assert seen_by_statements[0] == 0  # BEGIN … COMMIT ran before anything else
        assert after_first == 1  # then one turn of the loop
        assert seen_by_statements[-1] == 1 and turns == 2
    finally:
        counting = False
        await store.close()


async def test_the_sqlite_store_starts_no_worker_thread(tmp_path: Path) -> None:
    before = {t.ident for t in threading.enumerate()}
    store = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    try:
        assert await store.remember_delivery("k")
        assert not await store.remember_delivery("k")
        assert {t.ident for t in threading.enumerate()} <= before
    finally:
        await store.close()


async def test_an_in_memory_store_works_inline_too() -> None:
    store = await Store.open("sqlite:///:memory:")
    try:
        assert await store.remember_delivery("k")
        assert not await store.remember_delivery("k")
        raw = await store.engine.raw_connection()
        try:
            assert isinstance(raw.driver_connection, InlineConnection)
        finally:
            raw.close()
    finally:
        await store.close()


async def test_a_failed_statement_rolls_back_and_the_store_goes_on(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    try:
        async with store.engine.connect() as conn:
            try:
                await conn.exec_driver_sql("INSERT INTO no_such_table VALUES (1)")
            except Exception as exc:
                assert "no_such_table" in str(exc)
            else:
                raise AssertionError("the insert into a missing table succeeded")
        assert await store.remember_delivery("after-error")
    finally:
        await store.close()


async def test_a_result_is_read_with_its_statement(tmp_path: Path) -> None:
    """Rows are read when the statement runs, as aiosqlite's adapter read them: a result
    read after its transaction has every row, and no statement stays open meanwhile (an
    open read would pin its snapshot, and a checkpoint could not reset the WAL)."""
    path = tmp_path / "gpuops.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        for n in range(5):
            assert await store.remember_delivery(f"k{n}")
        async with store.engine.begin() as conn:
            result = await conn.exec_driver_sql(
                "SELECT key FROM gpuops_deliveries WHERE key LIKE 'k_' ORDER BY key"
            )
        with sqlite3.connect(path) as other:
            busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        assert [row[0] for row in result] == [f"k{n}" for n in range(5)]
    finally:
        await store.close()


async def test_a_statement_costs_one_switch_of_greenlets(tmp_path: Path) -> None:
    """SQLAlchemy's async layer runs a statement in a greenlet; the sqlite3 calls under it
    complete inline, so the only switches are into that greenlet, the one finished await
    ``AsyncConnection.execute`` requires, and back (aiosqlite's adapter switched out and
    back for each cursor, execute, fetch and close)."""
    store = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    switches = 0

    def count(event: str, _args: Any) -> None:
        nonlocal switches
        if event == "switch":
            switches += 1

    try:
        await store.remember_delivery("warm-up")
        async with store.engine.begin() as conn:
            previous = greenlet.settrace(count)
            try:
                for _ in range(10):
                    await conn.exec_driver_sql("SELECT 1")
            finally:
                greenlet.settrace(previous)
        assert switches <= 10 * 4
    finally:
        await store.close()
