"""SQLite for the async store without a thread hop per call.

aiosqlite runs every sqlite3 call (cursor, execute, fetch, close, commit …) on a worker
thread and hands the result back through the event loop: nine round trips per
single-statement transaction. Under load each round trip waits for a turn of a busy loop,
so a transaction took tens of milliseconds of wall time although SQLite itself needs tens
of microseconds — and every transaction queues behind the store's serial lock, the
de-duplication write that precedes each ack included.

``InlineConnection`` has the shape SQLAlchemy's aiosqlite dialect drives (the coroutine
methods of ``aiosqlite.Connection`` and its cursor) but runs each call directly on the
calling thread. A local-file transaction (WAL, ``synchronous=NORMAL``) completes within
one step of the event loop, so the store's transactions never interleave or wait on each
other inside a process. Another process holding the write lock makes a call wait in
SQLite's busy handler, blocking the loop for as long as that process's transaction lasts
(sub-millisecond when it is also a gpuops store).

Use: ``create_async_engine(url, async_creator=inline_creator(url, timeout=30.0))``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from typing import Any

from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import URL

from bot.core.store.chain import sha256_hex

_Work = tuple["asyncio.Future[Any] | None", Callable[[], Any]]


class _RunNow:
    """Stands in for aiosqlite's queue to its worker thread, which SQLAlchemy's adapter
    uses directly to set ``isolation_level``: the work runs at once."""

    def put_nowait(self, item: _Work) -> None:
        future, function = item
        try:
            result = function()
        except BaseException as exc:
            if future is not None:
                future.set_exception(exc)
            return
        if future is not None:
            future.set_result(result)


class InlineCursor:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        self._cursor.execute(sql, () if parameters is None else parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        self._cursor.executemany(sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()


class _CursorContext:
    """What ``connection.cursor()`` returns: awaitable and an async context manager."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def __aenter__(self) -> InlineCursor:
        return InlineCursor(self._connection.cursor())

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def __await__(self) -> Generator[Any, None, InlineCursor]:
        return self.__aenter__().__await__()


class InlineConnection:
    """An ``aiosqlite.Connection`` look-alike whose calls run on the calling thread."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection: sqlite3.Connection | None = connection
        self._tx = _RunNow()

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._connection is None:
            raise ValueError("no active connection")
        return self._connection

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def cursor(self) -> _CursorContext:
        return _CursorContext(self._conn)

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        return await InlineCursor(self._conn.cursor()).execute(sql, parameters)

    async def commit(self) -> None:
        self._conn.commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def connect_arguments(url: URL, **overrides: Any) -> tuple[Sequence[Any], dict[str, Any]]:
    """sqlite3.connect's arguments for ``url``, as SQLAlchemy's dialect derives them."""
    args, kwargs = SQLiteDialect_aiosqlite().create_connect_args(url)
    params = dict(kwargs)
    params.update(overrides)
    # Created and used on the event loop's thread; SQLAlchemy may close it from another
    # (garbage collection), which must not raise.
    params["check_same_thread"] = False
    return list(args), params


def inline_creator(url: URL, **overrides: Any) -> Callable[[], Awaitable[InlineConnection]]:
    """An ``async_creator`` for ``create_async_engine``: connections to ``url``'s file."""
    args, params = connect_arguments(url, **overrides)

    async def create() -> InlineConnection:
        connection = sqlite3.connect(*args, **params)
        # The audit append hashes its entry inside its statement (bot.core.store.audit).
        connection.create_function("gpuops_sha256", 1, sha256_hex, deterministic=True)
        return InlineConnection(connection)

    return create
