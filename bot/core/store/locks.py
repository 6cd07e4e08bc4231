"""Leases with fencing tokens, and the one-change-per-cluster lock that is only ever taken
over once its holder's lease has lapsed and no provider call it started can still arrive.

Each statement is built once, at import, with bound parameters (``bindparam``): a call
only binds its values. The ``*_in`` functions run inside a caller's transaction, so that
an execution's start (lease, lock, call deadline, state, audit) commits as one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import (
    CTE,
    ColumnElement,
    Delete,
    Update,
    and_,
    bindparam,
    case,
    delete,
    exists,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.engine import DialectInsert, StoreBase, Upsert, utcnow
from bot.core.store.records import ClusterRef, Lease
from bot.core.store.tables import cluster_locks, leases

# A released lease keeps its row (and so its token, which must only grow) with this expiry.
RELEASED = datetime(1970, 1, 1, tzinfo=UTC)
_NOW = bindparam("now", type_=leases.c.expires_at.type)


def fence_holds() -> ColumnElement[bool]:
    """SQL that is true while the fence bound as ``fence_name``/``fence_holder``/
    ``fence_token`` is still the lease's current holding (same token)."""
    return exists().where(
        leases.c.name == bindparam("fence_name"),
        leases.c.holder == bindparam("fence_holder"),
        leases.c.token == bindparam("fence_token"),
    )


def fence_params(fence: Lease) -> dict[str, object]:
    return {"fence_name": fence.name, "fence_holder": fence.holder, "fence_token": fence.token}


def cluster_params(cluster: ClusterRef) -> dict[str, object]:
    return {
        "b_provider": cluster.provider,
        "b_project": cluster.project,
        "b_cluster": cluster.cluster_id,
    }


def _lock_is_stale() -> ColumnElement[bool]:
    """The lock's holder has let its lease lapse and its last provider call is over."""
    # Not an EXISTS correlated to the lock: inside an upsert's ON CONFLICT … WHERE it would
    # not be correlated (and would ask whether any lock's lease is alive).
    live_leases = select(leases.c.name).where(leases.c.expires_at > _NOW)
    return and_(
        cluster_locks.c.lease_name.is_not(None),
        cluster_locks.c.lease_name.not_in(live_leases),
        or_(cluster_locks.c.calls_until.is_(None), cluster_locks.c.calls_until <= _NOW),
    )


def cluster_is() -> list[ColumnElement[bool]]:
    return [
        cluster_locks.c.provider == bindparam("b_provider"),
        cluster_locks.c.project == bindparam("b_project"),
        cluster_locks.c.cluster_id == bindparam("b_cluster"),
    ]


def _take_lease(insert: DialectInsert) -> Upsert:
    statement = insert.values(
        name=bindparam("b_name"),
        holder=bindparam("b_holder"),
        expires_at=bindparam("b_expires_at", type_=leases.c.expires_at.type),
        token=1,
    )
    kept = (leases.c.holder == statement.excluded.holder) & (leases.c.expires_at > _NOW)
    return statement.on_conflict_do_update(
        index_elements=[leases.c.name],
        set_={
            "holder": statement.excluded.holder,
            "expires_at": statement.excluded.expires_at,
            "token": case((kept, leases.c.token), else_=leases.c.token + 1),
        },
        where=(leases.c.holder == statement.excluded.holder) | (leases.c.expires_at <= _NOW),
    ).returning(leases)


def _lock_cluster(insert: DialectInsert, after: CTE | None = None) -> Upsert:
    """The lock's upsert; with ``after`` (a CTE), it writes only if that returned a row
    (the execution lease, taken in the same statement), and after it."""
    binds = {
        "provider": bindparam("b_provider", type_=cluster_locks.c.provider.type),
        "project": bindparam("b_project", type_=cluster_locks.c.project.type),
        "cluster_id": bindparam("b_cluster", type_=cluster_locks.c.cluster_id.type),
        "request_id": bindparam("b_request_id", type_=cluster_locks.c.request_id.type),
        "locked_at": _NOW,
        "lease_name": bindparam("b_lease_name", type_=cluster_locks.c.lease_name.type),
        "calls_until": bindparam("b_calls_until", type_=cluster_locks.c.calls_until.type),
    }
    if after is None:
        statement = insert.values(**binds)
    else:
        source = select(*(value.label(name) for name, value in binds.items())).select_from(after)
        statement = insert.from_select(list(binds), source)
    excluded = statement.excluded
    same_request = cluster_locks.c.request_id == excluded.request_id
    return statement.on_conflict_do_update(
        index_elements=[
            cluster_locks.c.provider,
            cluster_locks.c.project,
            cluster_locks.c.cluster_id,
        ],
        set_={
            "request_id": excluded.request_id,
            "locked_at": case((same_request, cluster_locks.c.locked_at), else_=_NOW),
            "lease_name": case(
                (same_request & excluded.lease_name.is_(None), cluster_locks.c.lease_name),
                else_=excluded.lease_name,
            ),
            # A deadline only moves later (a new call), never away while one may arrive.
            "calls_until": case(
                (same_request & excluded.calls_until.is_(None), cluster_locks.c.calls_until),
                else_=excluded.calls_until,
            ),
        },
        where=same_request | _lock_is_stale(),
    ).returning(cluster_locks.c.request_id)


