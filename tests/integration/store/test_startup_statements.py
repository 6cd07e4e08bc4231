"""Start-up does not grow with history (issue #34): what ``gpuops serve`` asks of its store
before it is ready and in its background work's first rounds (the store's opening and
migration check, recovery, the pending gauge, a sweeper round, a scheduler tick, the
Workflow Builder steps left open) runs the same statements on a store with one request as
on one with hundreds more and a year of finished steps, and each read of a table that grows
with history (requests, audit trail, steps) walks an index, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from bench.scale_preload import preload, read_template
from bot.core.store import Store
from bot.core.store.builder_steps import StepState, StepStore
from bot.core.store.tables import workflow_steps
from tests.integration.store.test_query_plans import _postgres_problems, _sqlite_problems
from tests.support.core_harness import DAVE, core_harness

HISTORY = 300  # requests, 3 audit entries each
STEPS = 300  # Workflow Builder steps, completed
GROWING = ("gpuops_change_requests", "gpuops_audit", "gpuops_workflow_steps")
Captured = list[tuple[str, Any]]


@contextmanager
def every_statement() -> Iterator[Captured]:
    """The statements every engine ran meanwhile (the store's opening included)."""
    captured: Captured = []

    def record(_conn: Connection, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        captured.append((" ".join(statement.split()), params))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield captured
    finally:
        event.remove(Engine, "before_cursor_execute", record)


async def start_up(database_url: str, workdir: Path) -> Captured:
    """What start-up runs on the store (bot/runtime.py ``start_background`` and the first
    round of each background loop that reads history)."""
    workdir.mkdir()
    with every_statement() as captured:
        async with core_harness(workdir, database_url=database_url) as core:
            await core.workflow.recover_interrupted()
            await core.workflow.refresh_pending_gauge()
            await core.workflow.sweep_once()
            await core.workflow.scheduler.run_due()
            await StepStore(core.store).unfinished()  # the steps completer's reconcile
    return captured


async def _finished_steps(store: Store, count: int, now: datetime) -> None:
    """``count`` Workflow Builder steps completed over the year before ``now``."""
    rows: list[dict[str, Any]] = [
        {
            "execution_id": f"Fx{n:08d}",
            "requester": DAVE,
            "channel": "C0HISTORY",
            "request_id": None,
            "state": StepState.COMPLETED.value,
            "outcome": "success",
            "payload": {},
            "created_at": now - timedelta(days=365) + timedelta(hours=n),
            "updated_at": now - timedelta(days=365) + timedelta(hours=n, minutes=5),
        }
        for n in range(count)
    ]
    async with store._engine.begin() as conn:
        await conn.execute(workflow_steps.insert(), rows)


async def test_start_up_runs_the_same_indexed_statements_whatever_the_history(
    database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "made").mkdir()
    (tmp_path / "plans").mkdir()
    async with core_harness(tmp_path / "made", database_url=database_url) as core:
        await core.answer(DAVE, "update together-prod tc-h200-ondemand num_gpus=16 reason=x")
        [made] = [e.request_id for e in await core.store.list_audit(limit=5) if e.request_id][:1]
        template = await read_template(core.store, made)
    one_request = await start_up(database_url, tmp_path / "one")

    store = await Store.open(database_url)
    try:
        await preload(store, template, HISTORY, core.clock())
        await _finished_steps(store, STEPS, core.clock())
    finally:
        await store.close()
    with_history = await start_up(database_url, tmp_path / "history")

    assert [s for s, _ in with_history] == [s for s, _ in one_request]
    checked = 0
    async with core_harness(tmp_path / "plans", database_url=database_url) as core:
        for statement, params in with_history:
            if not statement.upper().startswith("SELECT"):
                continue
            if not any(f"FROM {table}" in statement for table in GROWING):
                continue
            if core.store._engine.dialect.name == "postgresql":
                # Given the statistics of a store with history (ANALYZE), PostgreSQL may sort
                # the few rows of a rare state (``executing``) rather than walk the (state,
                # created_at, id) index: it reads that state's rows only, never the table.
                problems = await _postgres_problems(core.store, statement, params)
                problems = [p for p in problems if p not in _SORTS]
            else:
                problems = await _sqlite_problems(core.store, statement, params)
            if "FROM gpuops_workflow_steps" in statement:  # only the open steps are sorted
                problems = [p for p in problems if p not in _SORTS]
            assert not problems, f"{statement}\n{problems}"
            checked += 1
    assert checked >= 5, with_history


_SORTS = {"Sort", "Incremental Sort", "USE TEMP B-TREE FOR ORDER BY"}
