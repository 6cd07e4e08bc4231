"""The store's engine and transactions: URL handling, SQLite and PostgreSQL set-up, time
bounds, and the mapping of connection failures to ``StoreUnavailable``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeAlias
from urllib.parse import quote

from sqlalchemy import Connection, Table, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool
from sqlalchemy.sql.dml import ReturningInsert

from bot.core.store.errors import StoreUnavailable, is_unavailable, unavailable_from
from bot.core.store.migrations import SQLITE_BEGIN_OPTION, SQLITE_BEGIN_STATEMENTS
from bot.core.store.sqlite_inline import begin_on, inline_creator, inline_url
from bot.metrics import STORE_STATEMENTS, STORE_TRANSACTIONS

DialectInsert: TypeAlias = postgresql.Insert | sqlite.Insert  # both have ON CONFLICT
Upsert: TypeAlias = ReturningInsert[tuple[object, ...]]  # an INSERT … ON CONFLICT … RETURNING

SQLITE_BUSY_TIMEOUT_MS = 30_000
# PostgreSQL: how long connecting may take, and one transaction end to end (pool wait,
# connect, statements, commit). Beyond that the store is "unavailable", not slow.
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_OPERATION_TIMEOUT = 10.0
# A PostgreSQL connection back in the pool for less than this was working a moment ago and
# goes out unpinged: asyncpg pings inside a transaction of its own, so a ping at every
# checkout (pool_pre_ping) cost the server one more transaction per store transaction.
# One idle longer (a restart or a failover may have closed it) is pinged before use and
# replaced when the ping fails; a connection that broke sooner fails its statement, which
# the store reports as unavailable and SQLAlchemy answers by emptying the pool.
PING_AFTER_IDLE_SECONDS = 5.0


def normalize_database_url(url: str) -> URL:
    """Map the URL a user writes to the async driver SQLAlchemy needs.

    ``sqlite:///x.db`` → ``sqlite+aiosqlite``; ``postgresql://`` / ``postgres://`` →
    ``postgresql+asyncpg`` (a libpq ``sslmode`` query parameter becomes asyncpg's ``ssl``).
    """
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite" and driver in ("", "aiosqlite"):
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend == "postgresql" and driver in ("", "asyncpg"):
        query = dict(parsed.query)
        if "sslmode" in query:
            query["ssl"] = query.pop("sslmode")
        return parsed.set(drivername="postgresql+asyncpg", query=query)
    raise ValueError(
        f"unsupported database URL scheme {parsed.drivername!r}: use sqlite:///… or postgresql://…"
    )


def is_sqlite_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:")


def utcnow() -> datetime:
    return datetime.now(UTC)


def require_aware(name: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{name} must be a tz-aware datetime")


def _install_sqlite_hooks(engine: AsyncEngine, *, read_only: bool) -> None:
    """WAL, a busy timeout, and real transactions (SQLAlchemy emits BEGIN, not sqlite3).
    A read-only connection leaves the journal mode as it is: switching it is a write."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # sqlite3's own transaction control skips BEGIN before SELECT and DDL; take it over.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if not read_only:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "deferred")
        # Straight to sqlite3 (a plain cursor): a statement through SQLAlchemy's execution
        # machinery cost more than the BEGIN itself, four times per scale-up.
        begin_on(conn.connection.dbapi_connection, SQLITE_BEGIN_STATEMENTS[mode])


_BEGIN_STATEMENTS = frozenset(SQLITE_BEGIN_STATEMENTS.values())


def _install_counters(engine: AsyncEngine) -> None:
    """Count the statements the store sends and the transactions it opens (/metrics)."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _on_statement(
        _conn: Connection,
        _cursor: object,
        statement: str,
        _parameters: object,
        _context: object,
        _executemany: bool,
    ) -> None:
        if statement not in _BEGIN_STATEMENTS:  # SQLite's BEGIN, sent by _install_sqlite_hooks
            STORE_STATEMENTS.inc()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(_conn: Connection) -> None:
        STORE_TRANSACTIONS.inc()


def _install_idle_ping(engine: AsyncEngine, idle_seconds: float) -> None:
    """Ping a pooled connection before use only when it sat idle ``idle_seconds`` or more."""
    pool = engine.sync_engine.pool

    @event.listens_for(pool, "checkin")
    def _on_checkin(_dbapi_connection: DBAPIConnection | None, record: ConnectionPoolEntry) -> None:
        record.info["checked_in"] = time.monotonic()

    @event.listens_for(pool, "checkout")
    def _on_checkout(
        dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry, _proxy: object
    ) -> None:
        checked_in = record.info.get("checked_in")
        if checked_in is None or time.monotonic() - checked_in < idle_seconds:
            return
        try:
            dbapi_connection.ping()
        except Exception as error:
            raise DisconnectionError("a pooled connection failed its ping") from error


def read_only_url(url: URL) -> URL:
    """``url`` opened so that nothing can be written, and a missing SQLite file is an error
    rather than a new empty database (``mode=ro``)."""
    if url.get_backend_name() == "sqlite":
        # SQLAlchemy hands the database to sqlite3 as the URI's path: it must be "file:…".
        path = quote(url.database or "", safe="/")
        return url.set(database=f"file:{path}").update_query_dict({"mode": "ro", "uri": "true"})
    return url


def create_engine(
    url: URL,
    *,
    schema: str | None,
    echo: bool,
    connect_timeout: float,
    statement_timeout: float,
    read_only: bool = False,
) -> AsyncEngine:
    """The engine for ``url``; ``read_only``: every transaction refuses writes (SQLite:
    pass a ``read_only_url``; PostgreSQL: ``default_transaction_read_only``)."""
    # hide_parameters: statement parameters never reach logs or exception texts.
    common: dict[str, Any] = {"echo": echo, "hide_parameters": True}
    if url.get_backend_name() == "postgresql":
        connect_args: dict[str, Any] = {
            "timeout": connect_timeout,
            # Past the store's own bound on a transaction, which is the one that fires.
            "command_timeout": statement_timeout + 1.0,
        }
        server_settings: dict[str, str] = {}
        if schema is not None:
            server_settings["search_path"] = schema
        if read_only:
            server_settings["default_transaction_read_only"] = "on"
        if server_settings:
            connect_args["server_settings"] = server_settings
        engine = create_async_engine(
            url,
            pool_size=5,
            max_overflow=5,
            pool_timeout=connect_timeout,
            pool_recycle=1800,
            connect_args=connect_args,
            **common,
        )
        _install_idle_ping(engine, PING_AFTER_IDLE_SECONDS)
        _install_counters(engine)
        return engine
    # No pre-ping for SQLite: a local file connection does not go stale. sqlite3 calls run
    # on the loop's thread, not on aiosqlite's worker thread (see bot.core.store.sqlite_inline).
    creator = inline_creator(url, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    inline = inline_url(url)
    if is_sqlite_memory(url):
        engine = create_async_engine(inline, poolclass=StaticPool, creator=creator, **common)
    else:
        # The store queues its own transactions (see StoreBase.__init__): few connections.
        engine = create_async_engine(inline, pool_size=2, max_overflow=2, creator=creator, **common)
    _install_sqlite_hooks(engine, read_only=read_only)
    _install_counters(engine)
    return engine


class StoreBase:
    """The engine and the one way the store's parts open a transaction (``_begin``)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        database: str,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        operation_timeout: float | None = None,
    ) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name  # "sqlite" or "postgresql"
        self._database = database
        self._connect_timeout = connect_timeout
        # SQLite runs inline, on the loop's thread: a timeout could not interrupt it.
        self._operation_timeout = operation_timeout if engine.dialect.name == "postgresql" else None
        # SQLite has one writer at a time anyway. Queueing this process's transactions here
        # avoids the busy handler's sleep-and-retry, and an in-memory database is a single
        # shared connection that must not interleave transactions. Other processes (or
        # stores) on the same file still wait on the busy timeout.
        self._serial_lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        # SQLite: the audit chain head's hash as this store last left it (None: read it);
        # the triggers of bot.core.store.trigger_work check it before appending.
        self._chain_hint: str | None = None
        self._sqlite_held: AsyncConnection | None = None  # see _sqlite_connection

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @property
    def database(self) -> str:
        """The database this store uses, fit for messages: no password."""
        return self._database

    @asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction; connection failures, timeouts and a read-only database raise
        StoreUnavailable (the transaction did not commit)."""
        bound = asyncio.timeout(self._operation_timeout)
        try:
            if self._serial_lock is None:
                async with bound, self._engine.begin() as conn:
                    yield conn
            else:
                async with self._sqlite_begin() as conn:
                    yield conn
        except StoreUnavailable:
            raise
        except Exception as exc:
            if is_unavailable(exc):
                raise self._unavailable(exc, bound, self._operation_timeout) from exc
            raise

    def _unavailable(
        self, error: Exception, bound: asyncio.Timeout, limit: float | None
    ) -> StoreUnavailable:
        """The error for ``error``; a timeout is ``limit`` if ``bound`` expired, else the
        driver's connect timeout (its statement timeout lies past the bound)."""
        waited = limit if bound.expired() else self._connect_timeout
        return unavailable_from(error, self._database, timeout=waited)

    @asynccontextmanager
    async def _sqlite_begin(self) -> AsyncIterator[AsyncConnection]:
        assert self._serial_lock is not None
        async with self._serial_lock:
            # SQLite runs inline (bot.core.store.sqlite_inline), so connecting, committing and
            # closing complete without yielding to the event loop: the transaction is
            # one step of the loop. (AsyncEngine.begin()'s exit closes the connection
            # in a task of its own: loop turns during which the lock stays held.)
            conn = await self._sqlite_connection()
            try:
                async with conn.begin():
                    yield conn
            except BaseException:
                # Handed back to the pool, which resets it, as after every transaction
                # before: the next one starts on a clean connection.
                self._sqlite_held = None
                await conn.close()
                raise
        # Then let the loop run what is ready (an ack, say) before the caller goes on:
        # otherwise a coroutine's transactions and the work between them run as one
        # long step (bench/: ack p99 at 1-10 commands in flight 2-3 ms lower).
        await asyncio.sleep(0)

    async def _sqlite_connection(self) -> AsyncConnection:
        """The connection this store's transactions run on, one after the other (they are
        serialized anyway): kept between them, since checking one out of the pool and
        back in for each took more CPU than a short transaction itself."""
        held = self._sqlite_held
        if held is None or held.closed or held.invalidated:
            held = self._sqlite_held = await self._engine.connect()
        return held

    async def reconnect(self) -> None:
        """Close every connection the store has (SQLite's kept one and the pool's): the
        next transaction opens a new one, with whatever the connect hooks set then."""
        held, self._sqlite_held = self._sqlite_held, None
        if held is not None:
            await held.close()
        await self._engine.dispose()

    def _insert(self, table: Table) -> DialectInsert:
        """A dialect INSERT, for ON CONFLICT clauses (same API on both backends)."""
        if self._engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)
