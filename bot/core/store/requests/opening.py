"""Opening a change request: its row, its audit entry, the workflow step it is linked to and
the others open on its cluster, in one transaction."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Required, TypedDict, Unpack

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.engine import require_aware, utcnow
from bot.core.store.records import (
    AuditRow,
    ChangeRequestRecord,
    OpenBeside,
    RequestState,
    new_request_id,
)
from bot.core.store.requests.fast_path import FastPathMixin
from bot.core.store.requests.outcomes import StepTaken, revert_slot_taken
from bot.core.store.requests.statements import INSERT, LINK_STEP, beside_statement, state_values
from bot.core.store.trigger_work import (
    TriggerWork,
    audit_work,
)

_REQUEST_ID_ATTEMPTS = 8


class NewRequestColumns(TypedDict, total=False):
    """A new request's columns (``OpeningMixin.open_request``)."""

    provider: Required[str]
    project: Required[str]
    cluster_id: Required[str]
    cluster_name: Required[str]
    action: Required[str]
    plan: Required[Mapping[str, object]]
    kinds: Required[Sequence[str]]
    needs_approval: Required[bool]
    requester: Required[str]
    channel: Required[str]
    reason: Required[str | None]
    expires_at: Required[datetime | None]
    revert_of: str | None
    run_at: datetime | None
    approvals: Mapping[str, object] | None


class OpeningMixin(FastPathMixin):
    async def open_request(
        self,
        *,
        beside: Collection[RequestState] = (),
        audit: AuditRow | None = None,
        step: str | None = None,
        state: RequestState = RequestState.PENDING,
        **columns: Unpack[NewRequestColumns],
    ) -> tuple[ChangeRequestRecord, list[OpenBeside]]:
        """Store a new request (``columns``: provider, project, cluster_id, cluster_name,
        action, plan, kinds, needs_approval, requester, channel, reason, expires_at, and
        optionally revert_of, run_at, approvals) in ``state``, and in the same transaction
        return the other requests in one of ``beside``'s states on the same cluster (oldest
        first). With ``step`` (a workflow step's execution id), link that running step to
        it in the same transaction, or raise StepTaken and store nothing. ``audit`` (its
        ``request_id`` filled in) is appended in that transaction too."""
        require_aware("expires_at", columns.get("expires_at"))
        require_aware("run_at", columns.get("run_at"))
        now = utcnow()
        approvals = columns.pop("approvals", None)
        values: dict[str, object] = {
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
        revert_of = columns.get("revert_of")
        values["revert_of"] = revert_of
        values["revert_slot"] = revert_of  # one revert per request: its index
        values.setdefault("run_at", None)
        values["step_id"] = step or ""  # known: "" is none (None is "not known")
        for _ in range(_REQUEST_ID_ATTEMPTS):
            async with self._begin() as conn, revert_slot_taken(revert_of):
                others = await self._beside_in(conn, values, beside)
                params = {**values, "id": new_request_id()}
                entry = None
                if audit is not None:
                    named = {"request_id": params["id"], "project": values["project"]}
                    entry = audit.model_copy(update={**named, "cluster_id": values["cluster_id"]})
                row = await self._insert_in(conn, params, entry, now, step)
                if row is None:
                    continue
            record = ChangeRequestRecord.model_validate(dict(row))
            return record, others
        raise RuntimeError(f"no free request id after {_REQUEST_ID_ATTEMPTS} attempts")

    async def _insert_in(
        self,
        conn: AsyncConnection,
        params: dict[str, object],
        entry: AuditRow | None,
        now: datetime,
        step: str | None,
    ) -> RowMapping | None:
        """The new row (None: its id is taken), linked to ``step``, with ``entry`` appended:
        in the INSERT's one statement (SQLite: by its trigger; PostgreSQL: a WITH chain),
        or, to a step on PostgreSQL, after the link, so the chain head is taken last."""
        if entry is not None and self._dialect == "postgresql" and step is None:
            return await self._open_in_one(conn, params, entry)
        if entry is None or (step is not None and self._dialect == "postgresql"):
            row = (await conn.execute(INSERT[self._dialect], params)).mappings().first()
            if row is not None and step is not None:
                await self._link_step(conn, step, str(row["id"]), now)
            if row is not None and entry is not None:
                await self._append(conn, entry)
            return row
        audited = entry

        async def insert(prev_hash: str) -> tuple[RowMapping | None, TriggerWork]:
            work = TriggerWork(audit=audit_work(audited, now, prev_hash))
            written = {**params, "last_transition": work.as_column()}
            return (await conn.execute(INSERT["sqlite"], written)).mappings().first(), work

        row = await self._in_one(conn, insert)
        if row is not None and step is not None:
            await self._link_step(conn, step, str(row["id"]), now)
        return row

    async def _beside_in(
        self, conn: AsyncConnection, values: Mapping[str, object], beside: Collection[RequestState]
    ) -> list[OpenBeside]:
        if not beside:
            return []
        params = {"project": values["project"], "cluster": values["cluster_id"]}
        rows = (await conn.execute(beside_statement(state_values(beside)), params)).all()
        return [OpenBeside(id=row.id, state=row.state) for row in rows]

    @staticmethod
    async def _link_step(conn: AsyncConnection, step: str, request_id: str, now: datetime) -> None:
        linked = await conn.execute(LINK_STEP, {"step": step, "linked_id": request_id, "now": now})
        if linked.rowcount != 1:
            raise StepTaken(step)  # leaving the transaction by it stores no request
