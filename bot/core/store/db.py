"""The durable state store: change requests, audit trail, delivery de-duplication, cluster
locks and leases, on SQLite (one process) or PostgreSQL (several replicas) with the same code.

Every write that decides something is a single SQL statement whose WHERE / ON CONFLICT
clause is the decision (compare-and-set), so the database, not the process, picks the one
winner among replicas, double clicks and redelivered events:

- ``transition``: ``UPDATE … WHERE id = :id AND state IN (:from_states) RETURNING …``
- ``remember_delivery``: ``INSERT … ON CONFLICT DO NOTHING RETURNING …``
- ``lock_cluster`` / ``acquire_lease``: ``INSERT … ON CONFLICT DO UPDATE … WHERE <still ours
  or free> RETURNING …``

Usage::

    store = await Store.open("sqlite:///gpuops.db")   # or "postgresql://user@host:5432/db"
    record = await store.create_request(...)
    won = await store.transition(record.id, from_states={RequestState.PENDING},
                                 to=RequestState.APPROVED, decided_by="U123")
    await store.close()
"""

from __future__ import annotations

import asyncio
import enum
import re
import secrets
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    delete,
    event,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from bot.core.store.migrations import (
    SQLITE_BEGIN_OPTION,
    SQLITE_BEGIN_STATEMENTS,
    UTCDateTime,
    autoincrement_id_type,
    json_type,
    migrate,
)
from bot.core.store.sqlite_inline import inline_creator


