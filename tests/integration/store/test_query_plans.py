"""The plans of the reads issue 34 named slow, on both backends: each is served by an index
that matches its filter and walks in its ORDER BY (no temp B-tree, no Sort node, no scan of
the whole table), so a page costs the same with a year of history as with a day.

Each store call runs for real; its statements are captured on the engine and explained with
the same parameters (SQLite: EXPLAIN QUERY PLAN; PostgreSQL: EXPLAIN (FORMAT JSON) with
sequential scans off, so the plan shows which index the planner can use and whether it
still sorts)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection

from bot.core.home import HomeBuilder
from bot.core.store import RequestState, Store
from bot.core.store.home_queries import (
    FINISHED_STATES,
    OPEN_STATES,
    pending_approvals,
    requests_of,
)
from tests.support.core_harness import Core, core_harness

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DAVE, ALICE = "U04DAVE", "U01ALICE"
SCALED = "tc-h200-ondemand"
Captured = list[tuple[str, Any]]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


async def _statements(store: Store, call: Callable[[], Awaitable[object]]) -> Captured:
    """The statements (and their parameters) ``call`` ran on the store's engine."""
    captured: Captured = []

    def record(conn: Connection, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            captured.append((statement, params))

    engine = store._engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        await call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert captured, "the call ran no SELECT"
    return captured


async def _sqlite_problems(store: Store, statement: str, params: Any) -> list[str]:
    async with store._engine.connect() as conn:
        rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)).all()
    details = [str(row[-1]) for row in rows]
    problems = [d for d in details if "TEMP B-TREE" in d]
    # A table read without an index (a subquery's own rows, SCAN anon_1, are no table).
    tables = [d for d in details if d.startswith(("SCAN gpuops_", "SEARCH gpuops_"))]
    problems += [d for d in tables if "INDEX" not in d]
    if not any("INDEX" in d for d in details):
        problems.append(f"no index used: {details}")
    return problems


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def _postgres_problems(store: Store, statement: str, params: Any) -> list[str]:
    async with store._engine.connect() as conn:
        await conn.exec_driver_sql("SET enable_seqscan = off")
        # On a near-empty table a bitmap scan and a sort is cheapest whatever the indexes;
        # without it the planner shows whether an index can hand the rows over in order.
        await conn.exec_driver_sql("SET enable_bitmapscan = off")
        explained = await conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params)
        plan = explained.scalar_one()[0]["Plan"]
    kinds = [node["Node Type"] for node in _nodes(plan)]
    problems = [kind for kind in kinds if kind in {"Seq Scan", "Sort", "Incremental Sort"}]
    if not any("Index" in kind for kind in kinds):
        problems.append(f"no index used: {kinds}")
    return problems


async def _assert_indexed(store: Store, call: Callable[[], Awaitable[object]]) -> None:
    for statement, params in await _statements(store, call):
        if store._engine.dialect.name == "postgresql":
            problems = await _postgres_problems(store, statement, params)
        else:
            problems = await _sqlite_problems(store, statement, params)
        assert not problems, f"{statement}\n{problems}"


async def test_channel_timeline_walks_the_project_time_index(store: Store) -> None:
    await _assert_indexed(
        store,
        lambda: store.channel_events(
            channel="C1",
            projects=["together-prod"],
            notify_projects=["together-prod"],
            since=NOW - timedelta(days=7),
            until=NOW,
            after=(NOW - timedelta(days=1), 7),
        ),
    )


async def test_a_notify_timeline_of_several_projects_walks_each_projects_index(
    store: Store,
) -> None:
    """One statement per project, each in index order up to the page: an IN of projects
    would read and sort the whole window of every project for every page."""
    call = lambda: store.channel_events(  # noqa: E731
        channel="C1",
        projects=["together-prod", "e2e-delhi"],
        notify_projects=["together-prod", "e2e-delhi"],
        since=NOW - timedelta(days=7),
        until=NOW,
        after=(NOW - timedelta(days=1), 7),
    )
    assert len(await _statements(store, call)) == 2
    await _assert_indexed(store, call)


async def test_a_timelines_count_of_what_it_left_out_is_bounded_and_indexed(
    store: Store,
) -> None:
    for notify in (["together-prod"], []):
        call = lambda notify=notify: store.count_channel_events(  # noqa: E731
            channel="C1",
            projects=["together-prod"],
            notify_projects=notify,
            since=NOW - timedelta(days=7),
            until=NOW,
            after=(NOW - timedelta(days=1), 7),
            up_to=10_001,
        )
        statements = await _statements(store, call)
        assert all("LIMIT" in statement.upper() for statement, _ in statements)
        await _assert_indexed(store, call)


