"""The append-only audit trail, hash-chained (bot.core.store.chain): there is deliberately no
update or delete.

An append is one statement on PostgreSQL and two on SQLite, and the database itself joins
the entry to the chain: it reads the head's ``last_hash`` and hashes the entry's canonical
JSON around it (``chain.canonical_pieces``), so no round trip is needed to learn the hash
before writing the entry.

- PostgreSQL: ``WITH head AS (SELECT … FOR UPDATE), appended AS (INSERT … SELECT … FROM head
  RETURNING …), moved AS (UPDATE the head) SELECT … FROM appended``. ``FOR UPDATE`` queues
  appends from several replicas on the head's row, and in READ COMMITTED a row locked after
  a wait is read again at its newest version, so the chain never forks. The entry's time is
  ``clock_timestamp()`` read with that lock held, so chain order is time order.
- SQLite: ``INSERT … SELECT … FROM gpuops_audit_chain`` (the hash by ``gpuops_sha256``, a
  function each connection registers), then the head's ``UPDATE``. The first statement takes
  the database's write lock for the rest of the transaction, and one process's
  transactions are serialized by the store's lock (SQLite serves one replica), so the time
  taken just before it keeps chain order time order too.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Required, TypedDict, Unpack

from sqlalchemy import (
    CTE,
    BindParameter,
    ColumnElement,
    Insert,
    Select,
    Text,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.chain import (
    CHAIN_NAME,
    HASHED_FIELDS,
    ChainBreak,
    ChainHead,
    canonical_pieces,
    first_break,
    stamp,
    stored_detail,
)
from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.errors import StoreUnavailable, is_unavailable, unavailable_from
from bot.core.store.records import AuditEntry, AuditRow
from bot.core.store.tables import audit, audit_chain

EXPORT_PAGE = 500

_HASHED_COLUMNS = HASHED_FIELDS
_STAMP_FORMAT = 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'  # chain.stamp's, in PostgreSQL's to_char


def _bound(key: str, prefix: str = "b_") -> BindParameter[object]:
    return bindparam(f"{prefix}{key}", type_=audit.c[key].type)


def _text(key: str, prefix: str = "b_") -> BindParameter[str]:
    return bindparam(f"{prefix}{key}", type_=Text())


def postgres_append_ctes(after: Sequence[CTE] = (), prefix: str = "b_") -> tuple[CTE, CTE]:
    """The append as two CTEs, ``appended`` (the entry) and ``head_moved`` (the chain
    head), for a statement of its own or one that writes business rows first: with
    ``after``, the head is locked (``FOR UPDATE``) only once those CTEs have run, and
    only when the first returned a row, so a transition waits for the head last and holds
    it only for the append itself and the commit that follows. Parameters are named
    ``prefix`` + the audit column (and ``before_at``, ``before_prev``, ``after_prev``)."""
    gates: list[ColumnElement[bool]] = [audit_chain.c.name == CHAIN_NAME]
    if after:
        gates.append(select(1).select_from(after[0]).exists())
        gates.extend(
            select(func.count()).select_from(cte).scalar_subquery() >= 0 for cte in after[1:]
        )
    head = (
        select(audit_chain.c.last_hash, func.clock_timestamp().label("at"))
        .where(*gates)
        .with_for_update(of=audit_chain)
        .cte("head")
    )
    stamped = func.to_char(func.timezone("UTC", head.c.at), _STAMP_FORMAT)
    canonical = (
        _text("before_at", prefix)
        + stamped
        + _text("before_prev", prefix)
        + head.c.last_hash
        + _text("after_prev", prefix)
    )
    hashed = func.encode(func.sha256(func.convert_to(canonical, "UTF8")), "hex")
    values = select(
        head.c.at, *(_bound(key, prefix) for key in _HASHED_COLUMNS), head.c.last_hash, hashed
    )
    columns = ["at", *_HASHED_COLUMNS, "prev_hash", "hash"]
    appended = audit.insert().from_select(columns, values).returning(*audit.c).cte("appended")
    moved = (
        update(audit_chain)
        .where(audit_chain.c.name == CHAIN_NAME, select(1).select_from(appended).exists())
        .values(
            entries=audit_chain.c.entries + 1,
            last_id=select(appended.c.id).scalar_subquery(),
            last_hash=select(appended.c.hash).scalar_subquery(),
        )
        .cte("head_moved")
    )
    return appended, moved


def append_params(row: AuditRow, prefix: str = "b_") -> dict[str, object]:
    """The parameters of a PostgreSQL append of ``row`` (``postgres_append_ctes``)."""
    fields: dict[str, Any] = row.model_dump()
    fields["detail"] = stored_detail(row.detail)
    pieces = canonical_pieces(fields)
    params = {f"{prefix}{key}": fields[key] for key in _HASHED_COLUMNS}
    params[f"{prefix}before_at"] = pieces.before_at
    params[f"{prefix}before_prev"] = pieces.before_prev
    params[f"{prefix}after_prev"] = pieces.after_prev
    return params


def _postgres_append() -> Select[tuple[object, ...]]:
    appended, moved = postgres_append_ctes()
    return select(appended).add_cte(moved)


def _sqlite_append() -> Insert:
    canonical = _text("before_prev") + audit_chain.c.last_hash + _text("after_prev")
    values = select(
        _bound("at"),
        *(_bound(key) for key in _HASHED_COLUMNS),
        audit_chain.c.last_hash,
        func.gpuops_sha256(canonical),
    ).where(audit_chain.c.name == CHAIN_NAME)
    columns = ["at", *_HASHED_COLUMNS, "prev_hash", "hash"]
    return audit.insert().from_select(columns, values).returning(*audit.c)


# Built once: each append only binds its values (bot.core.store.requests says why).
_APPEND = {"postgresql": _postgres_append(), "sqlite": _sqlite_append()}
_MOVE_HEAD = (
    update(audit_chain)
    .where(audit_chain.c.name == CHAIN_NAME)
    .values(
        entries=audit_chain.c.entries + 1,
        last_hash=bindparam("b_hash"),
        last_id=bindparam("b_last_id"),
    )
)


_HEAD_HASH = select(audit_chain.c.last_hash).where(audit_chain.c.name == CHAIN_NAME)


async def head_hash_in(conn: AsyncConnection) -> str:
    """The hash of the chain's last entry, read inside the caller's transaction."""
    last_hash: str = (await conn.execute(_HEAD_HASH)).scalar_one()
    return last_hash


async def append_entry(conn: AsyncConnection, row: AuditRow, dialect: str) -> AuditEntry:
    """Append ``row`` at the end of the chain inside the caller's transaction (see the
    module docstring): the head stays taken until that transaction ends."""
    if dialect == "postgresql":
        params = append_params(row)
        entry = (await conn.execute(_APPEND["postgresql"], params)).mappings().one()
        return AuditEntry.model_validate(dict(entry))
    fields: dict[str, Any] = row.model_dump()
    fields["detail"] = stored_detail(row.detail)
    pieces = canonical_pieces(fields)
    sqlite_params = {f"b_{key}": fields[key] for key in _HASHED_COLUMNS}
    sqlite_params["b_after_prev"] = pieces.after_prev
    at = utcnow()
    sqlite_params["b_at"] = at
    sqlite_params["b_before_prev"] = pieces.before_at + stamp(at) + pieces.before_prev
    entry = (await conn.execute(_APPEND["sqlite"], sqlite_params)).mappings().one()
    await conn.execute(_MOVE_HEAD, {"b_hash": entry["hash"], "b_last_id": entry["id"]})
    return AuditEntry.model_validate(dict(entry))


class AuditFields(TypedDict, total=False):
    """An entry to append (``AuditRow``'s fields): who did what, about which project,
    cluster and request, how it came out, and its detail."""

    actor: Required[str]
    event: Required[str]
    project: str | None
    cluster_id: str | None
    request_id: str | None
    outcome: str | None
    detail: Mapping[str, object] | None


class AuditMixin(StoreBase):
    async def append_audit(self, **fields: Unpack[AuditFields]) -> AuditEntry:
        """Append one entry at the end of the chain (see the module docstring)."""
        row = AuditRow.model_validate({**fields, "detail": dict(fields.get("detail") or {})})
        async with self._begin() as conn:
            entry = await append_entry(conn, row, self._engine.dialect.name)
        self._chain_hint = entry.hash
        return entry

    async def list_audit(
        self, *, project: str | None = None, request_id: str | None = None, limit: int = 20
    ) -> list[AuditEntry]:
        """Audit entries matching every given filter, newest first."""
        statement = select(audit)
        if project is not None:
            statement = statement.where(audit.c.project == project)
        if request_id is not None:
            statement = statement.where(audit.c.request_id == request_id)
        if project is not None and request_id is None:
            # Chain order is time order: walking ix_gpuops_audit_project_at backwards hands
            # the newest over without sorting the project's whole trail (PostgreSQL sorted
            # ix_gpuops_audit_project's rows by id).
            statement = statement.order_by(audit.c.at.desc(), audit.c.id.desc())
        else:
            statement = statement.order_by(audit.c.id.desc())
        statement = statement.limit(limit)
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [AuditEntry.model_validate(dict(row)) for row in rows]

    async def count_audit(self, *, project: str | None = None, up_to: int | None = None) -> int:
        """How many audit entries there are (of one project, if given), counted only up to
        ``up_to`` if given (the index is read no further)."""
        matching = select(audit.c.id)
        if project is not None:
            matching = matching.where(audit.c.project == project)
        if up_to is not None:
            matching = matching.limit(up_to)
        statement = select(func.count()).select_from(matching.subquery())
        async with self._begin() as conn:
            return int((await conn.execute(statement)).scalar_one())

    async def chain_head(self) -> ChainHead:
        async with self._begin() as conn:
            return await _head(conn)

    async def export_audit(
        self,
        *,
        since: datetime | None = None,
        project: str | None = None,
        page_size: int = EXPORT_PAGE,
    ) -> AsyncGenerator[AuditEntry, None]:
        """Every entry (from ``since``, of ``project``), oldest first, read in pages from one
        snapshot of the database: memory stays bounded however long the trail is. A reader
        that stops early closes it (``contextlib.aclosing``) to end the snapshot at once."""
        require_aware("since", since)
        conditions: list[ColumnElement[bool]] = []
        if since is not None:
            conditions.append(audit.c.at >= since)
        if project is not None:
            conditions.append(audit.c.project == project)
        async with self._snapshot() as conn:
            async for entry in _pages(conn, conditions, page_size):
                yield entry

    async def verify_audit(self, *, page_size: int = EXPORT_PAGE) -> tuple[int, ChainBreak | None]:
        """Walk the whole chain in one snapshot: how many entries hold, and the first break."""
        async with self._snapshot() as conn:
            head = await _head(conn)
            return await first_break(_pages(conn, [], page_size), head)

    @asynccontextmanager
    async def _snapshot(self) -> AsyncIterator[AsyncConnection]:
        """One read transaction that sees one moment of the database for as long as it
        lasts: the chain head and every page agree. Not time-bounded like ``_begin`` (a
        long trail takes as long as it takes; each statement still has the driver's)."""
        try:
            if self._serial_lock is not None:
                async with self._sqlite_begin() as conn:
                    yield conn
            else:
                async with self._engine.connect() as conn:
                    await conn.execution_options(isolation_level="REPEATABLE READ")
                    async with conn.begin():
                        yield conn
        except StoreUnavailable:
            raise
        except Exception as exc:
            if is_unavailable(exc):
                raise unavailable_from(exc, self._database, timeout=self._connect_timeout) from exc
            raise


async def _head(conn: AsyncConnection) -> ChainHead:
    statement = select(audit_chain).where(audit_chain.c.name == CHAIN_NAME)
    row = (await conn.execute(statement)).mappings().one()
    return ChainHead(entries=row["entries"], last_id=row["last_id"], last_hash=row["last_hash"])


async def _pages(
    conn: AsyncConnection, conditions: list[ColumnElement[bool]], page_size: int
) -> AsyncIterator[AuditEntry]:
    after: int | None = None
    while True:
        statement = select(audit).where(*conditions).order_by(audit.c.id).limit(page_size)
        if after is not None:
            statement = statement.where(audit.c.id > after)
        rows = (await conn.execute(statement)).mappings().all()
        for row in rows:
            yield AuditEntry.model_validate(dict(row))
        if len(rows) < page_size:
            return
        after = rows[-1]["id"]
