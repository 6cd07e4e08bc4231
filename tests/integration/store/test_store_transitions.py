"""An execution's start and finish in the store, on SQLite and PostgreSQL: what each way a
start can go leaves behind (started, the lease held elsewhere, the cluster busy, the request
moved, a stale lock taken over, an ended holder's lock freed), and what a finish frees.

On SQLite each is one statement whose triggers write the lease, the lock and the audit
entry (migration 11); the SQLite-only tests below check what that design rests on: the
chain head another process moved, hand edits with a plain client, an older replica's
writes, and audit details round-tripping through the trigger's JSON."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, select, text
from sqlalchemy.engine import Connection

from bot.core.store import (
    AuditRow,
    ChangeRequestRecord,
    ClusterRef,
    Lease,
    OutcomeRecorded,
    RequestState,
    Started,
    StartedHow,
    Store,
)
from bot.core.store.chain import stored_detail
from bot.core.store.tables import change_requests
from bot.core.store.trigger_work import sqlite_time
from tests.support.workflow_kit import poll_until

CLUSTER = ClusterRef(provider="together", project="prod", cluster_id="c-1")
LONG = 60.0


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    yield opened
    await opened.close()


async def approved(store: Store, cluster_id: str = "c-1") -> ChangeRequestRecord:
    opened, _ = await store.open_request(
        provider="together",
        project="prod",
        cluster_id=cluster_id,
        cluster_name="train",
        action="update",
        plan={"num_gpus": 16},
        kinds=["scale"],
        needs_approval=False,
        requester="U1",
        channel="C1",
        reason=None,
        expires_at=None,
        state=RequestState.APPROVED,
        audit=AuditRow(actor="U1", event="requested", outcome="approved"),
    )
    return opened


async def start(
    store: Store,
    record: ChangeRequestRecord,
    holder: str = "replica-a",
    *,
    ttl: float = LONG,
    calls: float = LONG,
) -> Started:
    return await store.start_execution(
        record.id,
        lease_name=f"exec:{record.id}",
        holder=holder,
        ttl_seconds=ttl,
        cluster=CLUSTER,
        max_call_seconds=calls,
        audit=AuditRow(
            actor="U1",
            event="executing",
            project="prod",
            cluster_id="c-1",
            request_id=record.id,
            detail={"replica": holder},
        ),
        root_ts="1.000100",
    )


async def finish(
    store: Store, record: ChangeRequestRecord, lease: Lease | None, message: str = "done"
) -> OutcomeRecorded:
    status, _ = await store.finish_execution(
        record.id,
        lease,
        to=RequestState.SUCCEEDED,
        result_message=message,
        cluster=CLUSTER,
        audit=AuditRow(actor="U1", event="result", request_id=record.id),
    )
    return status


async def lapsed(store: Store, lease: str) -> None:
    """Wait until ``lease`` is free: its holder's time ran out, nobody took it."""

    async def free() -> bool:
        return await store.get_lease(lease) is None

    await poll_until(free, within=10)


async def events(store: Store, request_id: str) -> list[str]:
    return [entry.event for entry in reversed(await store.list_audit(request_id=request_id))]


async def intact(store: Store) -> bool:
    _, broken = await store.verify_audit()
    return broken is None


async def test_a_start_takes_lease_and_lock_moves_the_request_and_audits_it(store: Store) -> None:
    record = await approved(store)
    started = await start(store, record)
    assert started.how is StartedHow.STARTED and started.record is not None
    assert started.record.state is RequestState.EXECUTING
    assert started.record.root_ts == "1.000100"  # fields set with the start
    lease = await store.get_lease(f"exec:{record.id}")
    assert lease is not None and started.lease == lease  # the token the database gave it
    assert await store.cluster_holder(*CLUSTER.model_dump().values()) == record.id
    assert await events(store, record.id) == ["requested", "executing"]
    assert await intact(store)


async def test_a_second_start_of_a_started_request_moves_nothing(store: Store) -> None:
    record = await approved(store)
    assert (await start(store, record)).how is StartedHow.STARTED
    again = await start(store, record)
    assert again.how is StartedHow.MOVED  # no longer approved: the same holder keeps its lease
    assert await events(store, record.id) == ["requested", "executing"]


