"""Change requests: create, read, list, and the compare-and-set transitions (optionally fenced
by an execution lease), including the idempotent recording of a provider outcome.

Every transition is one transaction: the state's compare-and-set together with its audit
entry (and the chain head), and for an execution's start and end the lease, the cluster lock
and the call deadline too. On SQLite the usual opening, start and finish are one statement
each, the request row's write, whose triggers do the rest (bot.core.store.trigger_work); a
start or a finish that finds things otherwise goes on step by step in the same transaction.
Statements are built once (module level, or cached per set of columns a caller sets) with
bound parameters; a call only binds its values, and a row a statement has just returned
(``RETURNING``) is never read again."""

from __future__ import annotations

import enum
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Update,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.audit import append_entry, head_hash_in
from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.locks import (
    RELEASED,
    fence_holds,
    fence_params,
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
    AuditEntry,
    AuditRow,
    ChangeRequestRecord,
    ClusterRef,
    Lease,
    MutableFields,
    OpenBeside,
    OutcomeRecorded,
    RequestState,
    new_request_id,
    normalize_request_id,
)
from bot.core.store.tables import change_requests, leases, workflow_steps
from bot.core.store.trigger_work import (
    HEAD_MOVED,
    LeaseWork,
    LockWork,
    ReleaseWork,
    TriggerWork,
    audit_work,
    sqlite_time,
)
from bot.errors import GpuopsError

_REQUEST_ID_ATTEMPTS = 8
_HEAD_ATTEMPTS = 8  # single statements rerun because another process moved the chain head
_EXECUTING = frozenset({RequestState.EXECUTING})


class StepTaken(GpuopsError):
    """The workflow step a request was to be linked to is no longer running (another replica
    made its request, or it was ended): no request was created."""


class RevertTaken(GpuopsError):
    """Another revert of the same request is open or done (a unique index, migration 12):
    no request was created."""

    def __init__(self, revert_of: str) -> None:
        self.revert_of = revert_of
        super().__init__(f"{revert_of} already has a revert")


# The index that lets one revert per request be open or done (migration 12).
_REVERT_SLOT = "revert_slot"


class _Moved(GpuopsError):
    """The request was not where the transition needs it: leave the transaction by it, so
    nothing taken in it (lease, lock) stays."""


class StartedHow(enum.StrEnum):
    """What ``start_execution`` did."""

    STARTED = "started"  # executing now, under ``lease``, holding the cluster
    HELD = "held"  # another executor holds the request's lease: nothing done
    BUSY = "busy"  # another request holds the cluster (``holder``); the lease is ours
    MOVED = "moved"  # the request is no longer approved: nothing done


@dataclass(frozen=True)
class _StartAsked:
    """What a start asks for: the execution lease (kept, with ``fence``), the call deadline."""

    lease_name: str
    holder: str
    ttl_seconds: float
    max_call_seconds: float
    fence: Lease | None


@dataclass(frozen=True)
class Started:
    how: StartedHow
    lease: Lease | None = None
    record: ChangeRequestRecord | None = None
    holder: str | None = None  # BUSY: the request holding the cluster


def _validated_updates(updates: Mapping[str, Any]) -> dict[str, Any]:
    return MutableFields.model_validate(dict(updates)).model_dump(exclude_unset=True)


@asynccontextmanager
async def _revert_slot_taken(revert_of: str | None) -> AsyncIterator[None]:
    """Turn the unique index's refusal of a second revert into RevertTaken (the
    transaction, left by it, stored nothing)."""
    try:
        yield
    except IntegrityError as exc:
        if revert_of is None or _REVERT_SLOT not in str(exc.orig):
            raise
        raise RevertTaken(revert_of) from None


def _record(row: Any) -> ChangeRequestRecord | None:
    return None if row is None else ChangeRequestRecord.model_validate(dict(row))


