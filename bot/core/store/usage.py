"""The usage ledger's store (SPEC §13): each interval of a watched cluster's time is
accrued exactly once, across replicas, restarts and outages.

A cluster's cursor says how far it is accrued (``until``) and at what size and price it
stood then. An observation at ``now`` moves the cursor from ``until`` to ``now`` with one
compare-and-set (``UPDATE … WHERE until = :seen``) and, in the same transaction, adds the
interval ``[until, now)`` at the cursor's size and price to the 15-minute buckets it spans.
Of two pollers (a lease that lapsed mid-poll, a change's result beside a poll) only the one
whose compare-and-set matched adds anything; the other's transaction adds nothing. An
interval longer than ``gap`` (the watcher was down, the store away) is accrued all the
same at the last known size, and counted as estimated."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.expression import Executable

from bot.core.store.db import Store
from bot.core.store.engine import require_aware
from bot.core.store.usage_records import (
    BUCKET,
    MS_PER_HOUR,
    Observation,
    UsageCursor,
    UsageSum,
    cost_micros,
    to_micros,
    usage,
    usage_cursors,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SUMMED = (
    "covered_ms",
    "gpu_ms",
    "cost_micros",
    "unpriced_ms",
    "estimated_ms",
    "estimated_cost_micros",
)


def epoch_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def bucket_of(moment: datetime) -> datetime:
    """The start of the 15-minute bucket holding ``moment``."""
    return _EPOCH + ((moment - _EPOCH) // BUCKET) * BUCKET


def pieces(start: datetime, end: datetime) -> list[tuple[datetime, int]]:
    """``[start, end)`` cut at bucket boundaries: each piece's bucket and its milliseconds
    (which add up to exactly ``epoch_ms(end) - epoch_ms(start)``)."""
    cut: list[tuple[datetime, int]] = []
    at = start
    while at < end:
        bucket = bucket_of(at)
        upto = min(bucket + BUCKET, end)
        cut.append((bucket, epoch_ms(upto) - epoch_ms(at)))
        at = upto
    return cut


@dataclass(frozen=True)
class Accrued:
    """What one observation added: the interval's milliseconds (0: first seen, or another
    poller accrued it) and whether they were estimated."""

    cluster_id: str
    ms: int
    estimated: bool


def _cursor(row: RowMapping) -> UsageCursor:
    return UsageCursor.model_validate(dict(row))


def _state(observation: Observation) -> dict[str, object]:
    return {
        "provider": observation.provider,
        "cluster_name": observation.cluster_name,
        "gpus": observation.gpus,
        "nodes": observation.nodes,
        "gpu_type": observation.gpu_type,
        "rate_micros": None if observation.rate is None else to_micros(observation.rate),
        "currency": observation.currency,
        "price_as_of": observation.price_as_of,
    }


class UsageStore:
    """The ledger's tables in the gpuops database (shares the Store's engine)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def accrue(
        self, observations: Sequence[Observation], now: datetime, gap: timedelta
    ) -> list[Accrued]:
        """Record what each cluster is now and accrue its time since the last record; one
        transaction for them all (in cluster order, so two pollers never deadlock)."""
        require_aware("now", now)
        done: list[Accrued] = []
        ordered = sorted(observations, key=lambda o: (o.project, o.cluster_id))
        async with self.store._begin() as conn:
            for observation in ordered:
                done.append(await self._accrue_one(conn, observation, now, gap))
        return done

    async def _accrue_one(
        self, conn: AsyncConnection, seen: Observation, now: datetime, gap: timedelta
    ) -> Accrued:
        key = (usage_cursors.c.project == seen.project) & (
            usage_cursors.c.cluster_id == seen.cluster_id
        )
        row = (await conn.execute(select(usage_cursors).where(key))).first()
        if row is None:
            first = self.store._insert(usage_cursors).values(
                project=seen.project,
                cluster_id=seen.cluster_id,
                since=now,
                until=now,
                **_state(seen),
            )
            await conn.execute(first.on_conflict_do_nothing())
            return Accrued(seen.cluster_id, 0, estimated=False)
        cursor = _cursor(row._mapping)
        if cursor.until >= now:  # another poller accrued up to a later time already
            return Accrued(seen.cluster_id, 0, estimated=False)
        moved = await conn.execute(
            update(usage_cursors)
            .where(key & (usage_cursors.c.until == cursor.until))
            .values(until=now, **_state(seen))
            .returning(usage_cursors.c.until)
        )
        if moved.first() is None:
            return Accrued(seen.cluster_id, 0, estimated=False)
        estimated = now - cursor.until > gap
        total = 0
        for bucket, ms in pieces(cursor.until, now):
            total += ms
            await conn.execute(self._add(cursor, bucket, ms, estimated))
        return Accrued(seen.cluster_id, total, estimated)

    def _add(self, cursor: UsageCursor, bucket: datetime, ms: int, estimated: bool) -> Executable:
        rate = cursor.rate_micros
        cost = 0 if rate is None else cost_micros(rate, ms)
        values = {
            "covered_ms": ms,
            "gpu_ms": (cursor.gpus or 0) * ms,
            "cost_micros": cost,
            "unpriced_ms": ms if rate is None else 0,
            "estimated_ms": ms if estimated else 0,
            "estimated_cost_micros": cost if estimated else 0,
        }
        insert = self.store._insert(usage).values(
            project=cursor.project,
            cluster_id=cursor.cluster_id,
            bucket_start=bucket,
            cluster_name=cursor.cluster_name,
            currency=cursor.currency,
            **values,
        )
        return insert.on_conflict_do_update(
            index_elements=[usage.c.project, usage.c.cluster_id, usage.c.bucket_start],
            set_={
                "cluster_name": insert.excluded.cluster_name,
                "currency": insert.excluded.currency,
                **{name: usage.c[name] + insert.excluded[name] for name in _SUMMED},
            },
        )

    # ---- reads ------------------------------------------------------------------------

    async def cursors(self, projects: Collection[str]) -> list[UsageCursor]:
        """The cursors of these projects' clusters (what each stood at when last seen)."""
        query = (
            select(usage_cursors)
            .where(usage_cursors.c.project.in_(list(projects)))
            .order_by(usage_cursors.c.project, usage_cursors.c.cluster_id)
        )
        async with self.store._begin() as conn:
            return [_cursor(row._mapping) for row in await conn.execute(query)]

    async def by_cluster(
        self, projects: Collection[str], start: datetime, end: datetime
    ) -> list[UsageSum]:
        """Per cluster of these projects, its usage in the buckets of ``[start, end)``."""
        return await self._sums(projects, start, end, by_bucket=False)

    async def by_bucket(
        self, projects: Collection[str], start: datetime, end: datetime
    ) -> list[UsageSum]:
        """Per bucket and currency, these projects' usage in ``[start, end)``, in order."""
        return await self._sums(projects, start, end, by_bucket=True)

    async def _sums(
        self, projects: Collection[str], start: datetime, end: datetime, *, by_bucket: bool
    ) -> list[UsageSum]:
        require_aware("start", start)
        require_aware("end", end)
        sums = [func.sum(usage.c[name]).label(name) for name in _SUMMED]
        if by_bucket:
            keys: list[Any] = [usage.c.bucket_start, usage.c.currency]
            shown: list[Any] = keys
        else:
            keys = [usage.c.project, usage.c.cluster_id, usage.c.currency]
            shown = [*keys, func.max(usage.c.cluster_name).label("cluster_name")]
        query = (
            select(*shown, *sums)
            .where(
                usage.c.project.in_(list(projects)),
                usage.c.bucket_start >= start,
                usage.c.bucket_start < end,
            )
            .group_by(*keys)
            .order_by(*keys)
        )
        async with self.store._begin() as conn:
            rows = [dict(row._mapping) for row in await conn.execute(query)]
        return [
            UsageSum.model_validate({k: v for k, v in r.items() if v is not None}) for r in rows
        ]


__all__ = ["MS_PER_HOUR", "Accrued", "UsageStore", "bucket_of", "epoch_ms", "pieces"]
