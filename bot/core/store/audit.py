"""The append-only audit trail, hash-chained (bot.core.store.chain): there is deliberately no
update or delete.

Appends are serialized by the chain head, one row in ``gpuops_audit_chain``: the append's
first statement is ``UPDATE … SET entries = entries + 1 … RETURNING last_hash``, which both
takes that row's lock until the transaction ends and reads the newest committed hash
(PostgreSQL re-reads a row it waited for), so two replicas appending at once queue there and
the chain never forks. The second statement inserts the entry and moves the head (one
statement on PostgreSQL: the INSERT and the head's UPDATE in one WITH; SQLite, in process,
runs them as two). That is one statement more per append than an unchained insert — the
cheapest way found: an advisory lock would need a third statement to read the newest hash
after taking it (in READ COMMITTED a statement's snapshot predates the lock it takes), and a
serializable transaction would fail and retry under contention instead of queueing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.chain import (
    CHAIN_NAME,
    ChainBreak,
    ChainHead,
    entry_hash,
    first_break,
    stored_detail,
)
from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.errors import StoreUnavailable, is_unavailable, unavailable_from
from bot.core.store.records import AuditEntry, AuditRow
from bot.core.store.tables import audit, audit_chain

EXPORT_PAGE = 500

_TAKE_HEAD = (
    update(audit_chain)
    .where(audit_chain.c.name == CHAIN_NAME)
    .values(entries=audit_chain.c.entries + 1)
    .returning(audit_chain.c.last_hash)
)


_ENTRY_COLUMNS = [c for c in audit.c if c.key != "id"]
# Built once: each append only binds its values (bot.core.store.requests says why).
_INSERT_ENTRY = audit.insert().returning(*audit.c)
_MOVE_HEAD = (
    update(audit_chain)
    .where(audit_chain.c.name == CHAIN_NAME)
    .values(last_hash=bindparam("b_hash"), last_id=bindparam("b_last_id"))
)
_appended = (
    audit.insert()
    .values({c.key: bindparam(f"b_{c.key}", type_=c.type) for c in _ENTRY_COLUMNS})
    .returning(*audit.c)
    .cte("appended")
)
_moved = (
    update(audit_chain)
    .where(audit_chain.c.name == CHAIN_NAME)
    .values(last_hash=bindparam("b_hash"), last_id=select(_appended.c.id).scalar_subquery())
    .cte("moved")
)
# PostgreSQL: the entry and the head's move in one statement (one WITH).
_APPEND_AND_MOVE = select(_appended).add_cte(_moved)


async def append_entry(conn: AsyncConnection, row: AuditRow, dialect: str) -> AuditEntry:
    """Append ``row`` at the end of the chain inside the caller's transaction (see the
    module docstring): the head is taken first and held until that transaction ends."""
    prev_hash = (await conn.execute(_TAKE_HEAD)).scalar_one()
    fields: dict[str, Any] = row.model_dump()
    fields["detail"] = stored_detail(row.detail)
    fields["at"] = utcnow()  # under the head's lock: chain order is time order
    fields["prev_hash"] = prev_hash
    fields["hash"] = entry_hash(fields, prev_hash)
    if dialect == "postgresql":
        params = {f"b_{key}": value for key, value in fields.items()}
        entry = (await conn.execute(_APPEND_AND_MOVE, params)).mappings().one()
    else:
        entry = (await conn.execute(_INSERT_ENTRY, fields)).mappings().one()
        await conn.execute(_MOVE_HEAD, {"b_hash": fields["hash"], "b_last_id": entry["id"]})
    return AuditEntry.model_validate(dict(entry))


class AuditMixin(StoreBase):
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
        """Append one entry at the end of the chain (see the module docstring)."""
        row = AuditRow(
            actor=actor,
            event=event,
            project=project,
            cluster_id=cluster_id,
            request_id=request_id,
            outcome=outcome,
            detail=dict(detail or {}),
        )
        async with self._begin() as conn:
            return await append_entry(conn, row, self._engine.dialect.name)

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

    async def count_audit(self, *, project: str | None = None) -> int:
        """How many audit entries there are (of one project, if given)."""
        statement = select(func.count()).select_from(audit)
        if project is not None:
            statement = statement.where(audit.c.project == project)
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
    ) -> AsyncIterator[AuditEntry]:
        """Every entry (from ``since``, of ``project``), oldest first, read in pages from one
        snapshot of the database: memory stays bounded however long the trail is."""
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
