"""Fencing in the store, on SQLite and PostgreSQL: lease tokens, renewal that tells loss from
an outage, fenced writes, cluster locks that outlive a lapsed lease while a provider call may
still arrive, and idempotent recording of known outcomes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from bot.core.store import (
    AuditRow,
    ChangeRequestRecord,
    ClusterRef,
    Lease,
    OutcomeRecorded,
    RequestState,
    Store,
)

CLUSTER = ("together", "prod", "c-1")
# Leases here are short so that lapsing is quick; waits are ≥ 2x the ttl for a loaded machine.
TTL = 0.4
LAPSE = 1.0


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    yield opened
    await opened.close()


async def _executing(store: Store) -> ChangeRequestRecord:
    opened, _ = await store.open_request(
        provider="together",
        project="prod",
        cluster_id="c-1",
        cluster_name="train",
        action="update",
        plan={"num_gpus": 16},
        kinds=["scale"],
        needs_approval=False,
        requester="U1",
        channel="C1",
        reason=None,
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
        state=RequestState.EXECUTING,
    )
    return opened


async def test_tokens_grow_on_each_new_holding_and_stay_on_renewal(store: Store) -> None:
    first = await store.take_lease("exec:a", "r1", 30)
    assert first is not None and first.token == 1
    again = await store.take_lease("exec:a", "r1", 30)
    assert again is not None and again.token == 1
    assert await store.take_lease("exec:a", "r2", 30) is None
    await store.release_lease("exec:a", "r1")
    assert await store.get_lease("exec:a") is None
    second = await store.take_lease("exec:a", "r2", TTL)
    assert second is not None and second.token == 2 and second.holder == "r2"
    await asyncio.sleep(LAPSE)
    third = await store.take_lease("exec:a", "r2", 30)  # lapsed: a new holding, a new token
    assert third is not None and third.token == 3
    assert await store.acquire_lease("exec:a", "r1", 30) is False


async def test_renewal_survives_a_lapse_nobody_used_and_reports_a_takeover(store: Store) -> None:
    mine = await store.take_lease("exec:b", "r1", TTL)
    assert mine is not None
    await asyncio.sleep(LAPSE)
    renewed = await store.renew_lease(mine, 30)
    assert renewed is not None and renewed.token == mine.token
    assert renewed.expires_at > mine.expires_at

    short = await store.renew_lease(renewed, TTL)
    assert short is not None
    await asyncio.sleep(LAPSE)
    theirs = await store.take_lease("exec:b", "r2", 30)
    assert theirs is not None and theirs.token == mine.token + 1
    assert await store.renew_lease(mine, 30) is None  # lost: distinct from an outage (raises)
    with pytest.raises(ValueError, match="positive"):
        await store.renew_lease(theirs, 0)


async def test_a_stale_holder_cannot_write(store: Store) -> None:
    record = await _executing(store)
    stale = await store.take_lease(f"exec:{record.id}", "r1", TTL)
    assert stale is not None
    await asyncio.sleep(LAPSE)
    current = await store.take_lease(f"exec:{record.id}", "r2", 30)
    assert current is not None
    assert await store.update_fields(record.id, fence=stale, summary_ts="1.1") is None
    assert (
        await store.transition(
            record.id, from_states={RequestState.EXECUTING}, to=RequestState.FAILED, fence=stale
        )
        is None
    )
    won = await store.transition(
        record.id,
        from_states={RequestState.EXECUTING},
        to=RequestState.UNKNOWN,
        fence=current,
        result_message="lost contact",
    )
    assert won is not None and won.state == RequestState.UNKNOWN


async def test_cluster_lock_waits_for_lease_and_last_call(store: Store) -> None:
    first = await _executing(store)
    lease = await store.take_lease(f"exec:{first.id}", "r1", TTL)
    assert lease is not None
    assert await store.lock_cluster(*CLUSTER, first.id, lease_name=lease.name)
    assert await store.begin_provider_call(*CLUSTER, lease, max_call_seconds=3 * LAPSE)
    second = await _executing(store)
    assert not await store.lock_cluster(*CLUSTER, second.id, lease_name=f"exec:{second.id}")

    await asyncio.sleep(LAPSE)  # the lease lapsed, but the provider call may still arrive
    assert await store.get_lease(lease.name) is None
    assert not await store.lock_cluster(*CLUSTER, second.id, lease_name=f"exec:{second.id}")
    assert await store.free_stale_cluster_lock(*CLUSTER) is None

    await asyncio.sleep(2.5 * LAPSE)  # now no call can still arrive
    assert await store.lock_cluster(*CLUSTER, second.id, lease_name=f"exec:{second.id}")
    assert await store.cluster_holder(*CLUSTER) == second.id
    # The first executor, fenced out, may not start another call.
    assert not await store.begin_provider_call(*CLUSTER, lease, max_call_seconds=10)


async def test_a_live_lease_keeps_the_lock_and_a_stale_lock_can_be_freed(store: Store) -> None:
    first = await _executing(store)
    lease = await store.take_lease(f"exec:{first.id}", "r1", TTL)
    assert lease is not None
    assert await store.lock_cluster(*CLUSTER, first.id, lease_name=lease.name)
    assert await store.lock_cluster(*CLUSTER, first.id)  # again, keeps the lease name
    renewed = await store.renew_lease(lease, 30)
    assert renewed is not None
    assert await store.free_stale_cluster_lock(*CLUSTER) is None
    await store.release_lease(lease.name, "r1")
    assert await store.free_stale_cluster_lock(*CLUSTER) == first.id
    assert await store.cluster_holder(*CLUSTER) is None


async def test_a_lock_without_a_lease_is_only_freed_by_its_holder(store: Store) -> None:
    record = await _executing(store)
    assert await store.lock_cluster(*CLUSTER, record.id)
    assert await store.free_stale_cluster_lock(*CLUSTER) is None
    assert not await store.lock_cluster(*CLUSTER, "CR-OTHER2", lease_name="exec:CR-OTHER2")
    await store.unlock_cluster(*CLUSTER, record.id)
    assert await store.lock_cluster(*CLUSTER, "CR-OTHER2")


async def finish(
    store: Store, request_id: str, fence: Lease, to: RequestState, message: str
) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
    """Record a provider call's outcome as the executor does (and replays it)."""
    return await store.finish_execution(
        request_id,
        fence,
        to=to,
        result_message=message,
        cluster=ClusterRef(provider="together", project="prod", cluster_id="c-1"),
        audit=AuditRow(actor="gpuops", event=to.value, request_id=request_id),
    )


