"""Leases with fencing tokens, and the one-change-per-cluster lock that is only ever taken
over once its holder's lease has lapsed and no provider call it started can still arrive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, and_, case, delete, exists, or_, select, update

from bot.core.store.engine import StoreBase, utcnow
from bot.core.store.records import Lease
from bot.core.store.requests import fence_holds
from bot.core.store.tables import cluster_locks, leases

# A released lease keeps its row (and so its token, which must only grow) with this expiry.
_RELEASED = datetime(1970, 1, 1, tzinfo=UTC)


def _lock_is_stale(now: datetime) -> ColumnElement[bool]:
    """The lock's holder has let its lease lapse and its last provider call is over."""
    lease_alive = exists().where(
        leases.c.name == cluster_locks.c.lease_name, leases.c.expires_at > now
    )
    return and_(
        cluster_locks.c.lease_name.is_not(None),
        ~lease_alive,
        or_(cluster_locks.c.calls_until.is_(None), cluster_locks.c.calls_until <= now),
    )


def _cluster_is(provider: str, project: str, cluster_id: str) -> list[ColumnElement[bool]]:
    return [
        cluster_locks.c.provider == provider,
        cluster_locks.c.project == project,
        cluster_locks.c.cluster_id == cluster_id,
    ]


class LocksMixin(StoreBase):
    # ---- leases ----------------------------------------------------------------------

    async def take_lease(self, name: str, holder: str, ttl_seconds: float) -> Lease | None:
        """Hold ``name`` for ``ttl_seconds`` from now: the Lease if ``holder`` holds it now (it
        was free, expired, released, or still its own), None if someone else does. The token
        is kept while the same holder renews in time and grows by one otherwise."""
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        now = utcnow()
        insert = self._insert(leases).values(
            name=name, holder=holder, expires_at=now + timedelta(seconds=ttl_seconds), token=1
        )
        kept = (leases.c.holder == insert.excluded.holder) & (leases.c.expires_at > now)
        statement = insert.on_conflict_do_update(
            index_elements=[leases.c.name],
            set_={
                "holder": insert.excluded.holder,
                "expires_at": insert.excluded.expires_at,
                "token": case((kept, leases.c.token), else_=leases.c.token + 1),
            },
            where=(leases.c.holder == insert.excluded.holder) | (leases.c.expires_at <= now),
        ).returning(leases)
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else Lease.model_validate(dict(row))

    async def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> bool:
        """``take_lease`` as a yes/no: True if ``holder`` holds ``name`` now."""
        return await self.take_lease(name, holder, ttl_seconds) is not None

    async def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease | None:
        """Extend ``lease`` by ``ttl_seconds`` from now if nobody took it since (same token),
        even if it lapsed meanwhile; None if it was lost. A store that cannot be reached
        raises StoreUnavailable instead: the lease may well still be held, so retry."""
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        statement = (
            update(leases)
            .where(
                leases.c.name == lease.name,
                leases.c.holder == lease.holder,
                leases.c.token == lease.token,
            )
            .values(expires_at=utcnow() + timedelta(seconds=ttl_seconds))
            .returning(leases)
        )
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else Lease.model_validate(dict(row))

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` has it (a no-op otherwise). The row stays, expired,
        so the next holder's token is still larger than every earlier one."""
        statement = (
            update(leases)
            .where(leases.c.name == name, leases.c.holder == holder)
            .values(expires_at=_RELEASED)
        )
        async with self._begin() as conn:
            await conn.execute(statement)

    async def get_lease(self, name: str) -> Lease | None:
        """The lease's current holding, None if it is free (never taken, expired, released)."""
        statement = select(leases).where(leases.c.name == name, leases.c.expires_at > utcnow())
        async with self._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
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
        now = utcnow()
        insert = self._insert(cluster_locks).values(
            provider=provider,
            project=project,
            cluster_id=cluster_id,
            request_id=request_id,
            locked_at=now,
            lease_name=lease_name,
            calls_until=None,
        )
        same_request = cluster_locks.c.request_id == insert.excluded.request_id
        statement = insert.on_conflict_do_update(
            index_elements=[
                cluster_locks.c.provider,
                cluster_locks.c.project,
                cluster_locks.c.cluster_id,
            ],
            set_={
                "request_id": insert.excluded.request_id,
                "locked_at": case((same_request, cluster_locks.c.locked_at), else_=now),
                "lease_name": case(
                    (
                        same_request & insert.excluded.lease_name.is_(None),
                        cluster_locks.c.lease_name,
                    ),
                    else_=insert.excluded.lease_name,
                ),
                "calls_until": case((same_request, cluster_locks.c.calls_until), else_=None),
            },
            where=same_request | _lock_is_stale(now),
        ).returning(cluster_locks.c.request_id)
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None

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
        statement = (
            update(cluster_locks)
            .where(
                *_cluster_is(provider, project, cluster_id),
                cluster_locks.c.lease_name == fence.name,
                fence_holds(fence),
            )
            .values(calls_until=utcnow() + timedelta(seconds=max_call_seconds))
            .returning(cluster_locks.c.request_id)
        )
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None

    async def unlock_cluster(
        self, provider: str, project: str, cluster_id: str, request_id: str
    ) -> None:
        """Free the cluster if this request holds it (a no-op otherwise)."""
        statement = delete(cluster_locks).where(
            *_cluster_is(provider, project, cluster_id), cluster_locks.c.request_id == request_id
        )
        async with self._begin() as conn:
            await conn.execute(statement)

    async def free_stale_cluster_lock(
        self, provider: str, project: str, cluster_id: str
    ) -> str | None:
        """Free the cluster if its holder's lease has lapsed and no call of it can still
        arrive; returns the request that held it, None if the lock is live or absent."""
        statement = (
            delete(cluster_locks)
            .where(*_cluster_is(provider, project, cluster_id), _lock_is_stale(utcnow()))
            .returning(cluster_locks.c.request_id)
        )
        async with self._begin() as conn:
            freed: str | None = (await conn.execute(statement)).scalar_one_or_none()
        return freed

    async def cluster_holder(self, provider: str, project: str, cluster_id: str) -> str | None:
        statement = select(cluster_locks.c.request_id).where(
            *_cluster_is(provider, project, cluster_id)
        )
        async with self._begin() as conn:
            holder: str | None = (await conn.execute(statement)).scalar_one_or_none()
        return holder

    async def release_ended_cluster_lock(
        self, provider: str, project: str, cluster_id: str, request_id: str
    ) -> bool:
        """Free the cluster from an ended request, unless a provider call it started may
        still arrive (its lease is live or its call deadline is ahead). True if freed."""
        statement = (
            delete(cluster_locks)
            .where(
                *_cluster_is(provider, project, cluster_id),
                cluster_locks.c.request_id == request_id,
                or_(cluster_locks.c.lease_name.is_(None), _lock_is_stale(utcnow())),
            )
            .returning(cluster_locks.c.request_id)
        )
        async with self._begin() as conn:
            return (await conn.execute(statement)).first() is not None
