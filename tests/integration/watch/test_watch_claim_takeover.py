"""The takeover of a watch alert claim never posted (issue #32, item 5), store to store on
SQLite and PostgreSQL: one compare-and-set on the claim row (``ON CONFLICT DO UPDATE …
WHERE ts IS NULL AND posted_at < cutoff``), so of two replicas one wins; a claim is held
until the bound; a poster whose claim was taken over writes nothing and gives nothing
back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, select

from bot.core.store import Store
from bot.core.store.watch import (
    AlertClaim,
    Held,
    NewRemediationRecord,
    WatchStore,
    alerts,
    remediations,
)
from bot.core.watch.keys import remediation_key
from tests.support.watch_kit import CLUSTER, NOTIFY

TAKEOVER = 1.0  # seconds: the bound of the two replicas' stores here
PROJECT = "together-prod"


@pytest.fixture
async def two_stores(database_url: str) -> AsyncIterator[tuple[WatchStore, WatchStore]]:
    """Two replicas' stores on one database, with a short takeover bound."""
    first = await Store.open(database_url)
    second = await Store.open(database_url)
    bound = timedelta(seconds=TAKEOVER)
    try:
        yield WatchStore(first, claim_takeover=bound), WatchStore(second, claim_takeover=bound)
    finally:
        await first.close()
        await second.close()


def past_the_bound(store: WatchStore) -> WatchStore:
    """The same replica's store once every claim there is older than the bound (without
    touching the rows: a claim's posted_at is its token)."""
    return WatchStore(store.store, claim_takeover=timedelta(0))


async def test_of_two_replicas_taking_over_one_stale_claim_one_wins(
    two_stores: tuple[WatchStore, WatchStore],
) -> None:
    first, second = two_stores
    long_ago = datetime.now(UTC) - timedelta(seconds=TAKEOVER * 10)
    keys = [f"health:p:c-{n}:1" for n in range(20)]
    async with first.store.engine.begin() as conn:
        await conn.execute(
            insert(alerts), [{"key": k, "channel": NOTIFY, "posted_at": long_ago} for k in keys]
        )
    for key in keys:
        results = await asyncio.gather(
            first.claim_alert(key, NOTIFY), second.claim_alert(key, NOTIFY)
        )
        assert sorted(isinstance(r, AlertClaim) for r in results) == [False, True], results
        assert Held.PENDING in results
    assert await WatchStore(first.store).claimed(keys) == frozenset(keys)  # claimed anew


async def test_a_claim_is_held_until_the_bound_then_taken_over_and_the_slow_poster_writes_nothing(
    two_stores: tuple[WatchStore, WatchStore],
) -> None:
    slow, later = two_stores
    key = "reminder:p:c:2026-12-03T00%3A00%3A00Z:1h"
    claim = await slow.claim_alert(key, NOTIFY)
    assert isinstance(claim, AlertClaim)
    bounded = WatchStore(later.store)  # the default bound: no margin to race on a busy machine
    assert await bounded.claim_alert(key, NOTIFY) is Held.PENDING  # a post may be under way
    assert await bounded.claimed([key]) == {key}
    later = past_the_bound(later)
    assert await later.claimed([key]) == frozenset()  # due again
    taken = await later.claim_alert(key, NOTIFY)
    assert isinstance(taken, AlertClaim)
    await slow.alert_posted(claim, "1.000001")  # the slow poster's claim is gone
    await slow.forget_alert(claim)  # and it cannot give back the new one
    assert await later.alert_ts(key) is None
    await later.alert_posted(taken, "2.000002")
    assert await later.alert_ts(key) == "2.000002"
    assert await slow.claim_alert(key, NOTIFY) is Held.POSTED


async def test_a_remediation_claim_taken_over_keeps_its_record_from_the_slow_poster(
    two_stores: tuple[WatchStore, WatchStore],
) -> None:
    slow, later = two_stores
    new = NewRemediationRecord(
        project=PROJECT,
        cluster_id=CLUSTER,
        cluster_name="train",
        instance_id="i-1",
        remediation_id="rem-1",
        node="node-1",
        channel=NOTIFY,
        provider_state="PENDING_APPROVAL",
    )
    key = remediation_key(PROJECT, "rem-1")
    first = await slow.claim_remediation(key, new)
    assert first is not None
    assert await WatchStore(later.store).claim_remediation(key, new) is None
    later = past_the_bound(later)
    second = await later.claim_remediation(key, new)
    assert second is not None and second[1].id == first[1].id  # the same record
    await slow.give_up_remediation(first[0], first[1].id)  # too late: kept for the new one
    await slow.remediation_posted(first[0], first[1].id, "1.000001")
    record = await later.get_remediation(first[1].id)
    assert record is not None and record.ts is None
    await later.remediation_posted(second[0], second[1].id, "2.000002")
    record = await later.get_remediation(first[1].id)
    assert record is not None and record.ts == "2.000002"
    async with later.store.engine.begin() as conn:
        rows = await conn.execute(select(remediations.c.id))
        assert list(rows.scalars()) == [first[1].id]
