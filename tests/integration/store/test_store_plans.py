"""Staged plans in the store (SPEC §14), on SQLite and PostgreSQL: a plan stored once, each
move one transaction with its audit entry, a step sent at most once whoever races for it,
a plan paused or aborted sends nothing, and a step lost by either half of a move writes
nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from bot.core.lifecycle import plans as lifecycle
from bot.core.store import Store
from bot.core.store.plans import (
    PlanRecord,
    PlanState,
    PlanStore,
    StagedStepRecord,
    StagedStepState,
    StopCause,
)


@pytest.fixture
async def plans(database_url: str) -> AsyncIterator[PlanStore]:
    opened = await Store.open(database_url)
    yield PlanStore(opened)
    await opened.close()


def _plan(request_id: str = "R-PLAN1", steps: int = 3) -> tuple[PlanRecord, list[StagedStepRecord]]:
    now = datetime.now(UTC)
    plan = PlanRecord(
        request_id=request_id,
        project="together-prod",
        cluster_id="c1",
        requester="U1",
        channel="C1",
        state=PlanState.RUNNING,
        step=1,
        steps=steps,
        cause=None,
        cause_text=None,
        revert_id=None,
        version=1,
        created_at=now,
        updated_at=now,
    )
    rows = [
        StagedStepRecord(
            request_id=request_id,
            idx=i,
            state=StagedStepState.PENDING,
            size_before=64 + 32 * (i - 1),
            size_after=64 + 32 * i,
            inputs={"num_gpus": 64 + 32 * i},
            calls_until=None,
            deadline=None,
            result=None,
            updated_at=now,
        )
        for i in range(1, steps + 1)
    ]
    return plan, rows


async def _events(plans: PlanStore, request_id: str) -> list[str]:
    entries = await plans.store.list_audit(request_id=request_id, limit=100)
    return [e.event for e in reversed(entries)]


async def test_a_plan_is_stored_once_with_its_steps_and_audited(plans: PlanStore) -> None:
    plan, steps = _plan()
    first, second = await asyncio.gather(
        lifecycle.begin(plans, plan, steps, "U1"), lifecycle.begin(plans, plan, steps, "U1")
    )
    assert (first is None) != (second is None)
    assert [s.state for s in await plans.steps(plan.request_id)] == [StagedStepState.PENDING] * 3
    assert await _events(plans, plan.request_id) == ["plan_begin"]


async def test_a_step_is_sent_once_whoever_races_for_it(plans: PlanStore) -> None:
    plan, steps = _plan()
    await lifecycle.begin(plans, plan, steps, "U1")
    send = lifecycle.Move(lifecycle.SEND, "gpuops", idx=1)
    won = await asyncio.gather(*(lifecycle.apply(plans, plan, send) for _ in range(6)))
    assert sum(w is not None for w in won) == 1
    assert (await plans.steps(plan.request_id))[0].state is StagedStepState.SENDING
    assert await _events(plans, plan.request_id) == ["plan_begin", "plan_send"]


async def test_the_steps_walk_to_completion_and_the_plan_follows(plans: PlanStore) -> None:
    plan, steps = _plan(steps=2)
    await lifecycle.begin(plans, plan, steps, "U1")
    for idx in (1, 2):
        for t in (lifecycle.SEND, lifecycle.SENT, lifecycle.STEADY):
            assert await lifecycle.apply(plans, plan, lifecycle.Move(t, "gpuops", idx=idx))
        last = idx == 2
        end = lifecycle.COMPLETE if last else lifecycle.PASS
        moved = await lifecycle.apply(
            plans, plan, lifecycle.Move(end, "gpuops", idx=idx, plan_fields={"step": idx + 1})
        )
        assert moved is not None
    stored = await plans.get(plan.request_id)
    assert stored is not None and stored.state is PlanState.COMPLETED and stored.step == 3
    assert [s.state for s in await plans.steps(plan.request_id)] == [StagedStepState.PASSED] * 2
    events = await _events(plans, plan.request_id)
    assert events.count("plan_send") == 2 and events[-1] == "plan_complete"


async def test_paused_or_aborted_sends_nothing(plans: PlanStore) -> None:
    plan, steps = _plan()
    await lifecycle.begin(plans, plan, steps, "U1")
    assert await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.PAUSE, "U1"))
    assert (
        await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.SEND, "gpuops", idx=1)) is None
    )
    assert await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.ABORT, "U1"))
    assert await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.RESUME, "U1")) is None
    assert (
        await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.SEND, "gpuops", idx=1)) is None
    )
    assert (await plans.steps(plan.request_id))[0].state is StagedStepState.PENDING


async def test_a_move_whose_step_had_moved_writes_nothing(plans: PlanStore) -> None:
    plan, steps = _plan()
    await lifecycle.begin(plans, plan, steps, "U1")
    # The plan is running at step 1, but the step is still pending: ``sent`` loses, and the
    # plan's half (its version) is rolled back with it.
    before = await plans.get(plan.request_id)
    assert (
        await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.SENT, "gpuops", idx=1)) is None
    )
    after = await plans.get(plan.request_id)
    assert before is not None and after is not None and after.version == before.version
    assert await _events(plans, plan.request_id) == ["plan_begin"]


async def test_a_stop_records_its_cause_and_resume_takes_it_up(plans: PlanStore) -> None:
    plan, steps = _plan()
    await lifecycle.begin(plans, plan, steps, "U1")
    for t in (lifecycle.SEND, lifecycle.SEND_FAILED):
        await lifecycle.apply(plans, plan, lifecycle.Move(t, "gpuops", idx=1))
    fields = lifecycle.stopped_fields(StopCause.FAILED, "Together refused it")
    moved = await lifecycle.apply(
        plans, plan, lifecycle.Move(lifecycle.STOP, "gpuops", plan_fields=fields)
    )
    assert moved is not None and moved[0].cause is StopCause.FAILED
    assert moved[0].cause_text == "Together refused it"
    assert await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.RESUME, "U1"))
    retried = await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.RETRY, "U1", idx=1))
    assert retried is not None and retried[1] is not None
    assert retried[1].state is StagedStepState.PENDING
    listed = await plans.in_states(frozenset({PlanState.RUNNING}))
    assert [p.request_id for p in listed] == [plan.request_id]