class RequestState(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


TERMINAL_STATES: frozenset[RequestState] = frozenset(
    {
        RequestState.SUCCEEDED,
        RequestState.FAILED,
        RequestState.UNKNOWN,
        RequestState.DENIED,
        RequestState.EXPIRED,
        RequestState.CANCELLED,
    }
)


class ChangeRequestRecord(BaseModel):
    """One change request as stored. Returned by get/transition; never mutated in place."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: datetime
    updated_at: datetime
    state: RequestState
    provider: str
    project: str
    cluster_id: str
    cluster_name: str
    action: str
    plan: dict[str, Any]
    kinds: list[str]
    needs_approval: bool
    requester: str
    channel: str
    reason: str | None
    root_ts: str | None
    summary_ts: str | None
    prompt_ts: str | None = None  # the approval prompt (its buttons go once decided)
    decided_by: str | None
    decision_note: str | None
    break_glass: bool
    result_message: str | None
    expires_at: datetime | None
    version: int


class AuditEntry(BaseModel):
    """One line of the append-only audit trail."""

    model_config = ConfigDict(frozen=True)

    id: int
    at: datetime
    actor: str
    event: str
    project: str | None
    cluster_id: str | None
    request_id: str | None
    outcome: str | None
    detail: dict[str, Any] = Field(default_factory=dict)


class _MutableFields(BaseModel):
    """The columns a transition or update_fields may set besides state."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decided_by: str | None = None
    decision_note: str | None = None
    break_glass: bool = False
    result_message: str | None = None
    summary_ts: str | None = None
    root_ts: str | None = None
    prompt_ts: str | None = None


# Current schema, as the migrations in bot.core.store.migrations leave it (tests check they agree).
metadata = MetaData()

change_requests = Table(
    "gpuops_change_requests",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("state", String(16), nullable=False),
    Column("provider", Text(), nullable=False),
    Column("project", Text(), nullable=False),
    Column("cluster_id", Text(), nullable=False),
    Column("cluster_name", Text(), nullable=False),
    Column("action", Text(), nullable=False),
    Column("plan", json_type(), nullable=False),
    Column("kinds", json_type(), nullable=False),
    Column("needs_approval", Boolean(), nullable=False),
    Column("requester", Text(), nullable=False),
    Column("channel", Text(), nullable=False),
    Column("reason", Text()),
    Column("root_ts", Text()),
    Column("summary_ts", Text()),
    Column("prompt_ts", Text()),
    Column("decided_by", Text()),
    Column("decision_note", Text()),
    Column("break_glass", Boolean(), nullable=False),
    Column("result_message", Text()),
    Column("expires_at", UTCDateTime()),
    Column("version", Integer(), nullable=False),
    Index("ix_gpuops_change_requests_state", "state"),
    Index("ix_gpuops_change_requests_project", "project"),
    Index("ix_gpuops_change_requests_expires_at", "expires_at"),
)

audit = Table(
    "gpuops_audit",
    metadata,
    Column("id", autoincrement_id_type(), primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("actor", Text(), nullable=False),
    Column("event", Text(), nullable=False),
    Column("project", Text()),
    Column("cluster_id", Text()),
    Column("request_id", String(16)),
    Column("outcome", Text()),
    Column("detail", json_type(), nullable=False),
    Index("ix_gpuops_audit_project", "project"),
    Index("ix_gpuops_audit_request_id", "request_id"),
)

deliveries = Table(
    "gpuops_deliveries",
    metadata,
    Column("key", Text(), primary_key=True),
    Column("seen_at", UTCDateTime(), nullable=False),
    Index("ix_gpuops_deliveries_seen_at", "seen_at"),
)

cluster_locks = Table(
    "gpuops_cluster_locks",
    metadata,
    Column("provider", Text(), nullable=False),
    Column("project", Text(), nullable=False),
    Column("cluster_id", Text(), nullable=False),
    Column("request_id", String(16), nullable=False),
    Column("locked_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("provider", "project", "cluster_id", name="pk_gpuops_cluster_locks"),
)

leases = Table(
    "gpuops_leases",
    metadata,
    Column("name", Text(), primary_key=True),
    Column("holder", Text(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
)

# No 0/O, 1/I/L or U: ids are read aloud and typed from screenshots.
REQUEST_ID_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"
REQUEST_ID_PREFIX = "CR-"
_REQUEST_ID_LENGTH = 6
_REQUEST_ID_ATTEMPTS = 8

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SQLITE_BUSY_TIMEOUT_MS = 30_000


def new_request_id() -> str:
    """A random id such as ``CR-7K2M9Q``."""
    body = "".join(secrets.choice(REQUEST_ID_ALPHABET) for _ in range(_REQUEST_ID_LENGTH))
    return REQUEST_ID_PREFIX + body


def normalize_request_id(request_id: str) -> str:
    """Accept ids as people type them: ``cr-7k2m9q`` → ``CR-7K2M9Q``."""
    return request_id.strip().upper()


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


def _is_sqlite_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _require_aware(name: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{name} must be a tz-aware datetime")


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    """WAL, a busy timeout, and real transactions (SQLAlchemy emits BEGIN, not sqlite3)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # sqlite3's own transaction control skips BEGIN before SELECT and DDL; take it over.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "deferred")
        conn.exec_driver_sql(SQLITE_BEGIN_STATEMENTS[mode])


def _create_engine(url: URL, *, schema: str | None, echo: bool) -> AsyncEngine:
    # hide_parameters: statement parameters never reach logs or exception texts.
    common: dict[str, Any] = {"echo": echo, "hide_parameters": True}
    if url.get_backend_name() == "postgresql":
        connect_args: dict[str, Any] = {}
        if schema is not None:
            connect_args["server_settings"] = {"search_path": schema}
        return create_async_engine(
            url,
            pool_size=5,
            max_overflow=5,
            pool_timeout=30,
            pool_recycle=1800,
            pool_pre_ping=True,
            connect_args=connect_args,
            **common,
        )
    # No pre-ping for SQLite: a local file connection does not go stale. sqlite3 calls run
    # on the loop's thread, not on aiosqlite's worker thread (see bot.core.store.sqlite_inline).
    creator = inline_creator(url, timeout=_SQLITE_BUSY_TIMEOUT_MS / 1000)
    if _is_sqlite_memory(url):
        engine = create_async_engine(url, poolclass=StaticPool, async_creator=creator, **common)
    else:
        # The store queues its own transactions (see Store.__init__): few connections needed.
        engine = create_async_engine(
            url, pool_size=2, max_overflow=2, async_creator=creator, **common
        )
    _install_sqlite_hooks(engine)
    return engine


class Store:
    """Async access to the gpuops database. Create with ``await Store.open(url)``."""

    def __init__(self, engine: AsyncEngine, *, serialize: bool) -> None:
        self._engine = engine
        # SQLite has one writer at a time anyway. Queueing this process's transactions here
        # avoids the busy handler's sleep-and-retry, and an in-memory database is a single
        # shared connection that must not interleave transactions. Other processes (or
        # stores) on the same file still wait on the busy timeout.
        self._serial_lock = asyncio.Lock() if serialize else None

    @classmethod
    async def open(cls, url: str, *, schema: str | None = None, echo: bool = False) -> Store:
        """Connect, create or migrate the schema, and return a ready store.

        ``schema`` (PostgreSQL only): create it if missing and use it for every table.
        """
        sa_url = normalize_database_url(url)
        quoted_schema = None
        if schema is not None:
            if sa_url.get_backend_name() != "postgresql":
                raise ValueError("schema= is only supported on PostgreSQL")
            if not _SCHEMA_NAME.fullmatch(schema):
                raise ValueError(f"invalid schema name {schema!r}")
            quoted_schema = f'"{schema}"'  # the pattern above admits no quote characters
        engine = _create_engine(sa_url, schema=quoted_schema, echo=echo)
        try:
            await migrate(engine, create_schema=quoted_schema)
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine, serialize=sa_url.get_backend_name() == "sqlite")

    async def close(self) -> None:
        await self._engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        if self._serial_lock is None:
            async with self._engine.begin() as conn:
                yield conn
        else:
            async with self._serial_lock:
                # SQLite runs inline (bot.core.store.sqlite_inline), so connecting, committing and
                # closing complete without yielding to the event loop: the transaction is
                # one step of the loop. (AsyncEngine.begin()'s exit closes the connection
                # in a task of its own: loop turns during which the lock stays held.)
                conn = await self._engine.connect()
                try:
                    async with conn.begin():
                        yield conn
                finally:
                    await conn.close()
            # Then let the loop run what is ready (an ack, say) before the caller goes on:
            # otherwise a coroutine's transactions and the work between them run as one
            # long step (bench/: ack p99 at 1-10 commands in flight 2-3 ms lower).
            await asyncio.sleep(0)

    def _insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """A dialect INSERT, for ON CONFLICT clauses (same API on both backends)."""
        if self._engine.dialect.name == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    # ---- change requests -------------------------------------------------------------

    async def create_request(
        self,
        *,
        provider: str,
        project: str,
        cluster_id: str,
        cluster_name: str,
        action: str,
        plan: Mapping[str, Any],
        kinds: Collection[str],
        needs_approval: bool,
        requester: str,
        channel: str,
        reason: str | None,
        expires_at: datetime | None,
        state: RequestState = RequestState.PENDING,
    ) -> ChangeRequestRecord:
        _require_aware("expires_at", expires_at)
        now = _utcnow()
        values: dict[str, Any] = {
            "created_at": now,
            "updated_at": now,
            "state": RequestState(state).value,
            "provider": provider,
            "project": project,
            "cluster_id": cluster_id,
            "cluster_name": cluster_name,
            "action": action,
            "plan": dict(plan),
            "kinds": list(kinds),
            "needs_approval": needs_approval,
            "requester": requester,
            "channel": channel,
            "reason": reason,
            "break_glass": False,
            "expires_at": expires_at,
            "version": 1,
        }
        for _ in range(_REQUEST_ID_ATTEMPTS):
            statement = (
                self._insert(change_requests)
                .values(id=new_request_id(), **values)
                .on_conflict_do_nothing(index_elements=[change_requests.c.id])
                .returning(change_requests)
            )
            async with self._begin() as conn:
                row = (await conn.execute(statement)).mappings().first()
            if row is not None:
                return ChangeRequestRecord.model_validate(dict(row))
        raise RuntimeError(f"no free request id after {_REQUEST_ID_ATTEMPTS} attempts")

    async def get_request(self, request_id: str) -> ChangeRequestRecord | None:
        statement = select(change_requests).where(
            change_requests.c.id == normalize_request_id(request_id)
        )
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else ChangeRequestRecord.model_validate(dict(row))

    async def transition(
        self,
        request_id: str,
        *,
        from_states: Collection[RequestState],
        to: RequestState,
        **updates: Any,
    ) -> ChangeRequestRecord | None:
        """Move the request to ``to`` if, and only if, it is in one of ``from_states``.

        Returns the updated record if this call won, None if the request was elsewhere (or
        does not exist). ``updates`` may set decided_by, decision_note, break_glass,
        result_message, summary_ts and root_ts in the same statement.
        """
        if not from_states:
            raise ValueError("from_states must name at least one state")
        values = _validated_updates(updates)
        values["state"] = RequestState(to).value
        return await self._update_request(
            request_id,
            values,
            change_requests.c.state.in_([RequestState(state).value for state in from_states]),
        )

    async def update_fields(self, request_id: str, **updates: Any) -> ChangeRequestRecord | None:
        """Set non-state fields (root_ts, summary_ts, result_message, …); None if no such row."""
        if "state" in updates:
            raise ValueError("update_fields cannot change state; use transition()")
        values = _validated_updates(updates)
        if not values:
            return await self.get_request(request_id)
        return await self._update_request(request_id, values)

    async def _update_request(
        self, request_id: str, values: dict[str, Any], *conditions: Any
    ) -> ChangeRequestRecord | None:
        statement = (
            update(change_requests)
            .where(change_requests.c.id == normalize_request_id(request_id), *conditions)
            .values(
                **values,
                updated_at=_utcnow(),
                version=change_requests.c.version + 1,
            )
            .returning(change_requests)
        )
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else ChangeRequestRecord.model_validate(dict(row))

    async def list_requests(
        self,
        *,
        states: Collection[RequestState] | None = None,
        project: str | None = None,
        expires_before: datetime | None = None,
        limit: int = 100,
    ) -> list[ChangeRequestRecord]:
        """Requests matching every given filter, oldest first."""
        _require_aware("expires_before", expires_before)
        statement = select(change_requests)
        if states is not None:
            statement = statement.where(
                change_requests.c.state.in_([RequestState(state).value for state in states])
            )
        if project is not None:
            statement = statement.where(change_requests.c.project == project)
        if expires_before is not None:
            statement = statement.where(
                change_requests.c.expires_at.is_not(None),
                change_requests.c.expires_at < expires_before,
            )
        statement = statement.order_by(change_requests.c.created_at, change_requests.c.id).limit(
            limit
        )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [ChangeRequestRecord.model_validate(dict(row)) for row in rows]

    # ---- one running change per cluster ----------------------------------------------

    async def lock_cluster(
        self, provider: str, project: str, cluster_id: str, request_id: str
    ) -> bool:
        """Take the cluster for this request. True if it holds it now (again), False if
        another request does."""
        insert = self._insert(cluster_locks).values(
            provider=provider,
            project=project,
            cluster_id=cluster_id,
            request_id=request_id,
            locked_at=_utcnow(),
        )
        statement = insert.on_conflict_do_update(
            index_elements=[
                cluster_locks.c.provider,
                cluster_locks.c.project,
                cluster_locks.c.cluster_id,
            ],
            set_={"request_id": insert.excluded.request_id},
            where=cluster_locks.c.request_id == insert.excluded.request_id,
        ).returning(cluster_locks.c.request_id)
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None

    async def unlock_cluster(
        self, provider: str, project: str, cluster_id: str, request_id: str
    ) -> None:
        """Free the cluster if this request holds it (a no-op otherwise)."""
        statement = delete(cluster_locks).where(
            cluster_locks.c.provider == provider,
            cluster_locks.c.project == project,
            cluster_locks.c.cluster_id == cluster_id,
            cluster_locks.c.request_id == request_id,
        )
        async with self._begin() as conn:
            await conn.execute(statement)

    async def cluster_holder(self, provider: str, project: str, cluster_id: str) -> str | None:
        statement = select(cluster_locks.c.request_id).where(
            cluster_locks.c.provider == provider,
            cluster_locks.c.project == project,
            cluster_locks.c.cluster_id == cluster_id,
        )
        async with self._begin() as conn:
            holder: str | None = (await conn.execute(statement)).scalar_one_or_none()
        return holder

    # ---- audit (append-only: there is deliberately no update or delete) ---------------

    async def append_audit(
        self,
        *,
        actor: str,
        event: str,
        project: str | None = None,
        cluster_id: str | None = None,
        request_id: str | None = None,
        outcome: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> AuditEntry:
        statement = (
            audit.insert()
            .values(
                at=_utcnow(),
                actor=actor,
                event=event,
                project=project,
                cluster_id=cluster_id,
                request_id=request_id,
                outcome=outcome,
                detail=dict(detail or {}),
            )
            .returning(audit)
        )
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().one()
        return AuditEntry.model_validate(dict(row))

    async def list_audit(
        self, *, project: str | None = None, request_id: str | None = None, limit: int = 20
    ) -> list[AuditEntry]:
        """Audit entries matching every given filter, newest first."""
        statement = select(audit)
        if project is not None:
            statement = statement.where(audit.c.project == project)
        if request_id is not None:
            statement = statement.where(audit.c.request_id == request_id)
        statement = statement.order_by(audit.c.id.desc()).limit(limit)
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [AuditEntry.model_validate(dict(row)) for row in rows]

    # ---- Slack delivery de-duplication ------------------------------------------------

    async def remember_delivery(self, key: str) -> bool:
        """True the first time ``key`` is seen (across replicas), False every time after."""
        statement = (
            self._insert(deliveries)
            .values(key=key, seen_at=_utcnow())
            .on_conflict_do_nothing(index_elements=[deliveries.c.key])
            .returning(deliveries.c.key)
        )
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None

    async def prune_deliveries(self, older_than: datetime) -> int:
        """Forget delivery keys first seen before ``older_than``; returns how many."""
        _require_aware("older_than", older_than)
        statement = delete(deliveries).where(deliveries.c.seen_at < older_than)
        async with self._begin() as conn:
            result = await conn.execute(statement)
        return result.rowcount

    # ---- leases ----------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool:
        """Hold ``name`` for ``ttl_seconds`` from now. True if ``holder`` holds it now (it
        was free, expired, or already its own and is renewed); False if someone else does."""
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        now = _utcnow()
        insert = self._insert(leases).values(
            name=name, holder=holder, expires_at=now + timedelta(seconds=ttl_seconds)
        )
        statement = insert.on_conflict_do_update(
            index_elements=[leases.c.name],
            set_={"holder": insert.excluded.holder, "expires_at": insert.excluded.expires_at},
            where=(leases.c.holder == insert.excluded.holder) | (leases.c.expires_at <= now),
        ).returning(leases.c.name)
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` has it (a no-op otherwise)."""
        statement = delete(leases).where(leases.c.name == name, leases.c.holder == holder)
        async with self._begin() as conn:
            await conn.execute(statement)


def _validated_updates(updates: Mapping[str, Any]) -> dict[str, Any]:
    return _MutableFields.model_validate(dict(updates)).model_dump(exclude_unset=True)