_GET = select(change_requests).where(change_requests.c.id == bindparam("request_id"))
_INSERT = {
    name: dialect.insert(change_requests)
    .on_conflict_do_nothing(index_elements=[change_requests.c.id])
    .returning(change_requests)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


def _state_in(states: tuple[str, ...]) -> ColumnElement[bool]:
    """``state IN (?, …)`` with ``states`` as the statement's own parameters: one shape,
    compiled once (an expanding IN is rewritten for its values on every execution)."""
    return change_requests.c.state.in_(
        [bindparam(f"state_{i}", value=state) for i, state in enumerate(states)]
    )


def _states(states: Collection[RequestState]) -> tuple[str, ...]:
    """The states' values in one order, so that each set has one statement."""
    return tuple(sorted({RequestState(state).value for state in states}))


@functools.lru_cache(maxsize=16)
def _beside(states: tuple[str, ...]) -> Select[Any]:
    """The requests on a cluster (``:project``, ``:cluster``) in one of ``states``: their id
    and state alone (with hundreds scheduled on a cluster, each row's plan and approvals
    would be read and parsed for nothing)."""
    return (
        select(change_requests.c.id, change_requests.c.state)
        .where(
            change_requests.c.project == bindparam("project"),
            change_requests.c.cluster_id == bindparam("cluster"),
            _state_in(states),
        )
        .order_by(change_requests.c.created_at, change_requests.c.id)
        .limit(100)
    )


_LINK_STEP = (
    update(workflow_steps)
    .where(
        workflow_steps.c.execution_id == bindparam("step"),
        workflow_steps.c.state == "running",
        workflow_steps.c.request_id.is_(None),
    )
    .values(request_id=bindparam("linked_id"), updated_at=bindparam("now"))
)


_LEASE_TOKEN = (
    select(leases.c.token)
    .where(leases.c.name == bindparam("lease_of"))
    .scalar_subquery()
    .label("lease_token")
)


@functools.lru_cache(maxsize=128)
def _update(
    columns: tuple[str, ...],
    *,
    states: tuple[str, ...] | None,
    fenced: bool,
    versioned: bool,
    lease_token: bool = False,
) -> Update:
    """``UPDATE … SET <columns> WHERE id = :request_id [AND state IN <states>] [AND
    <fence holds>] [AND version = :expected_version] RETURNING * [, the token of lease
    :lease_of as the statement's triggers left it]``, built once per shape."""
    conditions: list[ColumnElement[bool]] = [change_requests.c.id == bindparam("request_id")]
    if states is not None:
        conditions.append(_state_in(states))
    if fenced:
        conditions.append(fence_holds())
    if versioned:
        conditions.append(change_requests.c.version == bindparam("expected_version"))
    values: dict[str, Any] = {
        name: bindparam(f"v_{name}", type_=change_requests.c[name].type) for name in columns
    }
    returned: list[Any] = [change_requests, _LEASE_TOKEN] if lease_token else [change_requests]
    return (
        update(change_requests)
        .where(*conditions)
        .values(**values, version=change_requests.c.version + 1)
        .returning(*returned)
    )


class _Where(TypedDict, total=False):
    """Which row an update writes, past its id (see ``_update``)."""

    from_states: Collection[RequestState] | None
    fence: Lease | None
    expected_version: int | None


async def _update_in(
    conn: AsyncConnection, request_id: str, values: Mapping[str, Any], **where: Unpack[_Where]
) -> ChangeRequestRecord | None:
    return _record(await _update_row_in(conn, request_id, values, **where))


async def _update_row_in(
    conn: AsyncConnection,
    request_id: str,
    values: Mapping[str, Any],
    *,
    from_states: Collection[RequestState] | None = None,
    fence: Lease | None = None,
    expected_version: int | None = None,
    now: datetime | None = None,
    lease_of: str | None = None,
) -> Any:
    """The row as the update left it (with ``lease_of``: and that lease's token), or None."""
    fields = {**values, "updated_at": now or utcnow()}
    statement = _update(
        tuple(sorted(fields)),
        states=None if from_states is None else _states(from_states),
        fenced=fence is not None,
        versioned=expected_version is not None,
        lease_token=lease_of is not None,
    )
    params: dict[str, Any] = {f"v_{k}": v for k, v in fields.items()}
    params["request_id"] = normalize_request_id(request_id)
    if fence is not None:
        params.update(fence_params(fence))
    if expected_version is not None:
        params["expected_version"] = expected_version
    if lease_of is not None:
        params["lease_of"] = lease_of
    return (await conn.execute(statement, params)).mappings().first()


async def _get_in(conn: AsyncConnection, request_id: str) -> ChangeRequestRecord | None:
    params = {"request_id": normalize_request_id(request_id)}
    return _record((await conn.execute(_GET, params)).mappings().first())


def _transition_values(to: RequestState, updates: Mapping[str, Any]) -> dict[str, Any]:
    values = _validated_updates(updates)
    values["state"] = RequestState(to).value
    return values


class RequestsMixin(StoreBase):
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
        step: str | None = None,
        revert_of: str | None = None,
        run_at: datetime | None = None,
        approvals: Mapping[str, Any] | None = None,
        audit: AuditRow | None = None,
    ) -> ChangeRequestRecord:
        """Store a new request; with ``step`` (a workflow step's execution id), link that
        running step to it in the same transaction, or raise StepTaken and store nothing.
        ``audit`` (its ``request_id`` filled in) is appended in that transaction too."""
        record, _ = await self.open_request(
            provider=provider,
            project=project,
            cluster_id=cluster_id,
            cluster_name=cluster_name,
            action=action,
            plan=plan,
            kinds=kinds,
            needs_approval=needs_approval,
            requester=requester,
            channel=channel,
            reason=reason,
            expires_at=expires_at,
            state=state,
            step=step,
            revert_of=revert_of,
            run_at=run_at,
            approvals=approvals,
            audit=audit,
        )
        return record

    async def open_request(
        self,
        *,
        beside: Collection[RequestState] = (),
        audit: AuditRow | None = None,
        step: str | None = None,
        state: RequestState = RequestState.PENDING,
        **columns: Any,
    ) -> tuple[ChangeRequestRecord, list[OpenBeside]]:
        """``create_request``, and in the same transaction the other requests in one of
        ``beside``'s states on the same cluster (oldest first)."""
        require_aware("expires_at", columns.get("expires_at"))
        require_aware("run_at", columns.get("run_at"))
        now = utcnow()
        approvals = columns.pop("approvals", None)
        values: dict[str, Any] = {
            **columns,
            "created_at": now,
            "updated_at": now,
            "state": RequestState(state).value,
            "plan": dict(columns["plan"]),
            "kinds": list(columns["kinds"]),
            "break_glass": False,
            "version": 1,
            "approvals": dict(approvals) if approvals is not None else None,
        }
        values.setdefault("revert_of", None)
        values["revert_slot"] = values["revert_of"]  # one revert per request: its index
        values.setdefault("run_at", None)
        values["step_id"] = step or ""  # known: "" is none (None is "not known")
        for _ in range(_REQUEST_ID_ATTEMPTS):
            async with self._begin() as conn, _revert_slot_taken(values["revert_of"]):
                others = await self._beside_in(conn, values, beside)
                params = {**values, "id": new_request_id()}
                entry = None
                if audit is not None:
                    named = {"request_id": params["id"], "project": values["project"]}
                    entry = audit.model_copy(update={**named, "cluster_id": values["cluster_id"]})
                row = await self._insert_in(conn, params, entry, now)
                if row is None:
                    continue
                if step is not None:
                    await self._link_step(conn, step, str(row["id"]), now)
            record = ChangeRequestRecord.model_validate(dict(row))
            return record, others
        raise RuntimeError(f"no free request id after {_REQUEST_ID_ATTEMPTS} attempts")

    async def _insert_in(
        self, conn: AsyncConnection, params: dict[str, Any], entry: AuditRow | None, now: datetime
    ) -> Any:
        """The new row (None: its id is taken), with ``entry`` appended: on SQLite by the
        INSERT's trigger, in that one statement."""
        statement = _INSERT[self._dialect]
        if entry is None or not self._one_statement:
            row = (await conn.execute(statement, params)).mappings().first()
            if row is not None and entry is not None:
                await self._append(conn, entry)
            return row
        audited = entry

        async def insert(prev_hash: str) -> tuple[Any, TriggerWork]:
            work = TriggerWork(audit=audit_work(audited, now, prev_hash))
            written = {**params, "last_transition": work.as_column()}
            return (await conn.execute(statement, written)).mappings().first(), work

        return await self._in_one(conn, insert)

    # ---- the audit chain head, for single statements (bot.core.store.trigger_work) ----

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

    async def _beside_in(
        self, conn: AsyncConnection, values: Mapping[str, Any], beside: Collection[RequestState]
    ) -> list[OpenBeside]:
        if not beside:
            return []
        params = {"project": values["project"], "cluster": values["cluster_id"]}
        rows = (await conn.execute(_beside(_states(beside)), params)).all()
        return [OpenBeside(id=row.id, state=row.state) for row in rows]

    @staticmethod
    async def _link_step(conn: AsyncConnection, step: str, request_id: str, now: datetime) -> None:
        linked = await conn.execute(_LINK_STEP, {"step": step, "linked_id": request_id, "now": now})
        if linked.rowcount != 1:
            raise StepTaken(step)  # leaving the transaction by it stores no request

    async def get_request(self, request_id: str) -> ChangeRequestRecord | None:
        async with self._begin() as conn:
            return await _get_in(conn, request_id)

    async def transition(
        self,
        request_id: str,
        *,
        from_states: Collection[RequestState],
        to: RequestState,
        fence: Lease | None = None,
        audit: AuditRow | None = None,
        **updates: Any,
    ) -> ChangeRequestRecord | None:
        """Move the request to ``to`` if, and only if, it is in one of ``from_states`` (and,
        with ``fence``, that lease is still held with that token); ``audit`` is appended in
        the same transaction when it moves.

        Returns the updated record if this call won, None if the request was elsewhere, the
        fence was lost, or there is no such request. ``updates`` may set decided_by,
        decision_note, break_glass, result_message, summary_ts and root_ts in the same
        statement.
        """
        if not from_states:
            raise ValueError("from_states must name at least one state")
        values = _transition_values(to, updates)
        async with self._begin() as conn:
            done = await _update_in(conn, request_id, values, from_states=from_states, fence=fence)
            if done is not None and audit is not None:
                await self._append(conn, audit)
        return done

    async def update_fields(
        self, request_id: str, *, fence: Lease | None = None, **updates: Any
    ) -> ChangeRequestRecord | None:
        """Set non-state fields (root_ts, summary_ts, result_message, …); None if no such row
        (or, with ``fence``, if that lease has changed hands)."""
        if "state" in updates:
            raise ValueError("update_fields cannot change state; use transition()")
        values = _validated_updates(updates)
        if not values and fence is None:
            return await self.get_request(request_id)
        async with self._begin() as conn:
            return await _update_in(conn, request_id, values, fence=fence)

    async def decide_approval(
        self,
        seen: ChangeRequestRecord,
        approver: str,
        requirement: Mapping[str, Any],
        *,
        to: RequestState,
        audit: AuditRow,
        **updates: Any,
    ) -> ChangeRequestRecord | None:
        """One approval as one transaction: ``approver`` added to the approvals of the
        pending request ``seen`` (and what it now needs noted), its state set to ``to``
        (``approved`` when this approval completes the rule, else ``pending``) with
        ``updates``, and ``audit`` appended, compare-and-set on ``seen``'s version. None
        when the request moved meanwhile (another approval, a decision): nothing written,
        the caller reads it again. An approver already counted is not added twice."""
        noted = {**(seen.approvals or {}), **requirement}
        approvers = seen.approvers if approver in seen.approvers else [*seen.approvers, approver]
        values = _transition_values(to, updates)
        values["approvals"] = {**noted, "by": approvers}
        return await self._update_pending(seen, values, audit)

    async def note_requirement(
        self, seen: ChangeRequestRecord, requirement: Mapping[str, Any], audit: AuditRow
    ) -> ChangeRequestRecord | None:
        """Note what approving a pending request takes now (a policy reload changed it: the
        approvals so far, a break glass among them, stay), with its audit entry, compare-
        and-set on the version ``seen`` has: None when the request moved meanwhile
        (another replica noted it first, or someone decided it)."""
        values = {"approvals": {**(seen.approvals or {}), **requirement}}
        return await self._update_pending(seen, values, audit)

    async def _update_pending(
        self, seen: ChangeRequestRecord, values: dict[str, Any], audit: AuditRow
    ) -> ChangeRequestRecord | None:
        """Write ``values`` and ``audit`` (named after the request) in one transaction if the
        request is still pending at the version ``seen`` has; None when it moved meanwhile."""
        async with self._begin() as conn:
            won = await _update_in(
                conn,
                seen.id,
                values,
                from_states=(RequestState.PENDING,),
                expected_version=seen.version,
            )
            if won is not None:
                named = {"request_id": won.id, "project": won.project, "cluster_id": won.cluster_id}
                await self._append(conn, audit.model_copy(update=named))
        return won

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
        **updates: Any,
    ) -> Started:
        """Start sending an approved change, in one transaction: take its lease (or, with
        ``fence``, keep the one taken by ``claim_execution``), lock its cluster with the
        provider call's deadline (``max_call_seconds`` from now: the lock is not taken over
        before it), move it ``approved`` → ``executing`` under the lease, and audit it.

        BUSY keeps the lease (the caller refuses the change, then releases it); HELD and
        MOVED leave nothing behind."""
        if max_call_seconds < 0:
            raise ValueError("max_call_seconds must not be negative")
        values = _transition_values(RequestState.EXECUTING, updates)
        try:
            async with self._begin() as conn:
                if self._one_statement:
                    asked = _StartAsked(lease_name, holder, ttl_seconds, max_call_seconds, fence)
                    started = await self._start_in_one(conn, request_id, values, asked, audit)
                    if started is not None:
                        return started
                # Not started by the one statement (or PostgreSQL): find out why, step by
                # step; what the statement took (a lease kept while the cluster is busy) is
                # taken again here, idempotently.
                lease = fence or await take_lease_in(
                    conn, self._dialect, lease_name, holder, ttl_seconds
                )
                if lease is None:
                    return Started(StartedHow.HELD)
                deadline = utcnow() + timedelta(seconds=max_call_seconds)
                busy = await self._lock_in(conn, cluster, request_id, lease_name, deadline)
                if busy is not None:
                    return Started(StartedHow.BUSY, lease=lease, holder=busy)
                done = await _update_in(
                    conn,
                    request_id,
                    values,
                    from_states=(RequestState.APPROVED,),
                    fence=lease,
                )
                if done is None:
                    raise _Moved(request_id)
                await self._append(conn, audit)
        except _Moved:
            return Started(StartedHow.MOVED, lease=fence)
        return Started(StartedHow.STARTED, lease=lease, record=done)

    async def _start_in_one(
        self,
        conn: AsyncConnection,
        request_id: str,
        values: dict[str, Any],
        asked: _StartAsked,
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
            row = await _update_row_in(
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
        return Started(StartedHow.STARTED, lease=lease, record=_record(row))

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
            current = await _get_in(conn, holder)
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
        **updates: Any,
    ) -> ChangeRequestRecord | None:
        """End a request whose executor is gone, in one transaction: take its lease (which
        fences that executor's writes off: the token grows), move it under that lease, audit
        it, give the lease up again, and free its cluster unless a provider call it started
        may still arrive. None when a live executor holds the lease or the request moved."""
        values = _transition_values(to, updates)
        async with self._begin() as conn:
            lease = await take_lease_in(conn, self._dialect, lease_name, holder, ttl_seconds)
            if lease is None:
                return None  # a live replica is sending it, or about to
            done = await _update_in(conn, request_id, values, from_states=from_states, fence=lease)
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
        under ``fence``), its audit entry, the cluster freed and the lease released. As
        ``record_outcome`` for a known outcome: a replay is ALREADY_RECORDED, an ``unknown``
        marked by recovery is corrected. FENCED or MISSING write nothing."""
        values = _transition_values(to, {"result_message": result_message})
        async with self._begin() as conn:
            if self._one_statement:
                won = await self._finish_in_one(conn, request_id, fence, values, from_states, audit)
                if won is not None:
                    return OutcomeRecorded.RECORDED, won
                status, done = await self._outcome_missed(conn, request_id, values)
            else:
                status, done = await self._outcome_in(conn, request_id, fence, values, from_states)
            if status not in (OutcomeRecorded.FENCED, OutcomeRecorded.MISSING):
                await unlock_in(conn, cluster, request_id)
                if fence is not None:
                    await release_lease_in(conn, fence.name, fence.holder)
            # The chain head last, in every transaction: appends queue there, holding nothing
            # another transaction waits for before it reaches the head itself.
            if status is OutcomeRecorded.RECORDED or status is OutcomeRecorded.CORRECTED_UNKNOWN:
                await self._append(conn, audit)
        return status, done

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
            row = await _update_row_in(
                conn,
                request_id,
                {**values, "last_transition": work.as_column()},
                from_states=from_states,
                fence=fence,
                now=now,
            )
            return row, work

        return _record(await self._in_one(conn, finish))

    async def record_outcome(
        self,
        request_id: str,
        fence: Lease,
        *,
        to: RequestState,
        result_message: str | None,
    ) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
        """Record a provider call's known outcome; safe to call again with the same arguments.

        The executor keeps outcomes it could not record (the store was down) and calls this
        for each, in order, once the store answers again. ``executing`` under ``fence`` →
        RECORDED; already in ``to`` with the same message → ALREADY_RECORDED; ``unknown``
        (recovery gave up on it) → CORRECTED_UNKNOWN, since the truth beats "unknown" and an
        unknown request runs nothing more; anything else → FENCED, nothing written.
        """
        if to not in KNOWN_OUTCOMES:
            raise ValueError(f"an outcome is one of {sorted(KNOWN_OUTCOMES)}, not {to!r}")
        values = _transition_values(to, {"result_message": result_message})
        async with self._begin() as conn:
            return await self._outcome_in(conn, request_id, fence, values, _EXECUTING)

    async def _outcome_in(
        self,
        conn: AsyncConnection,
        request_id: str,
        fence: Lease | None,
        values: dict[str, Any],
        from_states: Collection[RequestState],
    ) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
        won = await _update_in(conn, request_id, values, from_states=from_states, fence=fence)
        if won is not None:
            return OutcomeRecorded.RECORDED, won
        return await self._outcome_missed(conn, request_id, values)

    async def _outcome_missed(
        self, conn: AsyncConnection, request_id: str, values: dict[str, Any]
    ) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
        """The outcome's write found the request elsewhere: already recorded, an
        ``unknown`` to correct, fenced off, or missing."""
        current = await _get_in(conn, request_id)
        if current is None:
            return OutcomeRecorded.MISSING, None
        to = RequestState(values["state"])
        same = to not in KNOWN_OUTCOMES or current.result_message == values["result_message"]
        if current.state == to and same:
            return OutcomeRecorded.ALREADY_RECORDED, current
        if current.state == RequestState.UNKNOWN and to in KNOWN_OUTCOMES:
            # In this transaction the row is ours (written or read under its write lock).
            corrected = await _update_in(
                conn, request_id, values, from_states=(RequestState.UNKNOWN,)
            )
            if corrected is not None:
                return OutcomeRecorded.CORRECTED_UNKNOWN, corrected
        return OutcomeRecorded.FENCED, current

    async def count_requests(self, states: Collection[RequestState]) -> int:
        """How many requests are in these states (counted on the state index)."""
        statement = (
            select(func.count())
            .select_from(change_requests)
            .where(
                change_requests.c.state.in_(sorted(RequestState(state).value for state in states))
            )
        )
        async with self._begin() as conn:
            return int((await conn.execute(statement)).scalar_one())

    async def list_requests(
        self,
        *,
        states: Collection[RequestState] | None = None,
        project: str | None = None,
        cluster_id: str | None = None,
        expires_before: datetime | None = None,
        limit: int = 100,
    ) -> list[ChangeRequestRecord]:
        """Requests matching every given filter, oldest first."""
        require_aware("expires_before", expires_before)
        statement = select(change_requests)
        if cluster_id is not None:
            statement = statement.where(change_requests.c.cluster_id == cluster_id)
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

    async def list_following(self, now: datetime, *, limit: int = 100) -> list[ChangeRequestRecord]:
        """Requests whose cluster is to be followed after ``now`` (an indexed query)."""
        require_aware("now", now)
        return await self._listed(_FOLLOWING, {"b_now": now, "b_limit": limit})

    async def list_reverts(self, request_id: str) -> list[ChangeRequestRecord]:
        """The requests made to revert ``request_id``, oldest first."""
        return await self._listed(_REVERTS, {"b_of": normalize_request_id(request_id)})

    async def list_due(self, now: datetime, *, limit: int = 100) -> list[ChangeRequestRecord]:
        """Scheduled requests whose time has come and that were neither sent nor ended
        (one query on the run_at index)."""
        require_aware("now", now)
        return await self._listed(_DUE, {"b_now": now, "b_limit": limit})

    async def list_scheduled(self, requester: str, *, limit: int = 20) -> list[ChangeRequestRecord]:
        """``requester``'s scheduled requests not sent or ended yet, soonest first."""
        return await self._listed(_SCHEDULED, {"b_requester": requester, "b_limit": limit})

    async def _listed(self, statement: Any, params: dict[str, Any]) -> list[ChangeRequestRecord]:
        async with self._begin() as conn:
            rows = (await conn.execute(statement, params)).mappings().all()
        return [ChangeRequestRecord.model_validate(dict(row)) for row in rows]


