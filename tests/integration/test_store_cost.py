"""What one change costs the database: SQL statements and transactions per Together scale-up
(no approval) and per E2E request + approve, counted on the engine while the real workflow
runs it over HTTP, on both backends."""

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
    """The statements (transaction control left out) and transactions an engine ran."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0

    def shown(self) -> str:
        return "\n".join(s.split("\n", 1)[0][:120] for s in self.statements)


@contextmanager
def counting(stack: LocalStack) -> Iterator[Counted]:
    engine = stack.runtime.store.engine.sync_engine
    counted = Counted()

    def on_statement(_c: Connection, _cur: Any, statement: str, *_rest: Any) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):  # SQLite's own BEGIN hook
            counted.statements.append(statement)

    def on_begin(_conn: Connection) -> None:
        counted.transactions += 1

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


async def test_a_scale_up_without_approval_costs_six_statements_in_four_transactions(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await quiet_stack(database_url, make_stack)
    with executions_ended(stack) as ended, counting(stack) as counted:
        opened = await request(stack, DAVE, SCALE_UP, approval=False)
        await ended.wait()
        await stack.runtime.workflow.drain()
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is RequestState.SUCCEEDED
    assert record.summary_ts is not None and record.root_ts is not None
    assert len(counted.statements) <= 6, counted.shown()
    assert counted.transactions <= 4, counted.shown()


async def test_an_e2e_request_and_its_approval_cost_few_statements(
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
    assert len(counted.statements) <= 10, counted.shown()
    assert counted.transactions <= 7, counted.shown()
