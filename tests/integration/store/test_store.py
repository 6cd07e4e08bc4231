"""The state store on SQLite and PostgreSQL: records, compare-and-set under concurrency,
cluster locks, leases, audit, delivery de-duplication and migrations."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pydantic
import pytest
from sqlalchemy import MetaData, Table, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bot.core.store import (
    REQUEST_ID_ALPHABET,
    TERMINAL_STATES,
    ChangeRequestRecord,
    RequestState,
    Store,
    metadata,
    normalize_database_url,
)
from bot.core.store.migrations import LATEST_VERSION, applied_versions

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

PENDING = RequestState.PENDING
APPROVED = RequestState.APPROVED
EXECUTING = RequestState.EXECUTING

# The state machine of SPEC §5, edge by edge.
EDGES = [
    (PENDING, APPROVED),
    (PENDING, RequestState.DENIED),
    (PENDING, RequestState.EXPIRED),
    (PENDING, RequestState.CANCELLED),
    (APPROVED, EXECUTING),
    (EXECUTING, RequestState.SUCCEEDED),
    (EXECUTING, RequestState.FAILED),
    (EXECUTING, RequestState.UNKNOWN),
]


class Backend:
    """One database (a SQLite file or a PostgreSQL schema) that tests may open stores on."""

    def __init__(self, name: str, url: str, schema: str | None) -> None:
        self.name = name
        self.url = url
        self.schema = schema
        self.stores: list[Store] = []

    async def open(self) -> Store:
        store = await Store.open(self.url, schema=self.schema)
        self.stores.append(store)
        return store


async def _pg_admin(statement: str) -> None:
    engine = create_async_engine(normalize_database_url(PG_URL), poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


_postgres_reached: list[bool] = []


async def _require_postgres() -> None:
    """Fail (never skip) with a clear message when the local PostgreSQL is not there."""
    if _postgres_reached:
        return
    try:
        await asyncio.wait_for(_pg_admin("SELECT 1"), timeout=10)
    except Exception as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_URL}: {exc!r}. The postgres-marked store "
            "tests need a running server (.ci/run starts it); they are never skipped.",
            pytrace=False,
        )
    _postgres_reached.append(True)


def _fresh_schema_name() -> str:
    return f"gpuops_test_{secrets.token_hex(6)}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        db = Backend("sqlite", f"sqlite:///{tmp_path / 'gpuops.db'}", None)
    else:
        await _require_postgres()
        db = Backend("postgres", PG_URL, _fresh_schema_name())
    try:
        yield db
    finally:
        for store in db.stores:
            await store.close()
        if db.schema is not None:
            await _pg_admin(f'DROP SCHEMA IF EXISTS "{db.schema}" CASCADE')


@pytest.fixture
async def store(backend: Backend) -> Store:
    return await backend.open()


def _request_fields(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "provider": "together",
        "project": "proj-a",
        "cluster_id": "cl-1",
        "cluster_name": "train-1",
        "action": "update",
        "plan": {"fields": {"num_gpus": 16}, "preview": [{"field": "num_gpus", "after": "16"}]},
        "kinds": ["scale_up"],
        "needs_approval": True,
        "requester": "U0REQUESTER",
        "channel": "C0INCIDENT",
        "reason": "incident 42",
        "expires_at": datetime.now(UTC) + timedelta(hours=1),
    }
    fields.update(overrides)
    return fields


async def _new_request(store: Store, **overrides: Any) -> ChangeRequestRecord:
    opened, _ = await store.open_request(**_request_fields(**overrides))
    return opened


# ---- change requests ------------------------------------------------------------------


async def test_create_and_get_round_trip(store: Store) -> None:
    expires = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    plan = {"fields": {"num_gpus": 16, "cluster_type": None}, "nested": [1, "two", {"x": True}]}
    created = await _new_request(
        store, plan=plan, kinds=["scale_up", "type"], expires_at=expires, reason=None
    )

    assert re.fullmatch(f"CR-[{REQUEST_ID_ALPHABET}]{{6}}", created.id)
    fetched = await store.get_request(created.id)
    assert fetched == created
    assert fetched.state is PENDING
    assert fetched.plan == plan
    assert fetched.kinds == ["scale_up", "type"]
    assert fetched.reason is None
    assert fetched.version == 1
    assert not fetched.break_glass
    assert fetched.expires_at == expires
    for moment in (fetched.created_at, fetched.updated_at, fetched.expires_at):
        assert moment.utcoffset() == timedelta(0)
    assert abs(fetched.created_at - datetime.now(UTC)) < timedelta(seconds=30)


async def test_get_accepts_typed_ids_and_misses_return_none(store: Store) -> None:
    created = await _new_request(store)
    assert await store.get_request(f"  {created.id.lower()} ") == created
    assert await store.get_request("CR-222222") is None


async def test_create_in_a_given_state_and_ids_are_distinct(store: Store) -> None:
    records = [await _new_request(store, state=APPROVED, needs_approval=False) for _ in range(20)]
    assert {record.state for record in records} == {APPROVED}
    assert len({record.id for record in records}) == 20


async def test_naive_datetimes_are_refused(store: Store) -> None:
    naive = datetime(2030, 1, 1)
    with pytest.raises(ValueError, match="tz-aware"):
        await _new_request(store, expires_at=naive)
    with pytest.raises(ValueError, match="tz-aware"):
        await store.list_requests(expires_before=naive)
    with pytest.raises(ValueError, match="tz-aware"):
        await store.prune_deliveries(naive)


async def test_every_transition_of_the_state_machine(store: Store) -> None:
    for source, target in EDGES:
        record = await _new_request(store, state=source)
        moved = await store.transition(
            record.id,
            from_states={source},
            to=target,
            decided_by="U0APPROVER",
            decision_note=f"{source}->{target}",
            result_message="done",
        )
        assert moved is not None, (source, target)
        assert moved.state is target
        assert moved.version == record.version + 1
        assert moved.updated_at >= record.updated_at
        assert moved.created_at == record.created_at
        assert (moved.decided_by, moved.decision_note) == ("U0APPROVER", f"{source}->{target}")
        assert await store.get_request(record.id) == moved


async def test_happy_path_sets_decision_fields_and_counts_versions(store: Store) -> None:
    record = await _new_request(store)
    approved = await store.transition(
        record.id, from_states={PENDING}, to=APPROVED, decided_by="U0B", break_glass=True
    )
    executing = await store.transition(record.id, from_states={APPROVED}, to=EXECUTING)
    done = await store.transition(
        record.id,
        from_states={EXECUTING},
        to=RequestState.SUCCEEDED,
        result_message="num_gpus 8 → 16",
        summary_ts="1700000000.000200",
    )

    assert approved is not None and executing is not None and done is not None
    assert (done.state, done.version) == (RequestState.SUCCEEDED, 4)
    assert done.decided_by == "U0B" and done.break_glass
    assert done.result_message == "num_gpus 8 → 16"
    assert done.summary_ts == "1700000000.000200"
    assert done.state in TERMINAL_STATES


async def test_refused_compare_and_set_changes_nothing(store: Store) -> None:
    record = await _new_request(store)
    denied = await store.transition(
        record.id, from_states={PENDING}, to=RequestState.DENIED, decided_by="U0X"
    )
    assert denied is not None

    late_approval = await store.transition(
        record.id, from_states={PENDING}, to=APPROVED, decided_by="U0Y"
    )
    assert late_approval is None
    assert await store.get_request(record.id) == denied
    assert await store.transition("CR-222222", from_states={PENDING}, to=APPROVED) is None


async def test_transition_validates_its_arguments(store: Store) -> None:
    record = await _new_request(store)
    with pytest.raises(ValueError, match="from_states"):
        await store.transition(record.id, from_states=set(), to=APPROVED)
    with pytest.raises(pydantic.ValidationError):
        await store.transition(record.id, from_states={PENDING}, to=APPROVED, project="other")
    with pytest.raises(pydantic.ValidationError):
        await store.transition(record.id, from_states={PENDING}, to=APPROVED, break_glass="yes")
    assert await store.get_request(record.id) == record


async def test_update_fields_sets_thread_fields_but_never_state(store: Store) -> None:
    record = await _new_request(store)
    updated = await store.update_fields(record.id, root_ts="1.000100", summary_ts="1.000200")

    assert updated is not None
    assert (updated.root_ts, updated.summary_ts) == ("1.000100", "1.000200")
    assert (updated.state, updated.version) == (PENDING, 2)
    assert await store.update_fields(record.id) == updated
    with pytest.raises(ValueError, match="transition"):
        await store.update_fields(record.id, state=APPROVED)
    with pytest.raises(pydantic.ValidationError):
        await store.update_fields(record.id, version=99)
    assert await store.update_fields("CR-222222", root_ts="1.0") is None


async def test_list_requests_filters_and_orders_oldest_first(store: Store) -> None:
    now = datetime.now(UTC)
    soon = await _new_request(store, project="proj-a", expires_at=now + timedelta(minutes=1))
    later = await _new_request(store, project="proj-b", expires_at=now + timedelta(hours=2))
    never = await _new_request(store, project="proj-a", expires_at=None)
    approved = await _new_request(store, project="proj-a", state=APPROVED)

    assert [r.id for r in await store.list_requests()] == [
        soon.id,
        later.id,
        never.id,
        approved.id,
    ]
    assert [r.id for r in await store.list_requests(states={PENDING}, project="proj-a")] == [
        soon.id,
        never.id,
    ]
    expiring = await store.list_requests(expires_before=now + timedelta(minutes=30))
    assert [r.id for r in expiring] == [soon.id]
    assert [r.id for r in await store.list_requests(states={APPROVED, PENDING}, limit=2)] == [
        soon.id,
        later.id,
    ]
    assert await store.list_requests(states=set(TERMINAL_STATES)) == []


# ---- compare-and-set under concurrency --------------------------------------------------


async def _race_approvals(stores: list[Store], rounds: int, tasks_per_store: int) -> None:
    for round_number in range(rounds):
        record = await _new_request(stores[0])
        attempts = [
            store.transition(
                record.id, from_states={PENDING}, to=APPROVED, decided_by=f"U{index}-{which}"
            )
            for which, store in enumerate(stores)
            for index in range(tasks_per_store)
        ]
        results = await asyncio.gather(*attempts)
        winners = [result for result in results if result is not None]
        assert len(winners) == 1, f"round {round_number}: {len(winners)} winners"
        final = await stores[-1].get_request(record.id)
        assert final == winners[0]
        assert final is not None and final.version == 2


async def test_concurrent_transitions_have_exactly_one_winner(store: Store) -> None:
    await _race_approvals([store], rounds=50, tasks_per_store=6)


async def test_two_store_instances_race_with_exactly_one_winner(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    assert first.engine is not second.engine
    await _race_approvals([first, second], rounds=50, tasks_per_store=3)


async def test_in_memory_sqlite_store_serialises_concurrent_callers() -> None:
    async with await Store.open("sqlite:///:memory:") as store:
        await _race_approvals([store], rounds=10, tasks_per_store=5)
        results = await asyncio.gather(*(store.remember_delivery("k") for _ in range(10)))
        assert results.count(True) == 1


# ---- Slack delivery de-duplication ------------------------------------------------------


async def test_remember_delivery_is_true_exactly_once_under_concurrency(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    for key_number in range(10):
        key = f"T0TEAM:Ev{key_number}"
        calls = [store.remember_delivery(key) for store in (first, second) for _ in range(4)]
        results = await asyncio.gather(*calls)
        assert results.count(True) == 1, key
    assert await first.remember_delivery("T0TEAM:Ev0") is False


async def test_prune_deliveries_forgets_old_keys(store: Store) -> None:
    assert await store.remember_delivery("old")
    cutoff = datetime.now(UTC) + timedelta(milliseconds=1)
    await asyncio.sleep(0.01)
    assert await store.remember_delivery("new")

    assert await store.prune_deliveries(cutoff) == 1
    assert await store.remember_delivery("old") is True
    assert await store.remember_delivery("new") is False


# ---- cluster locks ----------------------------------------------------------------------


async def test_lock_cluster_holds_one_request_per_cluster(store: Store) -> None:
    cluster = ("together", "proj-a", "cl-1")
    assert await store.cluster_holder(*cluster) is None
    assert await store.lock_cluster(*cluster, "CR-AAAAAA")
    assert await store.lock_cluster(*cluster, "CR-BBBBBB") is False
    assert await store.lock_cluster(*cluster, "CR-AAAAAA")
    assert await store.cluster_holder(*cluster) == "CR-AAAAAA"
    assert await store.lock_cluster("together", "proj-a", "cl-2", "CR-BBBBBB")
    assert await store.lock_cluster("e2e", "proj-a", "cl-1", "CR-CCCCCC")

    await store.unlock_cluster(*cluster, "CR-BBBBBB")
    assert await store.cluster_holder(*cluster) == "CR-AAAAAA"
    await store.unlock_cluster(*cluster, "CR-AAAAAA")
    assert await store.cluster_holder(*cluster) is None
    assert await store.lock_cluster(*cluster, "CR-BBBBBB")


async def test_lock_cluster_race_has_one_holder(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    for round_number in range(10):
        cluster = ("e2e", "proj-a", f"cl-{round_number}")
        calls = [
            store.lock_cluster(*cluster, f"CR-{which}{index}")
            for which, store in enumerate((first, second))
            for index in range(3)
        ]
        results = await asyncio.gather(*calls)
        assert results.count(True) == 1
        holder = await first.cluster_holder(*cluster)
        assert holder is not None and holder.startswith("CR-")


# ---- leases -----------------------------------------------------------------------------


async def test_lease_acquire_refuse_renew_expire_release(store: Store) -> None:
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-1", ttl_seconds=30)
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-2", ttl_seconds=30) is False
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-1", ttl_seconds=0.2)
    assert await store.acquire_lease("poll:CR-BBBBBB", "replica-2", ttl_seconds=30)

    await asyncio.sleep(0.25)
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-2", ttl_seconds=30)
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-1", ttl_seconds=30) is False

    await store.release_lease("poll:CR-AAAAAA", "replica-1")
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-1", ttl_seconds=30) is False
    await store.release_lease("poll:CR-AAAAAA", "replica-2")
    assert await store.acquire_lease("poll:CR-AAAAAA", "replica-1", ttl_seconds=30)
    with pytest.raises(ValueError, match="ttl"):
        await store.acquire_lease("sweeper", "replica-1", ttl_seconds=0)


async def test_lease_race_has_one_holder(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    for round_number in range(10):
        name = f"sweeper-{round_number}"
        calls = [
            store.acquire_lease(name, f"replica-{which}-{index}", ttl_seconds=30)
            for which, store in enumerate((first, second))
            for index in range(3)
        ]
        assert (await asyncio.gather(*calls)).count(True) == 1


# ---- audit ------------------------------------------------------------------------------


async def test_audit_appends_and_lists_newest_first_with_filters(store: Store) -> None:
    requested = await store.append_audit(
        actor="U0REQ",
        event="requested",
        project="proj-a",
        cluster_id="cl-1",
        request_id="CR-AAAAAA",
        outcome="pending",
        detail={"plan": {"num_gpus": 16}},
    )
    refused = await store.append_audit(
        actor="U0NOBODY", event="refused", project="proj-b", detail={"reason": "no grant"}
    )
    approved = await store.append_audit(
        actor="U0APP", event="approved", project="proj-a", request_id="CR-AAAAAA"
    )
    other = await store.append_audit(actor="U0REQ", event="requested", request_id="CR-BBBBBB")

    assert requested.id < refused.id < approved.id < other.id
    assert requested.detail == {"plan": {"num_gpus": 16}}
    assert approved.detail == {}
    assert requested.at.utcoffset() == timedelta(0)
    assert await store.list_audit() == [other, approved, refused, requested]
    assert await store.list_audit(project="proj-a") == [approved, requested]
    assert await store.list_audit(request_id="CR-AAAAAA") == [approved, requested]
    assert await store.list_audit(project="proj-b", request_id="CR-AAAAAA") == []
    assert await store.list_audit(limit=2) == [other, approved]


# ---- migrations, configuration -----------------------------------------------------------


async def _versions(store: Store) -> list[int]:
    async with store.engine.connect() as conn:
        return await conn.run_sync(applied_versions)


async def test_migrations_are_idempotent_and_keep_data(backend: Backend) -> None:
    first = await backend.open()
    record = await _new_request(first)
    await first.close()
    backend.stores.remove(first)

    second = await backend.open()
    third = await backend.open()
    assert await _versions(second) == list(range(1, LATEST_VERSION + 1))
    assert await third.get_request(record.id) == record


async def test_migrated_schema_matches_the_store_tables(store: Store) -> None:
    def describe(conn: Any) -> dict[str, tuple[set[str], set[str]]]:
        inspector = inspect(conn)
        return {
            table: (
                {column["name"] for column in inspector.get_columns(table)},
                {str(index["name"]) for index in inspector.get_indexes(table)},
            )
            for table in metadata.tables
        }

    async with store.engine.connect() as conn:
        actual = await conn.run_sync(describe)
    expected = {
        name: ({column.name for column in table.columns}, {str(i.name) for i in table.indexes})
        for name, table in metadata.tables.items()
    }
    assert actual == expected


async def test_concurrent_opens_of_a_fresh_database_migrate_once(backend: Backend) -> None:
    # The fixture has created nothing yet: a new SQLite file, a PostgreSQL schema not there.
    stores = await asyncio.gather(*(backend.open() for _ in range(4)))
    for store in stores:
        assert await _versions(store) == list(range(1, LATEST_VERSION + 1))
    record = await _new_request(stores[0])
    assert await stores[3].get_request(record.id) == record


async def test_sqlite_uses_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path / 'x.db'}") as store:
        async with store.engine.connect() as conn:
            journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        assert store.engine.sync_engine.hide_parameters
    assert journal == "wal"
    assert busy is not None and busy >= 1000


async def test_sqlite_transactions_keep_one_connection_until_one_fails(tmp_path: Path) -> None:
    """The store's transactions run one after the other on one connection; one that fails
    hands it back to the pool (which resets it), and the next starts on a fresh one."""
    store = await Store.open(f"sqlite:///{tmp_path / 'x.db'}")
    async with store._begin() as conn:
        first = conn
    async with store._begin() as conn:
        assert conn is first
    with pytest.raises(RuntimeError):
        async with store._begin() as conn:
            await conn.execute(_PROBE_WRITE)
            raise RuntimeError("the caller's own failure")
    assert first.closed
    async with store._begin() as conn:
        assert conn is not first
        left = (await conn.exec_driver_sql("SELECT count(*) FROM gpuops_deliveries")).scalar()
    assert left == 0  # the failed transaction's write was rolled back
    held = conn
    await store.close()
    assert held.closed


_PROBE_WRITE = text("INSERT INTO gpuops_deliveries (key, seen_at) VALUES ('k', '2026-01-01')")


@pytest.mark.parametrize(
    ("given", "driver", "database", "query"),
    [
        ("sqlite:///gpuops.db", "sqlite+aiosqlite", "gpuops.db", {}),
        ("sqlite:///:memory:", "sqlite+aiosqlite", ":memory:", {}),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite", "x.db", {}),
        ("postgresql://u@h:5432/db", "postgresql+asyncpg", "db", {}),
        ("postgres://u@h/db", "postgresql+asyncpg", "db", {}),
        ("postgresql://u@h/db?sslmode=require", "postgresql+asyncpg", "db", {"ssl": "require"}),
    ],
)
def test_database_urls_map_to_async_drivers(
    given: str, driver: str, database: str, query: dict[str, str]
) -> None:
    url = normalize_database_url(given)
    assert (url.drivername, url.database, dict(url.query)) == (driver, database, query)


def _bad_open_arguments() -> Iterator[tuple[str, str | None, str]]:
    yield "mysql://u@h/db", None, "unsupported"
    yield "postgresql+psycopg2://u@h/db", None, "unsupported"
    yield "sqlite:///x.db", "myschema", "only supported on PostgreSQL"
    yield PG_URL, 'bad"name', "invalid schema"


@pytest.mark.parametrize(("url", "schema", "message"), list(_bad_open_arguments()))
async def test_open_rejects_bad_arguments(url: str, schema: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await Store.open(url, schema=schema)


async def test_migration_10_gives_each_request_the_step_that_made_it(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests made by a Workflow Builder step before version 10 know their step after it
    (ending a request looks up steps only for those), the others none."""
    import bot.core.store.migrations as migrations
    from bot.core.store.tables import change_requests, workflow_steps

    v9_requests = Table(
        change_requests.name,
        MetaData(),
        *(c._copy() for c in change_requests.columns if c.name != "step_id"),
    )
    now = datetime.now(UTC)
    row = {
        "created_at": now, "updated_at": now, "state": "succeeded", "provider": "together",
        "project": "together-prod", "cluster_id": "tc-1", "cluster_name": "tc-1",
        "action": "update", "plan": {}, "kinds": [], "needs_approval": False,
        "requester": "U04DAVE", "channel": "C0INCIDENT", "break_glass": False, "version": 1,
    }  # fmt: skip
    with monkeypatch.context() as patched:
        patched.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:9])
        old = await Store.open(database_url)
        async with old.engine.begin() as conn:
            await conn.execute(
                v9_requests.insert(), [{**row, "id": "CR-STEP1"}, {**row, "id": "CR-HAND1"}]
            )
            await conn.execute(
                workflow_steps.insert().values(
                    execution_id="Fx0STEP", requester="U04DAVE", channel="C0INCIDENT",
                    request_id="CR-STEP1", state="running", created_at=now, updated_at=now,
                )
            )  # fmt: skip
        await old.close()
    store = await Store.open(database_url)
    try:
        made, by_hand = await store.get_request("CR-STEP1"), await store.get_request("CR-HAND1")
        assert made is not None and made.step_id == "Fx0STEP"
        assert by_hand is not None and by_hand.step_id == ""
    finally:
        await store.close()