async def test_a_lease_held_elsewhere_leaves_everything_as_it_was(store: Store) -> None:
    record = await approved(store)
    assert await store.take_lease(f"exec:{record.id}", "replica-b", LONG) is not None
    held = await start(store, record)
    assert held.how is StartedHow.HELD and held.lease is None
    assert (await store.get_request(record.id)).state is RequestState.APPROVED  # type: ignore[union-attr]
    assert await store.cluster_holder(*CLUSTER.model_dump().values()) is None
    assert await events(store, record.id) == ["requested"]
    assert await intact(store)


async def test_a_busy_cluster_keeps_the_lease_and_names_its_holder(store: Store) -> None:
    first, second = await approved(store), await approved(store)
    assert (await start(store, first)).how is StartedHow.STARTED
    busy = await start(store, second, "replica-b")
    assert busy.how is StartedHow.BUSY and busy.holder == first.id
    assert busy.lease is not None and busy.lease.holder == "replica-b"  # released by the caller
    assert (await store.get_request(second.id)).state is RequestState.APPROVED  # type: ignore[union-attr]
    assert await events(store, second.id) == ["requested"]
    assert await intact(store)


async def test_a_lock_whose_holder_lapsed_and_whose_calls_are_over_is_taken_over(
    store: Store,
) -> None:
    gone, next_one = await approved(store), await approved(store)
    assert (await start(store, gone, "replica-gone", ttl=0.05, calls=0.0)).how is StartedHow.STARTED
    await lapsed(store, f"exec:{gone.id}")  # the dead replica's lease runs out
    taken = await start(store, next_one, "replica-b")
    assert taken.how is StartedHow.STARTED
    assert await store.cluster_holder(*CLUSTER.model_dump().values()) == next_one.id


async def test_a_lock_whose_holder_may_still_have_a_call_arriving_is_not_taken(
    store: Store,
) -> None:
    gone, next_one = await approved(store), await approved(store)
    assert (
        await start(store, gone, "replica-gone", ttl=0.05, calls=LONG)
    ).how is StartedHow.STARTED
    await lapsed(store, f"exec:{gone.id}")
    busy = await start(store, next_one, "replica-b")
    assert busy.how is StartedHow.BUSY and busy.holder == gone.id


async def test_an_ended_holders_lock_without_a_lease_is_freed_for_the_next(store: Store) -> None:
    ended, next_one = await approved(store), await approved(store)
    assert await store.lock_cluster("together", "prod", "c-1", ended.id)  # no lease: an old lock
    assert await store.transition(
        ended.id, from_states={RequestState.APPROVED}, to=RequestState.CANCELLED
    )
    started = await start(store, next_one)
    assert started.how is StartedHow.STARTED
    assert await store.cluster_holder(*CLUSTER.model_dump().values()) == next_one.id


async def test_a_finish_frees_the_cluster_releases_the_lease_and_audits_once(store: Store) -> None:
    record = await approved(store)
    started = await start(store, record)
    assert started.lease is not None
    ending: dict[str, Any] = {
        "to": RequestState.SUCCEEDED,
        "result_message": "done",
        "cluster": CLUSTER,
        "audit": AuditRow(actor="U1", event="result", outcome="succeeded", request_id=record.id),
    }
    status, done = await store.finish_execution(record.id, started.lease, **ending)
    assert status is OutcomeRecorded.RECORDED and done is not None
    assert done.state is RequestState.SUCCEEDED and done.result_message == "done"
    assert await store.cluster_holder(*CLUSTER.model_dump().values()) is None
    assert await store.get_lease(f"exec:{record.id}") is None
    replay, _ = await store.finish_execution(record.id, started.lease, **ending)
    assert replay is OutcomeRecorded.ALREADY_RECORDED
    assert await events(store, record.id) == ["requested", "executing", "result"]
    assert await intact(store)


async def test_a_fenced_off_finish_writes_nothing(store: Store) -> None:
    record = await approved(store)
    started = await start(store, record, ttl=0.05)
    assert started.lease is not None
    await lapsed(store, f"exec:{record.id}")
    assert await store.take_lease(f"exec:{record.id}", "recovery", LONG) is not None
    assert await finish(store, record, started.lease, "late") is OutcomeRecorded.FENCED
    assert await store.cluster_holder(*CLUSTER.model_dump().values()) == record.id
    assert await events(store, record.id) == ["requested", "executing"]


# ---- SQLite: what the triggers rest on --------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    yield opened
    await opened.close()


