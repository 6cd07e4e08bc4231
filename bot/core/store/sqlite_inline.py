"""SQLite for the async store with no thread hop and no greenlet switch per call.

aiosqlite runs every sqlite3 call (cursor, execute, fetch, close, commit …) on a worker
thread and hands the result back through the event loop: nine round trips per
single-statement transaction. Under load each round trip waits for a turn of a busy loop,
so a transaction took tens of milliseconds of wall time although SQLite itself needs tens
of microseconds — and every transaction queues behind the store's serial lock, the
de-duplication write that precedes each ack included.

``InlineSQLiteDialect`` is pysqlite's dialect declared async: ``create_async_engine``
accepts it, and SQLAlchemy's async layer runs each statement's sync code in a greenlet as
usual, but the DBAPI connection is the plain ``sqlite3.Connection``. Its calls run right
there on the calling thread and never switch back to the event loop. (An aiosqlite-shaped
connection whose coroutines ran inline cost two greenlet switches for each cursor, execute,
fetch and close: about 50 switches per scale-up.) A local-file transaction (WAL,
``synchronous=NORMAL``) completes within one step of the event loop, so the store's
transactions never interleave or wait on each other inside a process. Another process
holding the write lock makes a call wait in SQLite's busy handler, blocking the loop for as
long as that process's transaction lasts (sub-millisecond when it is also a gpuops store).

Use: ``create_async_engine(inline_url(url), creator=inline_creator(url, timeout=30.0))``.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, TypeAlias

from sqlalchemy import pool
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL
from sqlalchemy.util.concurrency import await_

from bot.core.store.chain import sha256_hex

if TYPE_CHECKING:
    from _typeshed import SupportsLenAndGetItem
    from sqlalchemy.engine.interfaces import DBAPIConnection

# What sqlite3 binds: a sequence of values, or a mapping of names to values.
Parameters: TypeAlias = "SupportsLenAndGetItem[object] | Mapping[str, object]"

DRIVER = "gpuops_inline"


class _Ready:
    """An awaitable that is done at once."""

    def __await__(self) -> Generator[None, None, None]:
        yield from ()


_READY = _Ready()


class InlineCursor(sqlite3.Cursor):
    """A sqlite3 cursor as SQLAlchemy's async layer drives it.

    A statement's rows are read at once, as aiosqlite's adapter read them, so that no
    statement stays open past the call (an open read keeps its snapshot and holds back
    checkpoints). It hands the async layer one finished awaitable per statement:
    ``AsyncConnection.execute`` refuses a driver that never awaits.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__(connection)
        self._rows: deque[tuple[object, ...]] = deque()

    def execute(self, sql: str, parameters: Parameters = (), /) -> InlineCursor:
        super().execute(sql, parameters)
        self._rows = deque(super().fetchall()) if self.description is not None else deque()
        await_(_READY)
        return self

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> InlineCursor:
        super().executemany(sql, parameters)
        self._rows = deque()
        await_(_READY)
        return self

    def fetchone(self) -> tuple[object, ...] | None:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[object, ...]]:
        count = self.arraysize if size is None else size
        return [self._rows.popleft() for _ in range(min(count, len(self._rows)))]

    def fetchall(self) -> list[tuple[object, ...]]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    async def _async_soft_close(self) -> None:
        """What the async layer calls after each statement: the rows are already read."""


class InlineConnection(sqlite3.Connection):
    """A sqlite3 connection whose cursors are ``InlineCursor``s."""

    def cursor(  # type: ignore[override]  # always an InlineCursor unless told otherwise
        self, factory: Callable[[sqlite3.Connection], sqlite3.Cursor] = InlineCursor
    ) -> sqlite3.Cursor:
        return super().cursor(factory)


class InlineSQLiteDialect(SQLiteDialect_pysqlite):
    """pysqlite's SQL and types over a sqlite3 connection used from the event loop."""

    driver = DRIVER
    supports_statement_cache = True
    is_async = True  # the async engine drives it; every call completes without awaiting
    has_terminate = False

    @classmethod
    def get_pool_class(cls, url: URL) -> type[pool.Pool]:
        if cls._is_url_file_db(url):
            return pool.AsyncAdaptedQueuePool
        return pool.StaticPool


registry.register(f"sqlite.{DRIVER}", __name__, "InlineSQLiteDialect")


def begin_on(connection: DBAPIConnection | None, statement: str) -> None:
    """Run a BEGIN on ``connection`` (a sqlite3 connection) with a plain cursor."""
    cursor = sqlite3.Cursor(connection)  # type: ignore[arg-type]  # a sqlite3 connection
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def inline_url(url: URL) -> URL:
    """``url`` (``sqlite+aiosqlite``, as users and migrations name it) for this dialect."""
    return url.set(drivername=f"sqlite+{DRIVER}")


# sqlite3.connect, whose arguments here are the dialect's (a list and a dict it derives).
_connect: Callable[..., sqlite3.Connection] = sqlite3.connect


def inline_creator(url: URL, **overrides: object) -> Callable[[], sqlite3.Connection]:
    """A ``creator`` for ``create_async_engine``: connections to ``url``'s file, with
    sqlite3.connect's arguments as SQLAlchemy's dialect derives them, and ``overrides``."""
    args, kwargs = SQLiteDialect_pysqlite().create_connect_args(url)
    params = dict(kwargs)
    params.update(overrides)
    # Created and used on the event loop's thread; SQLAlchemy may close it from another
    # (garbage collection), which must not raise.
    params["check_same_thread"] = False
    params["factory"] = InlineConnection

    def create() -> sqlite3.Connection:
        connection = _connect(*args, **params)
        # The audit append hashes its entry inside its statement (bot.core.store.audit).
        connection.create_function("gpuops_sha256", 1, sha256_hex, deterministic=True)
        return connection

    return create
