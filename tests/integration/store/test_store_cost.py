"""What one change costs the database: SQL statements and transactions per Together scale-up
(no approval) and per E2E request + approve, counted on the engine while the real workflow
runs it over HTTP, on both backends; and each transition is one transaction with its audit
entry (the start with its lease and lock, the finish freeing them).

Measured before the lifecycle table (SQLite / PostgreSQL): scale-up 25 / 22 statements in
19 / 19 transactions; request + approve 33 / 29 in 25 / 25. With the lifecycle table: 20 / 17
in 6; with the database hashing the audit entry and no step look-up: 16 / 13 in 5. Now a
transition is one statement on SQLite (its triggers write the lease, the lock and the audit
entry: migration 11), and a steady result's summary ts is not stored (only a follow-up
edits it): 5 / 12 in 4; request + approve 13 / 19 in 10. Now every transition is one
statement on PostgreSQL too (a data-modifying WITH chain: lease, lock, request row, then
the audit chain head), and an approval one on SQLite (the row's trigger appends): scale-up
5 / 5 in 4 / 4, within the issue's bench target (6 statements, 4 transactions); request +
approve 11 / 11 in 10 / 10.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection

from bot.core.requests.execution import Execution
from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from tests.conftest import StackFactory
from tests.support.workflow_kit import BOB, DAVE, click, request, wait_mirror

SCALE_UP = "update together-prod tc-h200-ondemand num_gpus=16"  # needs no approval
E2E_SCALE = "action e2e-delhi 101 scale_cluster additional_nodes=2"  # needs one approval


@dataclass
class Counted:
    """The statements (transaction control left out) and transactions an engine ran, and
    each transaction's statements."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0
    groups: list[list[str]] = field(default_factory=list)

    def shown(self) -> str:
        return "\n".join(s.split("\n", 1)[0][:120] for s in self.statements)

    def writing(self, table: str) -> list[list[str]]:
        """The transactions that wrote ``table``."""
        return [g for g in self.groups if any(_writes(s, table) for s in g)]


def _writes(statement: str, table: str) -> bool:
    text = " ".join(statement.split())
    return any(
        f"{verb} {table} " in text or f"{verb} {table}\n" in text
        for verb in ("INSERT INTO", "UPDATE", "DELETE FROM")
    ) or (text.startswith("WITH appended AS") and table == "gpuops_audit")


# (statements, transactions) at most, per backend
SCALE_UP_COST = {"sqlite": (5, 4), "postgresql": (5, 4)}
REQUEST_AND_APPROVE_COST = {"sqlite": (11, 10), "postgresql": (11, 10)}


def assert_each_transition_one_transaction(counted: Counted, dialect: str) -> None:
    """Every audit entry was written in the transaction of a request's state change (or
    its opening), and the start took lease, lock and state together. On SQLite the
    lifecycle's triggers write the lease and the lock within the request's own statement,
    so no statement of the store's writes either; on PostgreSQL the request's statement
    writes them (a WITH chain)."""
    for group in counted.writing("gpuops_audit"):
        assert any(_writes(s, "gpuops_change_requests") for s in group), group
    if dialect == "sqlite":
        for table in ("gpuops_leases", "gpuops_cluster_locks"):
            assert counted.writing(table) == [], counted.shown()
        return
    # Each transition one statement: the audit entry in the request row's own statement,
    # the start's lease and lock too.
    for statement in counted.statements:
        if _writes(statement, "gpuops_audit"):
            assert _writes(statement, "gpuops_change_requests"), statement
    assert any(
        _writes_all([s], "gpuops_leases", "gpuops_cluster_locks", "gpuops_change_requests")
        for s in counted.statements
    ), counted.shown()


def _writes_all(group: list[str], *tables: str) -> bool:
    return all(any(_writes(s, t) for s in group) for t in tables)


@contextmanager
def counting(stack: LocalStack) -> Iterator[Counted]:
    engine = stack.runtime.store.engine.sync_engine
    counted = Counted()

    def on_statement(_c: Connection, _cur: Any, statement: str, *_rest: Any) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):  # SQLite's own BEGIN hook
            counted.statements.append(statement)
            if counted.groups:
                counted.groups[-1].append(statement)

    def on_begin(_conn: Connection) -> None:
        counted.transactions += 1
        counted.groups.append([])

    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine, "begin", on_begin)
    try:
        yield counted
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
        event.remove(engine, "begin", on_begin)


