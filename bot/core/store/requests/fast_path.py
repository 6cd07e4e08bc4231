"""The single-statement fast path (SQLite): opening, starting and finishing a change as the
request row's one write, whose triggers do the rest (bot.core.store.trigger_work), against
the audit chain head as this store last left it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.audit import append_entry, head_hash_in
from bot.core.store.engine import StoreBase, utcnow
from bot.core.store.locks import (
    RELEASED,
)
from bot.core.store.records import (
    AuditEntry,
    AuditRow,
    ChangeRequestRecord,
    Lease,
    RequestState,
)
from bot.core.store.requests.outcomes import StartAsked, Started, StartedHow
from bot.core.store.requests.statements import record_of, update_row_in
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
    @property
    def _one_statement(self) -> bool:
        """Opening, starting and finishing a change are one statement each here (SQLite's
        triggers, migration 11). PostgreSQL writes each table with a statement of its own,
        in the same one transaction: there a trigger's start would lock the request row
        before the lease, the reverse of recovery's order (the lease, then the row), and
        two replicas could deadlock on one request."""
        return self._dialect == "sqlite"

    async def _append(self, conn: AsyncConnection, row: AuditRow) -> AuditEntry:
        entry = await append_entry(conn, row, self._dialect)
        self._chain_hint = entry.hash
        return entry

    async def _hint_in(self, conn: AsyncConnection) -> str:
        if self._chain_hint is None:
            self._chain_hint = await head_hash_in(conn)
        return self._chain_hint

    async def _in_one(
        self, conn: AsyncConnection, statement: Callable[[str], Awaitable[tuple[Any, TriggerWork]]]
    ) -> Any:
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
        values: dict[str, Any],
        asked: StartAsked,
        audit: AuditRow,
    ) -> Started | None:
        """``start_execution`` as one statement (SQLite's triggers take the lease, lock the
        cluster and append the audit entry): Started, or None when the row stayed as it
        was (the lease held elsewhere, the cluster busy, the request moved)."""
        now = utcnow()
        until = now + timedelta(seconds=asked.ttl_seconds)
        fence = asked.fence
        taken = LeaseWork(name=asked.lease_name, holder=asked.holder, until=sqlite_time(until))
        lock = LockWork(
            lease_name=asked.lease_name,
            calls_until=sqlite_time(now + timedelta(seconds=asked.max_call_seconds)),
        )

        async def start(prev_hash: str) -> tuple[Any, TriggerWork]:
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

        row = await self._in_one(conn, start)
        if row is None:
            return None
        lease = fence or Lease(
            name=asked.lease_name,
            holder=asked.holder,
            token=int(row["lease_token"]),
            expires_at=until,
        )
        return Started(StartedHow.STARTED, lease=lease, record=record_of(row))

    async def _finish_in_one(
        self,
        conn: AsyncConnection,
        request_id: str,
        fence: Lease | None,
        values: dict[str, Any],
        from_states: Collection[RequestState],
        audit: AuditRow,
    ) -> ChangeRequestRecord | None:
        """``finish_execution``'s usual case as one statement (SQLite's triggers free the
        cluster, release the lease and append the audit entry); None when the request was
        not where the finish expects it (nothing written)."""
        release = None
        if fence is not None:
            released = sqlite_time(RELEASED)
            release = ReleaseWork(name=fence.name, holder=fence.holder, released=released)
        now = utcnow()

        async def finish(prev_hash: str) -> tuple[Any, TriggerWork]:
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
