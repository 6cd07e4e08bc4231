"""Reading change requests: one by id, counts, and the indexed lists."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from sqlalchemy import (
    Integer,
    Select,
    bindparam,
    func,
    select,
)

from bot.core.store.engine import StoreBase, require_aware
from bot.core.store.records import (
    ChangeRequestRecord,
    RequestState,
    normalize_request_id,
)
from bot.core.store.requests.statements import get_in
from bot.core.store.tables import change_requests


class ReadsMixin(StoreBase):
    async def get_request(self, request_id: str) -> ChangeRequestRecord | None:
        async with self._begin() as conn:
            return await get_in(conn, request_id)

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

    async def _listed(
        self, statement: Select[tuple[object, ...]], params: Mapping[str, object]
    ) -> list[ChangeRequestRecord]:
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