@contextmanager
def executions_ended(stack: LocalStack) -> Iterator[asyncio.Event]:
    """An event set once an execution has returned (its lock and lease freed)."""
    execution: Execution = stack.runtime.workflow.execution
    ended = asyncio.Event()
    real = execution.execute

    async def execute(request_id: str, **kwargs: Any) -> Any:
        try:
            return await real(request_id, **kwargs)
        finally:
            ended.set()

    execution.execute = execute  # type: ignore[method-assign]
    try:
        yield ended
    finally:
        execution.execute = real  # type: ignore[method-assign]


async def quiet_stack(database_url: str, make_stack: StackFactory) -> LocalStack:
    """A stack without its background rounds (sweeper, scheduler): only the change's SQL."""
    return await make_stack(database_url=database_url, start_background=False)


async def test_a_scale_up_without_approval_costs_its_bound_with_each_transition_one_transaction(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await quiet_stack(database_url, make_stack)
    with executions_ended(stack) as ended, counting(stack) as counted:
        opened = await request(stack, DAVE, SCALE_UP, approval=False)
        await ended.wait()
        await stack.runtime.workflow.drain()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is RequestState.SUCCEEDED
    # steady: the summary is never edited again, so its ts is not stored
    assert record.summary_ts is None and record.root_ts is not None
    dialect = stack.runtime.store.engine.dialect.name
    statements, transactions = SCALE_UP_COST[dialect]
    assert len(counted.statements) <= statements, counted.shown()
    assert counted.transactions <= transactions, counted.shown()
    assert_each_transition_one_transaction(counted, dialect)
    if dialect == "sqlite":  # the audit entries too, by the triggers
        assert counted.writing("gpuops_audit") == [], counted.shown()
    await assert_trail_and_nothing_held(stack, record.id, 3)


async def test_an_e2e_request_and_its_approval_cost_their_bound(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await quiet_stack(database_url, make_stack)
    with executions_ended(stack) as ended, counting(stack) as counted:
        opened = await request(stack, DAVE, E2E_SCALE)
        await click(stack, opened, BOB)
        await wait_mirror(stack, opened, "Change done")
        await ended.wait()
        await stack.runtime.workflow.drain()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is RequestState.SUCCEEDED
    dialect = stack.runtime.store.engine.dialect.name
    statements, transactions = REQUEST_AND_APPROVE_COST[dialect]
    assert len(counted.statements) <= statements, counted.shown()
    assert counted.transactions <= transactions, counted.shown()
    assert_each_transition_one_transaction(counted, dialect)
    await assert_trail_and_nothing_held(stack, record.id, 4)


async def assert_trail_and_nothing_held(stack: LocalStack, request_id: str, entries: int) -> None:
    """What the transitions wrote, however many statements they took: one audit entry
    each, the chain intact, the cluster free and the execution lease released."""
    store = stack.runtime.store
    record = await store.get_request(request_id)
    assert record is not None
    trail = await store.list_audit(request_id=request_id)
    assert len(trail) == entries, trail
    _, broken = await store.verify_audit()
    assert broken is None, broken
    assert await store.cluster_holder(record.provider, record.project, record.cluster_id) is None
    assert await store.get_lease(f"exec:{request_id}") is None


async def test_the_requests_open_on_a_cluster_are_found_by_index(tmp_path: Any) -> None:
    """Opening a request asks for the others open on its cluster: with thousands of ended
    requests in the project that must be an index look-up, not a scan of the project."""
    from bot.core.store import RequestState, Store
    from bot.core.store.requests.statements import beside_statement, state_values

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'plan.db'}")
    try:
        open_states = state_values(
            [RequestState.PENDING, RequestState.APPROVED, RequestState.EXECUTING]
        )
        statement = beside_statement(open_states)
        # Only what the opening tells of them: not each row's plan and approvals.
        assert [c.name for c in statement.selected_columns] == ["id", "state"]
        bound = statement.params(project="together-prod", cluster="tc-1")
        sql = bound.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True})
        async with store.engine.connect() as conn:
            plan = (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")).all()
        details = " ".join(str(row[-1]) for row in plan)
        assert "ix_gpuops_change_requests_cluster" in details, details
    finally:
        await store.close()