def count_statements(store: Store) -> list[str]:
    seen: list[str] = []

    def on_statement(_c: Connection, _cur: Any, statement: str, *_rest: Any) -> None:
        if not statement.startswith("BEGIN"):
            seen.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", on_statement)
    return seen


async def test_a_start_and_a_finish_are_one_statement_each(sqlite_store: Store) -> None:
    record = await approved(sqlite_store)
    seen = count_statements(sqlite_store)
    started = await start(sqlite_store, record)
    assert started.how is StartedHow.STARTED and len(seen) == 1
    assert await finish(sqlite_store, record, started.lease) is OutcomeRecorded.RECORDED
    assert len(seen) == 2, seen


async def test_a_chain_head_moved_by_another_process_is_read_again(
    sqlite_store: Store, tmp_path: Path
) -> None:
    other = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    try:
        record = await approved(sqlite_store)
        await other.append_audit(actor="U2", event="policy_reloaded")  # the head moves
        seen = count_statements(sqlite_store)
        assert (await start(sqlite_store, record)).how is StartedHow.STARTED
        # aborted by the trigger, the head read, the statement again
        assert len(seen) == 3, seen
        assert (await approved(other)).state is RequestState.APPROVED  # and the other way
        assert await events(sqlite_store, record.id) == ["requested", "executing"]
        assert await intact(sqlite_store)
    finally:
        await other.close()


async def test_a_rolled_back_append_is_not_taken_for_the_head(sqlite_store: Store) -> None:
    record = await approved(sqlite_store)
    with pytest.raises(RuntimeError):
        async with sqlite_store._begin() as conn:
            await sqlite_store._append(conn, AuditRow(actor="U1", event="never"))
            raise RuntimeError("rolled back")
    assert (await start(sqlite_store, record)).how is StartedHow.STARTED
    assert await intact(sqlite_store)


def test_the_tables_can_be_edited_by_hand_with_a_plain_client(tmp_path: Path) -> None:
    """The triggers call no function of gpuops's own: the sqlite3 shell can still fix a row,
    and such an edit (like an older replica's write) fires none of them."""
    import asyncio

    path = tmp_path / "gpuops.db"

    async def prepare() -> str:
        async with await Store.open(f"sqlite:///{path}") as store:
            return (await approved(store)).id

    request_id = asyncio.run(prepare())
    with sqlite3.connect(path) as plain:
        plain.execute(
            "UPDATE gpuops_change_requests SET state = 'cancelled', version = version + 1"
            " WHERE id = ?",
            (request_id,),
        )
        entries = plain.execute("SELECT count(*) FROM gpuops_audit").fetchone()[0]
        locks = plain.execute("SELECT count(*) FROM gpuops_cluster_locks").fetchone()[0]
    assert (entries, locks) == (1, 0)  # the opening's entry only


async def test_times_in_the_triggers_json_are_written_as_the_store_writes_them(
    sqlite_store: Store,
) -> None:
    record = await approved(sqlite_store)
    async with sqlite_store.engine.connect() as conn:
        raw = (
            await conn.execute(
                text("SELECT created_at FROM gpuops_change_requests WHERE id = :id"),
                {"id": record.id},
            )
        ).scalar_one()
    assert sqlite_time(record.created_at) == raw
    assert sqlite_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02 03:04:05.000000"
    with pytest.raises(ValueError):
        sqlite_time(datetime(2026, 1, 2))


_DETAIL = st.dictionaries(
    st.text(max_size=8),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**53), max_value=2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=8,
    ),
    max_size=4,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(detail=_DETAIL)
async def test_an_audit_detail_goes_through_the_trigger_as_it_was_hashed(
    sqlite_store: Store, detail: dict[str, Any]
) -> None:
    record, _ = await sqlite_store.open_request(
        provider="together",
        project="prod",
        cluster_id="c-9",
        cluster_name="train",
        action="update",
        plan={},
        kinds=[],
        needs_approval=True,
        requester="U1",
        channel="C1",
        reason=None,
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
        audit=AuditRow(actor="U1", event="requested", detail=detail),
    )
    [entry] = await sqlite_store.list_audit(request_id=record.id)
    assert entry.detail == stored_detail(detail)
    assert await intact(sqlite_store)
    async with sqlite_store.engine.connect() as conn:
        row = (
            await conn.execute(
                select(change_requests.c.last_transition).where(change_requests.c.id == record.id)
            )
        ).scalar_one()
    assert row is not None and '"nonce"' in row
