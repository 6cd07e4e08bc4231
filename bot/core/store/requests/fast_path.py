"""The single-statement fast path (SQLite): opening, starting and finishing a change as the
request row's one write, whose triggers do the rest (bot.core.store.trigger_work), against
the audit chain head as this store last left it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Unpack

from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.audit import append_entry, head_hash_in
from bot.core.store.engine import StoreBase, utcnow
from bot.core.store.locks import RELEASED, cluster_params
from bot.core.store.records import (
    AuditEntry,
    AuditRow,
    ChangeRequestRecord,
    ClusterRef,
    Lease,
    RequestState,
)
from bot.core.store.requests.outcomes import StartAsked, Started, StartedHow
from bot.core.store.requests.pg_statements import (
    audit_params,
    finish_statement,
    open_statement,
    start_statement,
    transition_statement,
)
from bot.core.store.requests.statements import (
    Where,
    record_of,
    update_call,
    update_in,
    update_row_in,
)
from bot.core.store.trigger_work import (
    HEAD_MOVED,
    LeaseWork,
    LockWork,
    ReleaseWork,
    TriggerWork,
    audit_work,
    sqlite_time,
)

_HEAD_ATTEMPTS = 8  # single statements rerun because another process moved the chain head


class FastPathMixin(StoreBase):
    async def _move_in(
        self,
        conn: AsyncConnection,
        request_id: str,
        values: Mapping[str, object],
        audit: AuditRow | None,
        **where: Unpack[Where],
    ) -> ChangeRequestRecord | None:
        """The request row's compare-and-set and, when it won, ``audit`` appended, as one
        statement (SQLite: the row's trigger appends; PostgreSQL: a WITH chain takes the
        head after the row)."""
        if audit is None:
            return await update_in(conn, request_id, values, **where)
        if self._dialect == "sqlite":
            now = utcnow()
            audited = audit

            async def move(prev_hash: str) -> tuple[RowMapping | None, TriggerWork]:
                work = TriggerWork(audit=audit_work(audited, now, prev_hash))
                written = {**values, "last_transition": work.as_column()}
                return await update_row_in(conn, request_id, written, now=now, **where), work

            return record_of(await self._in_one(conn, move))
        moved, params = update_call(request_id, values, **where)
        params.update(audit_params(audit))
        row = (await conn.execute(transition_statement(moved), params)).mappings().first()
        return record_of(row)

    async def _open_in_one(
        self, conn: AsyncConnection, params: dict[str, object], entry: AuditRow
    ) -> RowMapping | None:
        """PostgreSQL: the new row and its audit entry as one statement (None: its id is
        taken, nothing written)."""
        statement = open_statement(tuple(sorted(params)))
        bound = {f"n_{name}": value for name, value in params.items()}
        return (await conn.execute(statement, {**bound, **audit_params(entry)})).mappings().first()

    async def _append(self, conn: AsyncConnection, row: AuditRow) -> AuditEntry:
        entry = await append_entry(conn, row, self._dialect)
        self._chain_hint = entry.hash
        return entry

    async def _hint_in(self, conn: AsyncConnection) -> str:
        if self._chain_hint is None:
            self._chain_hint = await head_hash_in(conn)
        return self._chain_hint

    async def _in_one(
        self,
        conn: AsyncConnection,
        statement: Callable[[str], Awaitable[tuple[RowMapping | None, TriggerWork]]],
    ) -> RowMapping | None:
        """Run ``statement``, one whose triggers append an audit entry hashed over the head
        hash it is given, until that was still the head (another process may have moved
        it, or a rolled-back transaction the hint): its row, None if it wrote none."""
        for _ in range(_HEAD_ATTEMPTS):
            try:
                row, work = await statement(await self._hint_in(conn))
            except IntegrityError as exc:
                if HEAD_MOVED not in str(exc.orig):
                    raise
                self._chain_hint = None  # read it again
                continue
            if row is not None and work.audit is not None:
                self._chain_hint = work.audit.hash
            return row
        raise RuntimeError(f"the audit chain head kept moving ({_HEAD_ATTEMPTS} attempts)")

    async def _start_in_one(
        self,
        conn: AsyncConnection,
        request_id: str,
        values: dict[str, object],
        asked: StartAsked,
        audit: AuditRow,
        cluster: ClusterRef,
    ) -> Started | None:
        """``start_execution`` as one statement (SQLite: the row's triggers take the lease,
        lock the cluster and append the audit entry; PostgreSQL: a WITH chain does, in that
        order): Started, or None when the row stayed as it was (the lease held elsewhere,
        the cluster busy, the request moved)."""
        now = utcnow()
        until = now + timedelta(seconds=asked.ttl_seconds)
        fence = asked.fence
        if self._dialect == "postgresql":
            row = await _start_on_postgres(conn, request_id, values, asked, audit, cluster, now)
        else:
            row = await self._start_on_sqlite(conn, request_id, values, asked, audit, now)
        if row is None:
            return None
        lease = fence or Lease(
            name=asked.lease_name,
            holder=asked.holder,
            token=int(row["lease_token"]),
            expires_at=until,
        )
        return Started(StartedHow.STARTED, lease=lease, record=record_of(row))

    async def _start_on_sqlite(
        self,
        conn: AsyncConnection,
        request_id: str,
        values: dict[str, object],
        asked: StartAsked,
        audit: AuditRow,
        now: datetime,
    ) -> RowMapping | None:
        until = now + timedelta(seconds=asked.ttl_seconds)
        fence = asked.fence
        taken = LeaseWork(name=asked.lease_name, holder=asked.holder, until=sqlite_time(until))
        lock = LockWork(
            lease_name=asked.lease_name,
            calls_until=sqlite_time(now + timedelta(seconds=asked.max_call_seconds)),
        )

        async def start(prev_hash: str) -> tuple[RowMapping | None, TriggerWork]:
            work = TriggerWork(
                lease=taken if fence is None else None,
                lock=lock,
                audit=audit_work(audit, now, prev_hash),
            )
            row = await update_row_in(
                conn,
                request_id,
                {**values, "last_transition": work.as_column()},
                from_states=(RequestState.APPROVED,),
                fence=fence,
                now=now,
                lease_of=asked.lease_name,
            )
            return row, work

        return await self._in_one(conn, start)

    async def _finish_in_one(
        self,
        conn: AsyncConnection,
        request_id: str,
        fence: Lease | None,
        values: dict[str, object],
        from_states: Collection[RequestState],
        audit: AuditRow,
        cluster: ClusterRef,
    ) -> ChangeRequestRecord | None:
        """``finish_execution``'s usual case as one statement (SQLite: the row's triggers
        free the cluster, release the lease and append the audit entry; PostgreSQL: a WITH
        chain does, after the row); None when the request was not where the finish expects
        it (nothing written)."""
        if self._dialect == "postgresql":
            moved, params = update_call(request_id, values, from_states=from_states, fence=fence)
            params.update(cluster_params(cluster), b_request_id=request_id, **audit_params(audit))
            if fence is not None:
                params.update(b_name=fence.name, b_holder=fence.holder)
            statement = finish_statement(moved, releases=fence is not None)
            return record_of((await conn.execute(statement, params)).mappings().first())
        release = None
        if fence is not None:
            released = sqlite_time(RELEASED)
            release = ReleaseWork(name=fence.name, holder=fence.holder, released=released)
        now = utcnow()

        async def finish(prev_hash: str) -> tuple[RowMapping | None, TriggerWork]:
            work = TriggerWork(
                unlock=True, release=release, audit=audit_work(audit, now, prev_hash)
            )
            row = await update_row_in(
                conn,
                request_id,
                {**values, "last_transition": work.as_column()},
                from_states=from_states,
                fence=fence,
                now=now,
            )
            return row, work

        return record_of(await self._in_one(conn, finish))


async def _start_on_postgres(
    conn: AsyncConnection,
    request_id: str,
    values: dict[str, object],
    asked: StartAsked,
    audit: AuditRow,
    cluster: ClusterRef,
    now: datetime,
) -> RowMapping | None:
    fence = asked.fence
    moved, params = update_call(
        request_id, values, from_states=(RequestState.APPROVED,), fence=fence, now=now
    )
    params.update(
        cluster_params(cluster),
        b_request_id=request_id,
        b_lease_name=asked.lease_name,
        b_calls_until=now + timedelta(seconds=asked.max_call_seconds),
        now=now,
        **audit_params(audit),
    )
    if fence is None:
        until = now + timedelta(seconds=asked.ttl_seconds)
        params.update(b_name=asked.lease_name, b_holder=asked.holder, b_expires_at=until)
    statement = start_statement(moved, fenced=fence is not None)
    return (await conn.execute(statement, params)).mappings().first()
