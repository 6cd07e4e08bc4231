"""The audit chain with three replicas on one PostgreSQL (three stores, each with its own
engine and pool): the chain head is no lock held for a whole transaction. Each transaction
takes the head last, after its business rows (in a transition's one statement, the WITH
chain's last part), so a replica whose transaction holds its request row, lease or lock
holds up no other replica's append; and however the appends interleave, the trail is one
valid chain (``verify_audit``, what ``gpuops audit verify`` runs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from bot.core.store import AuditRow, ChangeRequestRecord, ClusterRef, RequestState, Store
from bot.core.store.locks import take_lease_in
from bot.core.store.requests.statements import update_in

pytestmark = pytest.mark.postgres

HANG_GUARD = 60.0  # only a wait on a lock held by the open transaction could take this long
_LOCK_WAITS = """
SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


@pytest.fixture
async def replicas(pg_database_url: str) -> AsyncIterator[list[Store]]:
    stores = [await Store.open(pg_database_url) for _ in range(3)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


async def opened(store: Store, cluster_id: str) -> ChangeRequestRecord:
    record, _ = await store.open_request(
        provider="together",
        project="prod",
        cluster_id=cluster_id,
        cluster_name=cluster_id,
        action="update",
        plan={"num_gpus": 16},
        kinds=["scale"],
        needs_approval=True,
        requester="U1",
        channel="C1",
        reason=None,
        expires_at=None,
        audit=AuditRow(actor="U1", event="requested"),
    )
    return record


def audit(event: str, record: ChangeRequestRecord) -> AuditRow:
    return AuditRow(
        actor="U2",
        event=event,
        project=record.project,
        cluster_id=record.cluster_id,
        request_id=record.id,
    )


async def lock_waits(url: str) -> int:
    conn = await asyncpg.connect(url.replace("postgresql://", "postgres://", 1))
    try:
        return int(await conn.fetchval(_LOCK_WAITS))
    finally:
        await conn.close()


async def test_an_open_transaction_holding_its_business_rows_holds_up_no_other_append(
    replicas: list[Store], pg_database_url: str
) -> None:
    a, b, c = replicas
    held = await opened(a, "c-held")
    others = [await opened(b, "c-b"), await opened(c, "c-c")]
    async with a._begin() as conn:
        # Replica A is mid-transaction: its lease taken and its request row written (both
        # locked until it ends), its audit entry not appended yet.
        lease = await take_lease_in(conn, "postgresql", f"exec:{held.id}", "replica-a", 60.0)
        moved = await update_in(
            conn, held.id, {"state": "cancelled"}, from_states=(RequestState.PENDING,)
        )
        assert lease is not None and moved is not None
        # Meanwhile B and C move their own requests with their audit entries, open new
        # ones and append alone: every one of them commits while A's transaction is open.
        done = await asyncio.wait_for(
            asyncio.gather(
                b.transition(
                    others[0].id,
                    from_states={RequestState.PENDING},
                    to=RequestState.DENIED,
                    audit=audit("denied", others[0]),
                ),
                c.decide_approval(
                    others[1],
                    "U3",
                    {},
                    to=RequestState.APPROVED,
                    audit=audit("approved", others[1]),
                ),
                opened(b, "c-new-b"),
                c.append_audit(actor="gpuops", event="health_alert", project="prod"),
            ),
            HANG_GUARD,
        )
        assert all(result is not None for result in done)
        assert await lock_waits(pg_database_url) == 0
        await a._append(conn, audit("cancelled", held))
    count, broken = await a.verify_audit()
    assert broken is None, broken
    # 4 openings, B's and C's transitions, C's lone entry, A's cancel
    assert count == 8 and (await b.chain_head()).entries == 8


async def test_appends_from_three_replicas_at_once_make_one_valid_chain(
    replicas: list[Store],
) -> None:
    """Each replica runs changes through their lifecycle concurrently (open, approve, start,
    finish: every entry in its transition's own statement), 4 at a time each."""

    async def lifecycle(store: Store, name: str) -> None:
        record = await opened(store, name)
        approved = await store.decide_approval(
            record, "U3", {}, to=RequestState.APPROVED, audit=audit("approved", record)
        )
        assert approved is not None
        cluster = ClusterRef(provider="together", project="prod", cluster_id=name)
        started = await store.start_execution(
            record.id,
            lease_name=f"exec:{record.id}",
            holder=name,
            ttl_seconds=60.0,
            cluster=cluster,
            max_call_seconds=30.0,
            audit=audit("executing", record),
        )
        assert started.lease is not None and started.record is not None, started
        await store.finish_execution(
            record.id,
            started.lease,
            to=RequestState.SUCCEEDED,
            result_message="done",
            cluster=cluster,
            audit=audit("succeeded", record),
        )

    names = [(store, f"c-{i}-{n}") for i, store in enumerate(replicas) for n in range(4)]
    await asyncio.wait_for(
        asyncio.gather(*(lifecycle(store, name) for store, name in names)), HANG_GUARD
    )
    count, broken = await replicas[0].verify_audit()
    assert broken is None, broken
    assert count == 4 * len(names)
    head = await replicas[2].chain_head()
    assert head.entries == count
