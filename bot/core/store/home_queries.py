"""Store reads for the Home tab: pending approvals in some projects, and a person's own
requests (open or finished), each with the total count so the view can say what it left off."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import Select, func, select

from bot.core.store.db import Store
from bot.core.store.records import ChangeRequestRecord, RequestState
from bot.core.store.tables import change_requests

OPEN_STATES: frozenset[RequestState] = frozenset(
    {RequestState.PENDING, RequestState.APPROVED, RequestState.EXECUTING}
)
FINISHED_STATES: frozenset[RequestState] = frozenset(set(RequestState) - OPEN_STATES)


@dataclass(frozen=True)
class Page:
    """The first ``len(records)`` of ``total`` matching requests."""

    records: list[ChangeRequestRecord]
    total: int


async def _page(store: Store, statement: Select[tuple[object, ...]], limit: int) -> Page:
    counted = select(func.count()).select_from(statement.order_by(None).subquery())
    # The store's own transaction (it queues SQLite transactions of this process).
    async with store._begin() as conn:
        total = (await conn.execute(counted)).scalar_one()
        rows = (await conn.execute(statement.limit(limit))).mappings().all()
    return Page([ChangeRequestRecord.model_validate(dict(row)) for row in rows], int(total))


async def pending_approvals(store: Store, projects: Collection[str], limit: int) -> Page:
    """Requests waiting for an approval in these projects, oldest first."""
    if not projects:
        return Page([], 0)
    table = change_requests
    statement = (
        select(table)
        .where(
            table.c.state == RequestState.PENDING.value,
            table.c.needs_approval.is_(True),
            table.c.project.in_(sorted(projects)),
        )
        .order_by(table.c.created_at, table.c.id)
    )
    return await _page(store, statement, limit)


async def requests_of(
    store: Store, requester: str, states: Collection[RequestState], limit: int
) -> Page:
    """The person's requests in these states, most recently changed first."""
    table = change_requests
    statement = (
        select(table)
        .where(
            table.c.requester == requester,
            table.c.state.in_(sorted(RequestState(s).value for s in states)),
        )
        .order_by(table.c.updated_at.desc(), table.c.id.desc())
    )
    return await _page(store, statement, limit)
