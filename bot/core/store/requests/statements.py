"""The change-request statements, built once (module level, or cached per set of columns a
caller sets) with bound parameters, and the helpers that run them inside a caller's
transaction: a call only binds its values, and a row a statement has just returned
(``RETURNING``) is never read again."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, TypedDict, Unpack

from sqlalchemy import (
    ColumnElement,
    Select,
    Update,
    bindparam,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.engine import utcnow
from bot.core.store.locks import (
    fence_holds,
    fence_params,
)
from bot.core.store.records import (
    ChangeRequestRecord,
    Lease,
    MutableFields,
    RequestState,
    normalize_request_id,
)
from bot.core.store.tables import change_requests, leases, workflow_steps


def validated_updates(updates: Mapping[str, object]) -> dict[str, object]:
    return MutableFields.model_validate(dict(updates)).model_dump(exclude_unset=True)


def record_of(row: RowMapping | None) -> ChangeRequestRecord | None:
    return None if row is None else ChangeRequestRecord.model_validate(dict(row))


GET = select(change_requests).where(change_requests.c.id == bindparam("request_id"))
INSERT = {
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


def state_values(states: Collection[RequestState]) -> tuple[str, ...]:
    """The states' values in one order, so that each set has one statement."""
    return tuple(sorted({RequestState(state).value for state in states}))


@functools.lru_cache(maxsize=16)
def beside_statement(states: tuple[str, ...]) -> Select[tuple[str, str]]:
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


LINK_STEP = (
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
def update_statement(
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


class Where(TypedDict, total=False):
    """Which row an update writes, past its id (see ``_update``)."""

    from_states: Collection[RequestState] | None
    fence: Lease | None
    expected_version: int | None


class UpdateCall(Where, total=False):
    """An update's ``Where``, its time (``updated_at``; default now), and the lease whose
    token it returns (``lease_of``)."""

    now: datetime | None
    lease_of: str | None


async def update_in(
    conn: AsyncConnection, request_id: str, values: Mapping[str, object], **where: Unpack[Where]
) -> ChangeRequestRecord | None:
    return record_of(await update_row_in(conn, request_id, values, **where))


async def update_row_in(
    conn: AsyncConnection,
    request_id: str,
    values: Mapping[str, object],
    **call: Unpack[UpdateCall],
) -> RowMapping | None:
    """The row as the update left it (with ``lease_of``: and that lease's token), or None."""
    statement, params = update_call(request_id, values, **call)
    return (await conn.execute(statement, params)).mappings().first()


def update_call(
    request_id: str, values: Mapping[str, object], **call: Unpack[UpdateCall]
) -> tuple[Update, dict[str, object]]:
    """The request row's update (``update_statement``) and its parameters."""
    from_states = call.get("from_states")
    fence = call.get("fence")
    expected_version = call.get("expected_version")
    lease_of = call.get("lease_of")
    fields = {**values, "updated_at": call.get("now") or utcnow()}
    statement = update_statement(
        tuple(sorted(fields)),
        states=None if from_states is None else state_values(from_states),
        fenced=fence is not None,
        versioned=expected_version is not None,
        lease_token=lease_of is not None,
    )
    params: dict[str, object] = {f"v_{k}": v for k, v in fields.items()}
    params["request_id"] = normalize_request_id(request_id)
    if fence is not None:
        params.update(fence_params(fence))
    if expected_version is not None:
        params["expected_version"] = expected_version
    if lease_of is not None:
        params["lease_of"] = lease_of
    return statement, params


async def get_in(conn: AsyncConnection, request_id: str) -> ChangeRequestRecord | None:
    params = {"request_id": normalize_request_id(request_id)}
    return record_of((await conn.execute(GET, params)).mappings().first())


def transition_values(to: RequestState, updates: Mapping[str, object]) -> dict[str, object]:
    values = validated_updates(updates)
    values["state"] = RequestState(to).value
    return values
