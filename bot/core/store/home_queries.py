"""Store reads for the Home tab: pending approvals in some projects, and a person's own
requests (open or finished), each with the total count so the view can say what it left off."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import Select, func, or_, select

from bot.core.store.db import Store
from bot.core.store.records import ChangeRequestRecord, RequestState
from bot.core.store.tables import change_requests

OPEN_STATES: frozenset[RequestState] = frozenset(
    {RequestState.PENDING, RequestState.APPROVED, RequestState.EXECUTING}
)
FINISHED_STATES: frozenset[RequestState] = frozenset(set(RequestState) - OPEN_STATES)


# Matching requests are counted up to this many: a year of one person's results is not read
# to say how many there are ("500+").
COUNT_BOUND = 500


@dataclass(frozen=True)
class Page:
    """The first ``len(records)`` of ``total`` matching requests (``bounded``: of more than
    ``total``, which is then ``COUNT_BOUND``)."""

    records: list[ChangeRequestRecord]
    total: int
    bounded: bool = False


async def _page(store: Store, statement: Select[tuple[object, ...]], limit: int) -> Page:
    bound = max(COUNT_BOUND, limit)
    matching = statement.order_by(None).with_only_columns(change_requests.c.id).limit(bound + 1)
    counted = select(func.count()).select_from(matching.subquery())
    # The store's own transaction (it queues SQLite transactions of this process).
    async with store._begin() as conn:
        total = (await conn.execute(counted)).scalar_one()
        rows = (await conn.execute(statement.limit(limit))).mappings().all()
    records = [ChangeRequestRecord.model_validate(dict(row)) for row in rows]
    return Page(records, min(int(total), bound), bounded=int(total) > bound)


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
            # An agent's proposal is asked of approvers once its requester confirms it.
            or_(table.c.confirm.is_(None), table.c.confirm != "awaiting"),
        )
        .order_by(table.c.created_at, table.c.id)
    )
    return await _page(store, statement, limit)


async def requests_of(
    store: Store, requester: str, states: Collection[RequestState], limit: int
) -> Page:
    """The person's requests in these states, most recently changed first."""
    table = change_requests
    if set(states) <= OPEN_STATES:
        return await _open_of(store, requester, states, limit)
    statement = (
        select(table)
        .where(
            table.c.requester == requester,
            table.c.state.in_(sorted(RequestState(s).value for s in states)),
        )
        .order_by(table.c.updated_at.desc(), table.c.id.desc())
    )
    return await _page(store, statement, limit)


async def _open_of(
    store: Store, requester: str, states: Collection[RequestState], limit: int
) -> Page:
    """Open requests are few whatever the history, a person's finished ones are not: read
    every open request of the person from the state index (the requester compared as an
    expression, so no planner walks the person's whole history by the requester index
    instead), at most ``COUNT_BOUND + 1``, and order them here."""
    table = change_requests
    bound = max(COUNT_BOUND, limit)
    statement = (
        select(table)
        .where(
            table.c.state.in_(sorted(RequestState(s).value for s in states)),
            table.c.requester.concat("") == requester,
        )
        .limit(bound + 1)
    )
    async with store._begin() as conn:
        rows = (await conn.execute(statement)).mappings().all()
    records = sorted(
        (ChangeRequestRecord.model_validate(dict(row)) for row in rows),
        key=lambda r: (r.updated_at, r.id),
        reverse=True,
    )
    return Page(records[:limit], min(len(records), bound), bounded=len(records) > bound)
