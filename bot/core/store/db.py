"""The durable state store: change requests, audit trail, delivery de-duplication, cluster
locks and fenced leases, on SQLite (one process) or PostgreSQL (several replicas) with the
same code. Import it as ``from bot.core.store import Store``.

Every write that decides something is a single SQL statement whose WHERE / ON CONFLICT
clause is the decision (compare-and-set), so the database, not the process, picks the one
winner among replicas, double clicks and redelivered events:

- ``transition``: ``UPDATE … WHERE id = :id AND state IN (:from_states) [AND <lease token
  unchanged>] RETURNING …``
- ``remember_delivery``: ``INSERT … ON CONFLICT DO NOTHING RETURNING …``
- ``lock_cluster`` / ``take_lease``: ``INSERT … ON CONFLICT DO UPDATE … WHERE <still ours
  or free> RETURNING …``

When the database cannot be reached in time, or refuses writes, every method raises
``StoreUnavailable`` (bot.core.store.errors) and has changed nothing.

Usage::

    store = await Store.open("sqlite:///gpuops.db")   # or "postgresql://user@host:5432/db"
    record, _ = await store.open_request(...)
    won = await store.transition(record.id, from_states={RequestState.PENDING},
                                 to=RequestState.APPROVED, decided_by="U123")
    await store.close()
"""

from __future__ import annotations

import asyncio
import re
from types import TracebackType
from typing import Self

from sqlalchemy import Connection, text

from bot.core.store.audit import AuditMixin, head_hash_in
from bot.core.store.deliveries import DeliveriesMixin
from bot.core.store.engine import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_OPERATION_TIMEOUT,
    create_engine,
    is_sqlite_memory,
    normalize_database_url,
    read_only_url,
)
from bot.core.store.errors import (
    StoreNotReady,
    StoreUnavailable,
    describe_database,
    is_missing_database,
    is_unavailable,
)
from bot.core.store.locks import LocksMixin
from bot.core.store.migrations import (
    LATEST_VERSION,
    migrate,
    missing_versions,
    pending_extra_seconds,
)
from bot.core.store.oncall import OnCallMixin
from bot.core.store.requests import RequestsMixin
from bot.core.store.tables import audit_chain
from bot.core.store.timeline import TimelineMixin

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
DEFAULT_HEALTH_TIMEOUT = 2.0
_PROBE = text("UPDATE gpuops_schema_version SET version = version WHERE version < 0")


def _has_chain(conn: Connection) -> bool:
    return conn.dialect.has_table(conn, audit_chain.name)


class Store(RequestsMixin, LocksMixin, AuditMixin, DeliveriesMixin, TimelineMixin, OnCallMixin):
    """Async access to the gpuops database. Create with ``await Store.open(url)``."""

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        schema: str | None = None,
        echo: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
    ) -> Store:
        """Connect, create or migrate the schema, check that the store takes writes, and
        return a ready store. StoreUnavailable (naming the database, never its password) if
        it cannot be reached within ``connect_timeout`` + ``operation_timeout`` or is
        read-only.

        ``schema`` (PostgreSQL only): create it if missing and use it for every table.
        ``operation_timeout`` (PostgreSQL): the longest one transaction may take.
        """
        sa_url = normalize_database_url(url)
        quoted_schema = None
        if schema is not None:
            if sa_url.get_backend_name() != "postgresql":
                raise ValueError("schema= is only supported on PostgreSQL")
            if not _SCHEMA_NAME.fullmatch(schema):
                raise ValueError(f"invalid schema name {schema!r}")
            quoted_schema = f'"{schema}"'  # the pattern above admits no quote characters
        engine = create_engine(
            sa_url,
            schema=quoted_schema,
            echo=echo,
            connect_timeout=connect_timeout,
            statement_timeout=operation_timeout,
        )
        store = cls(
            engine,
            database=describe_database(sa_url),
            connect_timeout=connect_timeout,
            operation_timeout=operation_timeout,
        )
        try:
            await store._migrate(quoted_schema, connect_timeout + operation_timeout)
            await store.probe_writable()
        except BaseException:
            await engine.dispose()
            raise
        return store

    @classmethod
    async def open_read_only(
        cls,
        url: str,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
    ) -> Store:
        """A store that only reads (``gpuops audit``): it creates nothing, migrates nothing,
        and every transaction refuses writes. StoreNotReady (naming the database, never its
        password) when the database does not exist, holds no gpuops schema, or an older one
        than this release's; StoreUnavailable when it cannot be reached."""
        sa_url = normalize_database_url(url)
        database = describe_database(sa_url)
        if sa_url.get_backend_name() == "sqlite" and is_sqlite_memory(sa_url):
            raise StoreNotReady(database, "is an empty in-memory database: name a file")
        engine = create_engine(
            read_only_url(sa_url),
            schema=None,
            echo=False,
            connect_timeout=connect_timeout,
            statement_timeout=operation_timeout,
            read_only=True,
        )
        store = cls(
            engine,
            database=database,
            connect_timeout=connect_timeout,
            operation_timeout=operation_timeout,
        )
        try:
            await store._require_schema()
        except BaseException:
            await store.close()  # SQLite's kept connection too, not only the pool
            raise
        return store

    async def _require_schema(self) -> None:
        try:
            async with self._begin() as conn:
                missing = await conn.run_sync(missing_versions)
        except StoreUnavailable as exc:
            if is_missing_database(exc):
                raise StoreNotReady(self._database, "does not exist") from exc
            raise
        if len(missing) == LATEST_VERSION:
            raise StoreNotReady(self._database, "holds no gpuops schema")
        if missing:
            raise StoreNotReady(
                self._database,
                f"has an older schema (versions {missing} of {LATEST_VERSION} not applied): "
                "start this release's gpuops serve or socket on it once to migrate it",
            )

    async def _migrate(self, quoted_schema: str | None, limit_seconds: float) -> None:
        limit = limit_seconds if self._engine.dialect.name == "postgresql" else None
        bound = asyncio.timeout(limit)
        started = asyncio.get_running_loop().time()
        try:
            async with bound:
                if limit is not None:
                    # A migration that rewrites rows (the audit chain) may take longer.
                    extra = await pending_extra_seconds(self._engine)
                    if extra:
                        limit += extra
                        bound.reschedule(started + limit)
                await migrate(self._engine, create_schema=quoted_schema)
        except Exception as exc:
            if is_unavailable(exc):
                raise self._unavailable(exc, bound, limit) from exc
            raise

    async def probe_writable(self) -> None:
        """StoreUnavailable unless the store answers and takes writes. The probe is an UPDATE
        that matches no row: SQLite and PostgreSQL both refuse it up front when the database
        (file, server or transaction) is read-only, and it leaves nothing behind. On SQLite
        it also reads the audit chain head that single-statement transitions hash over
        (when the schema has it: tests that stand in for an older release open a store on
        an older schema)."""
        async with self._begin() as conn:
            await conn.execute(_PROBE)
            if self._dialect == "sqlite" and await conn.run_sync(_has_chain):
                self._chain_hint = await head_hash_in(conn)

    async def healthy(self, within_seconds: float = DEFAULT_HEALTH_TIMEOUT) -> bool:
        """True if the store answers and takes what a change needs within
        ``within_seconds``."""
        try:
            async with asyncio.timeout(within_seconds):
                await self.probe_room()
        except (StoreUnavailable, TimeoutError):
            return False
        return True

    async def close(self) -> None:
        await self.reconnect()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