def postgres_lock_cte(after: CTE | None) -> CTE:
    """PostgreSQL's lock upsert as a CTE (``locked``), after ``after`` if given."""
    locked: CTE = _lock_cluster(postgresql.insert(cluster_locks), after).cte("locked")
    return locked


def postgres_lease_cte() -> CTE:
    """PostgreSQL's lease upsert as a CTE (``lease``: the lease row if taken)."""
    lease: CTE = _take_lease(postgresql.insert(leases)).cte("lease")
    return lease


_TAKE_LEASE = {
    "postgresql": _take_lease(postgresql.insert(leases)),
    "sqlite": _take_lease(sqlite.insert(leases)),
}
_LOCK = {
    "postgresql": _lock_cluster(postgresql.insert(cluster_locks)),
    "sqlite": _lock_cluster(sqlite.insert(cluster_locks)),
}
_RENEW: Update = (
    update(leases)
    .where(
        leases.c.name == bindparam("fence_name"),
        leases.c.holder == bindparam("fence_holder"),
        leases.c.token == bindparam("fence_token"),
        leases.c.expires_at > RELEASED,  # a released lease stays released
    )
    .values(expires_at=bindparam("b_expires_at", type_=leases.c.expires_at.type))
    .returning(leases)
)
_RELEASE: Update = (
    update(leases)
    .where(leases.c.name == bindparam("b_name"), leases.c.holder == bindparam("b_holder"))
    .values(expires_at=RELEASED)
)
_GET_LEASE = select(leases).where(leases.c.name == bindparam("b_name"), leases.c.expires_at > _NOW)
_BEGIN_CALL: Update = (
    update(cluster_locks)
    .where(*cluster_is(), cluster_locks.c.lease_name == bindparam("fence_name"), fence_holds())
    .values(calls_until=bindparam("b_calls_until", type_=cluster_locks.c.calls_until.type))
    .returning(cluster_locks.c.request_id)
)
_UNLOCK: Delete = delete(cluster_locks).where(
    *cluster_is(), cluster_locks.c.request_id == bindparam("b_request_id")
)
_FREE_STALE = (
    delete(cluster_locks)
    .where(*cluster_is(), _lock_is_stale())
    .returning(cluster_locks.c.request_id)
)
_HOLDER = select(cluster_locks.c.request_id).where(*cluster_is())
_RELEASE_ENDED = (
    delete(cluster_locks)
    .where(
        *cluster_is(),
        cluster_locks.c.request_id == bindparam("b_request_id"),
        or_(cluster_locks.c.lease_name.is_(None), _lock_is_stale()),
    )
    .returning(cluster_locks.c.request_id)
)


async def take_lease_in(
    conn: AsyncConnection, dialect: str, name: str, holder: str, ttl_seconds: float
) -> Lease | None:
    if ttl_seconds <= 0:
        raise ValueError("ttl_seconds must be positive")
    now = utcnow()
    params = {
        "b_name": name,
        "b_holder": holder,
        "b_expires_at": now + timedelta(seconds=ttl_seconds),
        "now": now,
    }
    row = (await conn.execute(_TAKE_LEASE[dialect], params)).mappings().first()
    return None if row is None else Lease.model_validate(dict(row))


async def lock_in(
    conn: AsyncConnection,
    dialect: str,
    cluster: ClusterRef,
    request_id: str,
    *,
    lease_name: str | None,
    calls_until: datetime | None = None,
) -> bool:
    params = {
        **cluster_params(cluster),
        "b_request_id": request_id,
        "b_lease_name": lease_name,
        "b_calls_until": calls_until,
        "now": utcnow(),
    }
    return (await conn.execute(_LOCK[dialect], params)).first() is not None


async def holder_in(conn: AsyncConnection, cluster: ClusterRef) -> str | None:
    holder: str | None = (await conn.execute(_HOLDER, cluster_params(cluster))).scalar_one_or_none()
    return holder


async def release_ended_in(conn: AsyncConnection, cluster: ClusterRef, request_id: str) -> bool:
    params = {**cluster_params(cluster), "b_request_id": request_id, "now": utcnow()}
    return (await conn.execute(_RELEASE_ENDED, params)).first() is not None


async def unlock_in(conn: AsyncConnection, cluster: ClusterRef, request_id: str) -> None:
    await conn.execute(_UNLOCK, {**cluster_params(cluster), "b_request_id": request_id})


async def release_lease_in(conn: AsyncConnection, name: str, holder: str) -> None:
    await conn.execute(_RELEASE, {"b_name": name, "b_holder": holder})