async def test_an_outcome_is_recorded_once_and_fenced(store: Store) -> None:
    record = await _executing(store)
    lease = await store.take_lease(f"exec:{record.id}", "r1", 30)
    assert lease is not None
    done = await finish(store, record.id, lease, RequestState.SUCCEEDED, "num_gpus 16")
    assert done[0] is OutcomeRecorded.RECORDED and done[1] is not None
    assert done[1].state == RequestState.SUCCEEDED
    replay = await finish(store, record.id, lease, RequestState.SUCCEEDED, "num_gpus 16")
    assert replay == (OutcomeRecorded.ALREADY_RECORDED, done[1])
    other = await finish(store, record.id, lease, RequestState.FAILED, "504")
    assert other[0] is OutcomeRecorded.FENCED
    missing = await finish(store, "CR-NONE22", lease, RequestState.FAILED, "")
    assert missing == (OutcomeRecorded.MISSING, None)
    assert [e.event for e in await store.list_audit(request_id=record.id)] == ["succeeded"]


async def test_a_known_outcome_replaces_unknown_but_not_a_takeover_in_flight(store: Store) -> None:
    record = await _executing(store)
    stale = await store.take_lease(f"exec:{record.id}", "r1", TTL)
    assert stale is not None
    await asyncio.sleep(LAPSE)
    recovery = await store.take_lease(f"exec:{record.id}", "r2", 30)
    assert recovery is not None
    fenced = await finish(store, record.id, stale, RequestState.SUCCEEDED, "ok")
    assert fenced[0] is OutcomeRecorded.FENCED
    assert fenced[1] is not None and fenced[1].state == RequestState.EXECUTING
    await store.transition(
        record.id, from_states={RequestState.EXECUTING}, to=RequestState.UNKNOWN, fence=recovery
    )
    corrected = await finish(store, record.id, stale, RequestState.SUCCEEDED, "ok")
    assert corrected[0] is OutcomeRecorded.CORRECTED_UNKNOWN
    assert corrected[1] is not None and corrected[1].state == RequestState.SUCCEEDED


@pytest.mark.parametrize("replicas", [2, 3])
async def test_replicas_racing_for_a_lease_hold_it_one_at_a_time_the_stale_fenced(
    database_url: str, replicas: int
) -> None:
    """Each replica its own store (engine, connections) on one database: they race for a
    change's lease; one holds it. When its holding lapses the others race again: one takes
    over with a new token, and neither the lapsed holder nor a loser records anything."""
    stores = [await Store.open(database_url) for _ in range(replicas)]
    try:
        record = await _executing(stores[0])
        name = f"exec:{record.id}"
        taken = await asyncio.gather(
            *(store.take_lease(name, f"r{n}", TTL) for n, store in enumerate(stores))
        )
        [first] = [lease for lease in taken if lease is not None]
        assert first.token == 1
        await asyncio.sleep(LAPSE)
        rest = [n for n in range(replicas) if f"r{n}" != first.holder]
        again = await asyncio.gather(*(stores[n].take_lease(name, f"r{n}", 30) for n in rest))
        [second] = [lease for lease in again if lease is not None]
        assert second.token == first.token + 1 and second.holder != first.holder
        assert await stores[int(first.holder[1:])].renew_lease(first, 30) is None  # lost
        outcomes = await asyncio.gather(
            *(
                finish(store, record.id, lease, RequestState.SUCCEEDED, f"by r{n}")
                for n, store in enumerate(stores)
                for lease in (first, second)
                if lease.holder == f"r{n}"
            )
        )
        assert sorted(o[0].value for o in outcomes) == sorted(
            [OutcomeRecorded.RECORDED.value, OutcomeRecorded.FENCED.value]
        )
        done = await stores[-1].get_request(record.id)
        assert done is not None and done.result_message == f"by {second.holder}"
        assert [e.event for e in await stores[0].list_audit(request_id=record.id)] == ["succeeded"]
    finally:
        for store in stores:
            await store.close()


def test_lease_is_a_frozen_record() -> None:
    lease = Lease(name="n", holder="h", token=1, expires_at=datetime.now(UTC))
    with pytest.raises(ValueError, match="frozen"):
        lease.token = 2  # type: ignore[misc]