async def test_home_requests_of_a_person_by_requester_index(store: Store) -> None:
    await _assert_indexed(store, lambda: requests_of(store, "U1", FINISHED_STATES, 10))


async def test_home_open_requests_of_a_person_by_the_state_index(store: Store) -> None:
    """Not by the requester: that would walk the person's whole history to find none."""
    statements = await _statements(store, lambda: requests_of(store, "U1", OPEN_STATES, 10))
    assert len(statements) == 1
    await _assert_indexed(store, lambda: requests_of(store, "U1", OPEN_STATES, 10))
    assert "ix_gpuops_change_requests_requester" not in await _plan_text(store, *statements[0])


async def _plan_text(store: Store, statement: str, params: Any) -> str:
    async with store._engine.connect() as conn:
        if store._engine.dialect.name == "postgresql":
            plan = await conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params)
            return str(plan.scalar_one())
        rows = await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
        return " ".join(str(row[-1]) for row in rows.all())


async def test_home_pending_approvals_in_age_order(store: Store) -> None:
    await _assert_indexed(store, lambda: pending_approvals(store, ["p1", "p2"], 10))


async def test_audit_count_is_bounded_and_indexed(store: Store) -> None:
    statements = await _statements(store, lambda: store.count_audit(project="p1", up_to=501))
    assert any("LIMIT" in statement.upper() for statement, _ in statements)
    await _assert_indexed(store, lambda: store.count_audit(project="p1", up_to=501))


async def test_pending_gauge_counts_on_the_state_index(store: Store) -> None:
    statements = await _statements(store, lambda: store.count_requests({RequestState.PENDING}))
    assert all("count(" in statement.lower() for statement, _ in statements)
    await _assert_indexed(store, lambda: store.count_requests({RequestState.PENDING}))


async def test_scheduler_due_walks_run_at(store: Store) -> None:
    await _assert_indexed(store, lambda: store.list_due(NOW))


async def test_scheduled_of_a_person_walks_requester_run_at(store: Store) -> None:
    await _assert_indexed(store, lambda: store.list_scheduled("U1"))


async def test_audit_count_stops_at_its_bound(store: Store) -> None:
    for i in range(4):
        await store.append_audit(actor="U1", event="requested", project="p1", request_id=f"CR-{i}")
    assert await store.count_audit(project="p1", up_to=3) == 3
    assert await store.count_audit(project="p1", up_to=10) == 4
    assert await store.count_audit(project="p1") == 4


# Every statement of the paths bench-scale measures (bench/scale.py), run for real through
# the composed core: none scans a table or sorts what an index already orders.


@pytest.fixture
async def core(database_url: str, tmp_path: Path) -> AsyncIterator[Core]:
    async with core_harness(tmp_path, database_url=database_url) as harness:
        await harness.answer(DAVE, f"update together-prod {SCALED} num_gpus=16 reason=plans")
        yield harness


async def test_every_statement_of_a_sweeper_round_is_indexed(core: Core) -> None:
    await _assert_indexed(core.store, core.workflow.sweep_once)


async def test_every_statement_of_a_scheduler_tick_is_indexed(core: Core) -> None:
    await _assert_indexed(core.store, core.workflow.scheduler.run_due)


async def test_every_statement_of_the_audit_command_is_indexed(core: Core) -> None:
    await _assert_indexed(core.store, lambda: core.command(ALICE, "audit together-prod"))
    await _assert_indexed(core.store, lambda: core.command(ALICE, "audit"))


async def test_every_statement_of_a_home_build_is_indexed(core: Core) -> None:
    builder = HomeBuilder(core.access.authorizer, core.store, core.access.adapter_for)
    await _assert_indexed(core.store, lambda: builder.build(DAVE))
    await _assert_indexed(core.store, lambda: builder.build(ALICE))


async def test_quiet_channel_timeline_starts_from_the_channels_requests(store: Store) -> None:
    """A channel that is no project's notify channel reads the requests made there (the
    channel index), then their entries: only the channel's own events are sorted, never
    the projects' trail."""
    call = lambda: store.channel_events(  # noqa: E731
        channel="C1",
        projects=["together-prod", "e2e-delhi"],
        notify_projects=[],
        since=NOW - timedelta(days=7),
        until=NOW,
    )
    for statement, params in await _statements(store, call):
        if store._engine.dialect.name == "postgresql":
            problems = await _postgres_problems(store, statement, params)
            problems = [p for p in problems if p not in {"Sort", "Incremental Sort"}]
        else:
            problems = await _sqlite_problems(store, statement, params)
            problems = [p for p in problems if p != "USE TEMP B-TREE FOR ORDER BY"]
        assert not problems, f"{statement}\n{problems}"
        assert "gpuops_change_requests.channel" in statement