_WAITING = [RequestState.PENDING.value, RequestState.APPROVED.value]
_NOW = bindparam("b_now", type_=change_requests.c.run_at.type)
_LIMIT = bindparam("b_limit", type_=Integer())
_FOLLOWING = (
    select(change_requests)
    .where(change_requests.c.follow_until.is_not(None), change_requests.c.follow_until > _NOW)
    .order_by(change_requests.c.follow_until)
    .limit(_LIMIT)
)
_REVERTS = (
    select(change_requests)
    .where(change_requests.c.revert_of == bindparam("b_of"))
    .order_by(change_requests.c.created_at)
)
_DUE = (
    select(change_requests)
    .where(
        change_requests.c.run_at.is_not(None),
        change_requests.c.run_at <= _NOW,
        # An expression, not the column: the planner walks the run_at index in order (and
        # stops at the limit) instead of reading every waiting request by state and sorting.
        change_requests.c.state.concat("").in_(_WAITING),
    )
    .order_by(change_requests.c.run_at)
    .limit(_LIMIT)
)
_SCHEDULED = (
    select(change_requests)
    .where(
        change_requests.c.run_at.is_not(None),
        change_requests.c.requester == bindparam("b_requester"),
        change_requests.c.state.in_(_WAITING),
    )
    .order_by(change_requests.c.run_at)
    .limit(_LIMIT)
)
