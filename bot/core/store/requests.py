"""Change requests: create, read, list, and the compare-and-set transitions (optionally fenced
by an execution lease), including the idempotent recording of a provider outcome."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, exists, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.engine import StoreBase, require_aware, utcnow
from bot.core.store.records import (
    KNOWN_OUTCOMES,
    ChangeRequestRecord,
    Lease,
    MutableFields,
    OutcomeRecorded,
    RequestState,
    new_request_id,
    normalize_request_id,
)
from bot.core.store.tables import change_requests, leases, workflow_steps

_REQUEST_ID_ATTEMPTS = 8
_APPROVER_ATTEMPTS = 50


class StepTaken(Exception):
    """The workflow step a request was to be linked to is no longer running (another replica
    made its request, or it was ended): no request was created."""


def fence_holds(fence: Lease) -> ColumnElement[bool]:
    """SQL that is true while ``fence`` is still the lease's current holding (same token)."""
    return exists().where(
        leases.c.name == fence.name,
        leases.c.holder == fence.holder,
        leases.c.token == fence.token,
    )


def _validated_updates(updates: Mapping[str, Any]) -> dict[str, Any]:
    return MutableFields.model_validate(dict(updates)).model_dump(exclude_unset=True)


async def _link_step(conn: AsyncConnection, step: str, request_id: str) -> None:
    linked = await conn.execute(
        update(workflow_steps)
        .where(
            workflow_steps.c.execution_id == step,
            workflow_steps.c.state == "running",
            workflow_steps.c.request_id.is_(None),
        )
        .values(request_id=request_id, updated_at=utcnow())
    )
    if linked.rowcount != 1:
        raise StepTaken(step)  # leaving the transaction by it stores no request


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
    ) -> ChangeRequestRecord:
        """Store a new request; with ``step`` (a workflow step's execution id), link that
        running step to it in the same transaction, or raise StepTaken and store nothing."""
        require_aware("expires_at", expires_at)
        require_aware("run_at", run_at)
        now = utcnow()
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
            "revert_of": revert_of,
            "run_at": run_at,
            "approvals": dict(approvals) if approvals is not None else None,
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
                if row is not None and step is not None:
                    await _link_step(conn, step, str(row["id"]))
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
        fence: Lease | None = None,
        **updates: Any,
    ) -> ChangeRequestRecord | None:
        """Move the request to ``to`` if, and only if, it is in one of ``from_states`` (and,
        with ``fence``, that lease is still held with that token).

        Returns the updated record if this call won, None if the request was elsewhere, the
        fence was lost, or there is no such request. ``updates`` may set decided_by,
        decision_note, break_glass, result_message, summary_ts and root_ts in the same
        statement.
        """
        if not from_states:
            raise ValueError("from_states must name at least one state")
        values = _validated_updates(updates)
        values["state"] = RequestState(to).value
        conditions: list[ColumnElement[bool]] = [
            change_requests.c.state.in_([RequestState(state).value for state in from_states])
        ]
        if fence is not None:
            conditions.append(fence_holds(fence))
        return await self._update_request(request_id, values, *conditions)

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
        conditions: list[ColumnElement[bool]] = [] if fence is None else [fence_holds(fence)]
        return await self._update_request(request_id, values, *conditions)

    async def add_approver(
        self, request_id: str, approver: str, requirement: Mapping[str, Any]
    ) -> tuple[ChangeRequestRecord | None, bool]:
        """Add ``approver`` to a pending request's approvals (and note what it now needs),
        compare-and-set on the row's version: two approvers at once on two replicas are both
        counted, and whoever completes the count sees it complete.

        (record, True) when added; (record, False) when the request is no longer pending or
        already has this approver; (None, False) when there is no such request."""
        for _ in range(_APPROVER_ATTEMPTS):
            current = await self.get_request(request_id)
            if current is None:
                return None, False
            if current.state is not RequestState.PENDING or approver in current.approvers:
                return current, False
            # What it needs now, over what earlier approvals noted (a break glass among them).
            noted = {**(current.approvals or {}), **requirement}
            values = {"approvals": {**noted, "by": [*current.approvers, approver]}}
            won = await self._update_request(
                request_id,
                values,
                change_requests.c.version == current.version,
                change_requests.c.state == RequestState.PENDING.value,
            )
            if won is not None:
                return won, True
        raise RuntimeError(f"{request_id}: approvals kept changing; try again")

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
        won = await self.transition(
            request_id,
            from_states={RequestState.EXECUTING},
            to=to,
            fence=fence,
            result_message=result_message,
        )
        if won is not None:
            return OutcomeRecorded.RECORDED, won
        current = await self.get_request(request_id)
        if current is None:
            return OutcomeRecorded.MISSING, None
        if current.state == to and current.result_message == result_message:
            return OutcomeRecorded.ALREADY_RECORDED, current
        if current.state == RequestState.UNKNOWN:
            corrected = await self.transition(
                request_id,
                from_states={RequestState.UNKNOWN},
                to=to,
                result_message=result_message,
            )
            if corrected is not None:
                return OutcomeRecorded.CORRECTED_UNKNOWN, corrected
            return await self.record_outcome(
                request_id, fence, to=to, result_message=result_message
            )
        return OutcomeRecorded.FENCED, current

    async def _update_request(
        self, request_id: str, values: dict[str, Any], *conditions: Any
    ) -> ChangeRequestRecord | None:
        statement = (
            update(change_requests)
            .where(change_requests.c.id == normalize_request_id(request_id), *conditions)
            .values(
                **values,
                updated_at=utcnow(),
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
        statement = (
            select(change_requests)
            .where(change_requests.c.follow_until.is_not(None))
            .where(change_requests.c.follow_until > now)
            .order_by(change_requests.c.follow_until)
            .limit(limit)
        )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [ChangeRequestRecord.model_validate(dict(row)) for row in rows]

    async def list_reverts(self, request_id: str) -> list[ChangeRequestRecord]:
        """The requests made to revert ``request_id``, oldest first."""
        statement = (
            select(change_requests)
            .where(change_requests.c.revert_of == normalize_request_id(request_id))
            .order_by(change_requests.c.created_at)
        )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [ChangeRequestRecord.model_validate(dict(row)) for row in rows]

    async def list_due(self, now: datetime, *, limit: int = 100) -> list[ChangeRequestRecord]:
        """Scheduled requests whose time has come and that were neither sent nor ended
        (one query on the run_at index)."""
        require_aware("now", now)
        waiting = [RequestState.PENDING.value, RequestState.APPROVED.value]
        statement = (
            select(change_requests)
            .where(change_requests.c.run_at.is_not(None))
            .where(change_requests.c.run_at <= now)
            .where(change_requests.c.state.in_(waiting))
            .order_by(change_requests.c.run_at)
            .limit(limit)
        )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [ChangeRequestRecord.model_validate(dict(row)) for row in rows]

    async def list_scheduled(self, requester: str, *, limit: int = 20) -> list[ChangeRequestRecord]:
        """``requester``'s scheduled requests not sent or ended yet, soonest first."""
        waiting = [RequestState.PENDING.value, RequestState.APPROVED.value]
        statement = (
            select(change_requests)
            .where(change_requests.c.run_at.is_not(None))
            .where(change_requests.c.requester == requester)
            .where(change_requests.c.state.in_(waiting))
            .order_by(change_requests.c.run_at)
            .limit(limit)
        )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [ChangeRequestRecord.model_validate(dict(row)) for row in rows]