async def test_a_refused_step_is_never_claimed_and_a_claimed_one_never_refused(
    store: Store,
) -> None:
    """A step the store could not claim is recorded as refused before Slack is told: a
    later delivery of it cannot claim it, and a refusal held while another delivery claimed
    it records nothing (that delivery ends it)."""
    from bot.core.lifecycle.builder_steps import claim, refuse
    from bot.core.store.builder_steps import StepOutcome, StepState, StepStore

    steps = StepStore(store)
    refused = await refuse(steps, "Fx0REFUSED", "U1", "C1", {"error": "the store was down"})
    assert refused is not None and refused.state is StepState.COMPLETING
    assert (refused.outcome, refused.payload) == (
        StepOutcome.ERROR,
        {"error": "the store was down"},
    )
    assert await claim(steps, "Fx0REFUSED", "U1", "C1") is False
    assert await refuse(steps, "Fx0REFUSED", "U1", "C1", {"error": "again"}) is None
    assert await claim(steps, "Fx0CLAIMED", "U1", "C1") is True
    assert await refuse(steps, "Fx0CLAIMED", "U1", "C1", {"error": "held"}) is None
    claimed = await steps.get("Fx0CLAIMED")
    assert claimed is not None and claimed.state is StepState.RUNNING and claimed.payload is None