class LocksMixin(StoreBase):
    # ---- leases ----------------------------------------------------------------------

    async def take_lease(self, name: str, holder: str, ttl_seconds: float) -> Lease | None:
        """Hold ``name`` for ``ttl_seconds`` from now: the Lease if ``holder`` holds it now (it
        was free, expired, released, or still its own), None if someone else does. The token
        is kept while the same holder renews in time and grows by one otherwise."""
        async with self._begin() as conn:
            return await take_lease_in(conn, self._dialect, name, holder, ttl_seconds)

    async def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool:
        """``take_lease`` as a yes/no: True if ``holder`` holds ``name`` now."""
        return await self.take_lease(name, holder, ttl_seconds) is not None

    async def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease | None:
        """Extend ``lease`` by ``ttl_seconds`` from now if nobody took it since (same token),
        even if it lapsed meanwhile; None if it was lost or released. A store that cannot be
        reached raises StoreUnavailable instead: the lease may well still be held, so retry."""
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        params = {**fence_params(lease), "b_expires_at": utcnow() + timedelta(seconds=ttl_seconds)}
        async with self._begin() as conn:
            row = (await conn.execute(_RENEW, params)).mappings().first()
        return None if row is None else Lease.model_validate(dict(row))

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` has it (a no-op otherwise). The row stays, expired,
        so the next holder's token is still larger than every earlier one."""
        async with self._begin() as conn:
            await release_lease_in(conn, name, holder)

    async def get_lease(self, name: str) -> Lease | None:
        """The lease's current holding, None if it is free (never taken, expired, released)."""
        async with self._begin() as conn:
            row = (
                (await conn.execute(_GET_LEASE, {"b_name": name, "now": utcnow()}))
                .mappings()
                .first()
            )
        return None if row is None else Lease.model_validate(dict(row))

    # ---- one running change per cluster ----------------------------------------------

    async def lock_cluster(
        self,
        provider: str,
        project: str,
        cluster_id: str,
        request_id: str,
        *,
        lease_name: str | None = None,
    ) -> bool:
        """Take the cluster for this request. True if it holds it now (again), False if
        another request does. With ``lease_name`` (the request's execution lease) the lock
        can be taken over once that lease has lapsed and ``begin_provider_call``'s deadline
        has passed; without, only the holder's ``unlock_cluster`` frees it."""
        cluster = ClusterRef(provider=provider, project=project, cluster_id=cluster_id)
        async with self._begin() as conn:
            return await lock_in(conn, self._dialect, cluster, request_id, lease_name=lease_name)

    async def begin_provider_call(
        self,
        provider: str,
        project: str,
        cluster_id: str,
        fence: Lease,
        max_call_seconds: float,
    ) -> bool:
        """Before a provider call that changes the cluster: note that it may reach the
        provider until ``max_call_seconds`` from now (the client's total timeout x attempts).
        False — do not call — unless this request holds the lock under ``fence``."""
        if max_call_seconds < 0:
            raise ValueError("max_call_seconds must not be negative")
        params = {
            **cluster_params(ClusterRef(provider=provider, project=project, cluster_id=cluster_id)),
            **fence_params(fence),
            "b_calls_until": utcnow() + timedelta(seconds=max_call_seconds),
        }
        async with self._begin() as conn:
            return (await conn.execute(_BEGIN_CALL, params)).first() is not None

    async def unlock_cluster(
        self, provider: str, project: str, cluster_id: str, request_id: str
    ) -> None:
        """Free the cluster if this request holds it (a no-op otherwise)."""
        cluster = ClusterRef(provider=provider, project=project, cluster_id=cluster_id)
        async with self._begin() as conn:
            await unlock_in(conn, cluster, request_id)

    async def free_stale_cluster_lock(
        self, provider: str, project: str, cluster_id: str
    ) -> str | None:
        """Free the cluster if its holder's lease has lapsed and no call of it can still
        arrive; returns the request that held it, None if the lock is live or absent."""
        cluster = ClusterRef(provider=provider, project=project, cluster_id=cluster_id)
        params = {**cluster_params(cluster), "now": utcnow()}
        async with self._begin() as conn:
            freed: str | None = (await conn.execute(_FREE_STALE, params)).scalar_one_or_none()
        return freed

    async def cluster_holder(self, provider: str, project: str, cluster_id: str) -> str | None:
        cluster = ClusterRef(provider=provider, project=project, cluster_id=cluster_id)
        async with self._begin() as conn:
            return await holder_in(conn, cluster)

    async def release_ended_cluster_lock(
        self, provider: str, project: str, cluster_id: str, request_id: str
    ) -> bool:
        """Free the cluster from an ended request, unless a provider call it started may
        still arrive (its lease is live or its call deadline is ahead). True if freed."""
        cluster = ClusterRef(provider=provider, project=project, cluster_id=cluster_id)
        async with self._begin() as conn:
            return await release_ended_in(conn, cluster, request_id)
