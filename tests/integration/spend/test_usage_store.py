"""The usage ledger's store on SQLite and PostgreSQL (SPEC §13): an interval accrues once
however many pollers record it, a gap is accrued at the last known size as estimated, and
the sums are exact."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from bot.core.store import Store
from bot.core.store.usage import UsageStore, epoch_ms
from bot.core.store.usage_records import Observation

T0 = datetime(2026, 12, 3, 10, 7, tzinfo=UTC)
HOUR = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)  # the bucket T0 is in starts here
GAP = timedelta(seconds=150)


def seen(gpus: int, rate: str | None = "2.99") -> Observation:
    return Observation(
        project="together-prod",
        cluster_id="tc-1",
        provider="together",
        cluster_name="train",
        gpus=gpus,
        gpu_type="H100_SXM",
        rate=None if rate is None else Decimal(rate) * gpus,
        currency=None if rate is None else "USD",
    )


async def test_each_interval_accrues_once_at_the_size_seen_before_it(database_url: str) -> None:
    async with await Store.open(database_url) as store:
        usage = UsageStore(store)
        assert [a.ms for a in await usage.accrue([seen(8)], T0, GAP)] == [0]  # first seen
        await usage.accrue([seen(16)], T0 + timedelta(seconds=60), GAP)
        # The same poll recorded again (a second poller): nothing more.
        again = await usage.accrue([seen(16)], T0 + timedelta(seconds=60), GAP)
        assert [a.ms for a in again] == [0]
        await usage.accrue([seen(16)], T0 + timedelta(seconds=120), GAP)
        rows = await usage.by_cluster(["together-prod"], T0 - timedelta(days=1), T0 + timedelta(1))
        assert len(rows) == 1
        row = rows[0]
        assert row.covered_ms == 120_000
        assert row.gpu_ms == 8 * 60_000 + 16 * 60_000
        # 60 s at 8 x 2.99/h, then 60 s at 16 x 2.99/h
        assert row.cost == Decimal("0.398667") + Decimal("0.797333")  # rounded per interval
        assert row.estimated_ms == 0


async def test_concurrent_pollers_accrue_the_interval_once(database_url: str) -> None:
    async with await Store.open(database_url) as a, await Store.open(database_url) as b:
        first, second = UsageStore(a), UsageStore(b)
        await first.accrue([seen(8)], T0, GAP)
        moments = [T0 + timedelta(seconds=s) for s in (30, 30, 31, 45, 45, 60)]
        for at in moments:
            await asyncio.gather(
                first.accrue([seen(8)], at, GAP), second.accrue([seen(8)], at, GAP)
            )
        (cursor,) = await first.cursors(["together-prod"])
        rows = await first.by_cluster(["together-prod"], HOUR, T0 + timedelta(hours=1))
        assert sum(r.covered_ms for r in rows) == epoch_ms(cursor.until) - epoch_ms(cursor.since)
        assert cursor.until == T0 + timedelta(seconds=60)
        assert sum(r.gpu_ms for r in rows) == 8 * 60_000


async def test_a_gap_is_accrued_at_the_last_size_as_estimated_across_buckets(
    database_url: str,
) -> None:
    async with await Store.open(database_url) as store:
        usage = UsageStore(store)
        await usage.accrue([seen(8)], T0, GAP)
        later = T0 + timedelta(hours=1)  # the store was away, or the watcher down
        (accrued,) = await usage.accrue([seen(4)], later, GAP)
        assert accrued.estimated and accrued.ms == 3_600_000
        buckets = await usage.by_bucket(["together-prod"], T0 - timedelta(hours=1), later)
        # 10:07 → 11:07 spans the buckets of 10:00, 10:15, 10:30, 10:45 and 11:00
        assert [b.bucket_start for b in buckets] == [
            datetime(2026, 12, 3, 10, m, tzinfo=UTC) for m in (0, 15, 30, 45)
        ] + [datetime(2026, 12, 3, 11, 0, tzinfo=UTC)]
        assert [b.covered_ms for b in buckets] == [480_000, 900_000, 900_000, 900_000, 420_000]
        total = sum(b.cost_micros for b in buckets)
        assert total == sum(b.estimated_cost_micros for b in buckets)
        assert abs(total - 23_920_000) <= len(buckets)  # 8 x 2.99 for an hour, per-piece rounding


async def test_an_unpriced_cluster_accrues_gpu_hours_and_no_cost(database_url: str) -> None:
    async with await Store.open(database_url) as store:
        usage = UsageStore(store)
        await usage.accrue([seen(8, rate=None)], T0, GAP)
        await usage.accrue([seen(8, rate=None)], T0 + timedelta(seconds=90), GAP)
        (row,) = await usage.by_cluster(["together-prod"], HOUR, T0 + timedelta(hours=1))
        assert row.unpriced_ms == 90_000 and row.cost_micros == 0 and row.currency is None
        assert row.gpu_hours == Decimal(8 * 90) / 3600
