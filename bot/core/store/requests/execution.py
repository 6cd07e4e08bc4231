"""An execution's writes: its start under a lease with the cluster lock and call deadline,
a claim, the end of an interrupted one, its release, and the recording of its outcome."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.engine import utcnow
from bot.core.store.locks import (
    holder_in,
    lock_in,
    release_ended_in,
    release_lease_in,
    take_lease_in,
    unlock_in,
)
from bot.core.store.records import (
    KNOWN_OUTCOMES,
    TERMINAL_STATES,
    AuditRow,
    ChangeRequestRecord,
    ClusterRef,
    Lease,
    OutcomeRecorded,
    RequestState,
)
from bot.core.store.requests.fast_path import FastPathMixin
from bot.core.store.requests.outcomes import Moved, StartAsked, Started, StartedHow
from bot.core.store.requests.statements import get_in, transition_values, update_in

_EXECUTING = frozenset({RequestState.EXECUTING})


class ExecutionMixin(FastPathMixin):
    async def start_execution(
        self,
        request_id: str,
        *,
        lease_name: str,
        holder: str,
        ttl_seconds: float,
        cluster: ClusterRef,
        max_call_seconds: float,
        audit: AuditRow,
        fence: Lease | None = None,
        **updates: object,
    ) -> Started:
        """Start sending an approved change, in one transaction: take its lease (or, with
        ``fence``, keep the one taken by ``claim_execution``), lock its cluster with the
        provider call's deadline (``max_call_seconds`` from now: the lock is not taken over
        before it), move it ``approved`` → ``executing`` under the lease, and audit it.

        BUSY keeps the lease (the caller refuses the change, then releases it); HELD and
        MOVED leave nothing behind."""
        if max_call_seconds < 0:
            raise ValueError("max_call_seconds must not be negative")
        values = transition_values(RequestState.EXECUTING, updates)
        try:
            async with self._begin() as conn:
                asked = StartAsked(lease_name, holder, ttl_seconds, max_call_seconds, fence)
                started = await self._start_in_one(conn, request_id, values, asked, audit, cluster)
                if started is not None:
                    return started
                # Not started by the one statement: find out why, step by step; what the
                # statement took (a lease kept while the cluster is busy) is taken again
                # here, idempotently.
                lease = fence or await take_lease_in(
                    conn, self._dialect, lease_name, holder, ttl_seconds
                )
                if lease is None:
                    return Started(StartedHow.HELD)
                deadline = utcnow() + timedelta(seconds=max_call_seconds)
                busy = await self._lock_in(conn, cluster, request_id, lease_name, deadline)
                if busy is not None:
                    return Started(StartedHow.BUSY, lease=lease, holder=busy)
                done = await update_in(
                    conn,
                    request_id,
                    values,
                    from_states=(RequestState.APPROVED,),
                    fence=lease,
                )
                if done is None:
                    raise Moved(request_id)
                await self._append(conn, audit)
        except Moved:
            return Started(StartedHow.MOVED, lease=fence)
        return Started(StartedHow.STARTED, lease=lease, record=done)

    async def claim_execution(
        self,
        request_id: str,
        *,
        lease_name: str,
        holder: str,
        ttl_seconds: float,
        cluster: ClusterRef,
    ) -> Started:
        """Take the request's lease and lock its cluster, in one transaction, before checks
        that must run under the lock (a scheduled change's fetch); ``start_execution`` with
        the lease as ``fence`` then starts it. STARTED here means claimed (no record)."""
        async with self._begin() as conn:
            lease = await take_lease_in(conn, self._dialect, lease_name, holder, ttl_seconds)
            if lease is None:
                return Started(StartedHow.HELD)
            busy = await self._lock_in(conn, cluster, request_id, lease_name, None)
        if busy is not None:
            return Started(StartedHow.BUSY, lease=lease, holder=busy)
        return Started(StartedHow.STARTED, lease=lease)

    async def _lock_in(
        self,
        conn: AsyncConnection,
        cluster: ClusterRef,
        request_id: str,
        lease_name: str,
        calls_until: datetime | None,
    ) -> str | None:
        """Lock the cluster for the request: None when held now, else the holder. An ended
        holder's lock goes once no call of it can still arrive (then it is taken)."""
        for _ in range(2):
            if await lock_in(
                conn,
                self._dialect,
                cluster,
                request_id,
                lease_name=lease_name,
                calls_until=calls_until,
            ):
                return None
            holder = await holder_in(conn, cluster)
            if holder is None:
                continue  # freed meanwhile
            current = await get_in(conn, holder)
            ended = current is None or current.state in TERMINAL_STATES
            if not (ended and await release_ended_in(conn, cluster, holder)):
                return holder
        return await holder_in(conn, cluster) or request_id

    async def end_interrupted(
        self,
        request_id: str,
        *,
        lease_name: str,
        holder: str,
        ttl_seconds: float,
        from_states: Collection[RequestState],
        to: RequestState,
        cluster: ClusterRef,
        audit: AuditRow,
        **updates: object,
    ) -> ChangeRequestRecord | None:
        """End a request whose executor is gone, in one transaction: take its lease (which
        fences that executor's writes off: the token grows), move it under that lease, audit
        it, give the lease up again, and free its cluster unless a provider call it started
        may still arrive. None when a live executor holds the lease or the request moved."""
        values = transition_values(to, updates)
        async with self._begin() as conn:
            lease = await take_lease_in(conn, self._dialect, lease_name, holder, ttl_seconds)
            if lease is None:
                return None  # a live replica is sending it, or about to
            done = await update_in(conn, request_id, values, from_states=from_states, fence=lease)
            await release_lease_in(conn, lease.name, lease.holder)
            if done is not None:
                await release_ended_in(conn, cluster, request_id)
                await self._append(conn, audit)
        return done

    async def release_execution(
        self, request_id: str, lease: Lease, *, cluster: ClusterRef | None = None
    ) -> None:
        """An execution that ended without a finish (refused, moved, fenced off): free the
        cluster (with ``cluster``: the request has ended) and give the lease up, in one
        transaction."""
        async with self._begin() as conn:
            if cluster is not None:
                await unlock_in(conn, cluster, request_id)
            await release_lease_in(conn, lease.name, lease.holder)

    async def finish_execution(
        self,
        request_id: str,
        fence: Lease | None,
        *,
        to: RequestState,
        result_message: str | None,
        cluster: ClusterRef,
        audit: AuditRow,
        from_states: Collection[RequestState] = _EXECUTING,
    ) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
        """Record how a change ended, in one transaction: its state (from ``from_states``,
        under ``fence``), its audit entry, the cluster freed and the lease released; safe to
        call again with the same arguments (the executor replays the outcomes it could not
        record while the store was down): a replay is ALREADY_RECORDED, an ``unknown``
        marked by recovery is corrected (CORRECTED_UNKNOWN: the truth beats "unknown"), and
        FENCED or MISSING write nothing."""
        values = transition_values(to, {"result_message": result_message})
        async with self._begin() as conn:
            won = await self._finish_in_one(
                conn, request_id, fence, values, from_states, audit, cluster
            )
            if won is not None:
                return OutcomeRecorded.RECORDED, won
            # The statement wrote nothing (it writes all or nothing): find out why.
            status, done = await self._outcome_missed(conn, request_id, values)
            if status not in (OutcomeRecorded.FENCED, OutcomeRecorded.MISSING):
                await unlock_in(conn, cluster, request_id)
                if fence is not None:
                    await release_lease_in(conn, fence.name, fence.holder)
            # The chain head last, in every transaction: appends queue there, holding nothing
            # another transaction waits for before it reaches the head itself.
            if status is OutcomeRecorded.RECORDED or status is OutcomeRecorded.CORRECTED_UNKNOWN:
                await self._append(conn, audit)
        return status, done

    async def _outcome_missed(
        self, conn: AsyncConnection, request_id: str, values: dict[str, object]
    ) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
        """The outcome's write found the request elsewhere: already recorded, an
        ``unknown`` to correct, fenced off, or missing."""
        current = await get_in(conn, request_id)
        if current is None:
            return OutcomeRecorded.MISSING, None
        to = RequestState(str(values["state"]))
        same = to not in KNOWN_OUTCOMES or current.result_message == values["result_message"]
        if current.state == to and same:
            return OutcomeRecorded.ALREADY_RECORDED, current
        if current.state == RequestState.UNKNOWN and to in KNOWN_OUTCOMES:
            # In this transaction the row is ours (written or read under its write lock).
            corrected = await update_in(
                conn, request_id, values, from_states=(RequestState.UNKNOWN,)
            )
            if corrected is not None:
                return OutcomeRecorded.CORRECTED_UNKNOWN, corrected
        return OutcomeRecorded.FENCED, current
