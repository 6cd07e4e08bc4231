"""A Workflow Builder step is all or nothing (issue #32): refused steps are recorded as
refused, so Slack's redelivery of the same execution never runs the change; every step ends
with exactly one completion, bad inputs and an unknown channel included; its texts are the
plain text Slack shows; its token is kept nowhere. End to end over real HTTP, on SQLite and
PostgreSQL, the outage being the store refusing every transaction (``StoreOutage``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.core.store import RequestState
from bot.core.store.builder_steps import StepOutcome, StepState
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.conftest import StackFactory
from tests.support.reliability import StoreOutage, settle
from tests.support.step_kit import (
    GROW_H200,
    SCALE_101,
    STEP,
    completion_calls,
    ended,
    every_stored_row,
    inputs,
    opened_by_step,
    run_step,
    stored_steps,
)
from tests.support.workflow_kit import BOB, CHANNEL, click, poll_until, wait_state

S = RequestState
UNTIL_THE_STORE_IS_BACK = 30.0  # the held end is written with backoff once it answers


def puts(stack: LocalStack) -> int:
    return len(stack.together.calls(method="PUT")) + len(stack.e2e.calls("action", "PUT"))


async def ended_once_with_error(stack: LocalStack, execution_id: str) -> str:
    """The one completion the step got (an error), as the store recorded it: its text
    (written as the core wrote it; Slack got it as plain text)."""

    async def row() -> dict[str, Any] | None:
        rows = [r for r in await stored_steps(stack) if r["execution_id"] == execution_id]
        return rows[0] if rows and rows[0]["state"] == StepState.COMPLETED else None

    await poll_until(row)  # Slack was told; "completed" is written right after
    assert completion_calls(stack) == [("functions.completeError", None)]
    done = await row()
    assert done is not None and done["outcome"] == StepOutcome.ERROR
    payload = done["payload"]  # SQLite's JSON is read back as text here
    return str((json.loads(payload) if isinstance(payload, str) else payload)["error"])


# ---- a refused step is recorded as refused; its redelivery never runs it ------------------


async def test_a_step_refused_while_the_store_is_down_is_recorded_and_never_runs(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store is down when the step arrives: nothing is claimed or sent. Slack is told
    so only once the refusal is recorded, and the same execution delivered again later
    finds it and makes no change (it made one before, and its completion was refused)."""
    stack = await make_stack(database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    outage.start()
    run = await run_step(stack, inputs(*GROW_H200))
    await settle(stack)
    assert run.state == "running" and completion_calls(stack) == []  # nothing recorded yet
    outage.end()
    done = await ended(stack, run, within=UNTIL_THE_STORE_IS_BACK)
    assert done.state == "failed" and done.error is not None
    assert done.error.startswith("gpuops could not reach its state store when this step"), done
    assert "nothing was changed" in done.error, done.error

    _, again = await stack.sender.function_executed(STEP, {}, run=run)  # Slack's redelivery
    assert again.ok
    await settle(stack)
    assert puts(stack) == 0 and await stack.runtime.store.list_requests() == []
    assert await ended_once_with_error(stack, run.execution_id) == run.error


async def test_a_step_redelivered_while_its_refusal_waits_for_the_store_is_refused_once(
    database_url: str, make_stack: StackFactory
) -> None:
    """Delivered twice during the outage: one refusal, one completion, no change."""
    stack = await make_stack(database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    outage.start()
    run = await run_step(stack, inputs(*GROW_H200))
    _, again = await stack.sender.function_executed(STEP, {}, run=run)
    assert again.ok
    await settle(stack)
    outage.end()
    await ended(stack, run, within=UNTIL_THE_STORE_IS_BACK)
    await settle(stack)
    assert puts(stack) == 0 and await stack.runtime.store.list_requests() == []
    assert await ended_once_with_error(stack, run.execution_id) == run.error


async def test_a_step_cut_off_after_its_claim_ends_once_when_the_store_is_back(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store goes right after the step is claimed: its request cannot be made. The step
    ends once (recorded, then told), and reconcile, long after, sends nothing more."""
    stack = await make_stack(database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    outage.start_after("INSERT INTO gpuops_workflow_steps")
    run = await run_step(stack, inputs(*GROW_H200))
    await settle(stack)
    assert outage.down and completion_calls(stack) == []
    outage.end()
    await ended(stack, run, within=UNTIL_THE_STORE_IS_BACK)
    assert run.error is not None and "nothing was changed" in run.error, run.error
    assert run.error.startswith("gpuops lost contact with its state store before"), run.error
    completer = stack.runtime.steps.completer
    completer.clock = lambda: datetime.now(UTC) + timedelta(minutes=11)
    assert await completer.reconcile() == 0
    assert puts(stack) == 0 and await stack.runtime.store.list_requests() == []
    assert await ended_once_with_error(stack, run.execution_id) == run.error


# ---- every step ends: bad inputs, an unknown channel ---------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [("cluster_id", 101), ("change", ["scale_cluster", "additional_nodes=2"])],
    ids=["a-number", "a-list"],
)
async def test_a_step_whose_input_is_not_text_ends_with_an_error(
    database_url: str, make_stack: StackFactory, name: str, value: Any
) -> None:
    stack = await make_stack(database_url=database_url)
    run = await run_step(stack, {**inputs(*SCALE_101), name: value})
    await ended(stack, run)
    assert run.state == "failed" and run.error is not None
    assert f"The step's input `{name}` is not text" in run.error, run.error
    assert puts(stack) == 0 and await stack.runtime.store.list_requests() == []
    assert await ended_once_with_error(stack, run.execution_id) == run.error


@pytest.mark.parametrize("change", [GROW_H200, SCALE_101], ids=["at-once", "approval"])
async def test_a_step_naming_an_unknown_channel_ends_with_an_error(
    database_url: str, make_stack: StackFactory, change: tuple[str, str, str]
) -> None:
    """The request cannot be shown in the step's channel: withdrawn, and the step fails
    with what the person would have been told (never a success with "cancelled")."""
    stack = await make_stack(database_url=database_url)
    run = await run_step(stack, inputs(*change, channel="C0NOWHERE"))
    await ended(stack, run)
    assert run.state == "failed" and run.error is not None, run.outputs
    assert run.error.startswith("I can't see #C0NOWHERE"), run.error  # plain text
    assert "Nothing was changed" in run.error and "withdrawn" in run.error, run.error
    [record] = await stack.runtime.store.list_requests()
    assert record.state is S.CANCELLED and record.step_id == run.execution_id
    assert puts(stack) == 0
    await settle(stack)
    told = await ended_once_with_error(stack, run.execution_id)
    assert told.startswith("I can't see <#C0NOWHERE>") and told.endswith("withdrawn)."), told


# ---- the step's texts are plain text -------------------------------------------------------


async def test_a_step_error_is_plain_text(database_url: str, make_stack: StackFactory) -> None:
    stack = await make_stack(database_url=database_url)
    run = await run_step(stack, inputs(GROW_H200[0], GROW_H200[1], "num_gpus=<16>"))
    await ended(stack, run)
    assert run.error is not None and "<16>" in run.error, run.error
    assert "&lt;" not in run.error and "&gt;" not in run.error


async def test_a_step_summary_is_plain_text(database_url: str, make_stack: StackFactory) -> None:
    stack = await make_stack(database_url=database_url)
    stack.together.faults.add(
        Fault(route="update", kind=FaultKind.SERVER_ERROR, status=400, message="quota <H200> & co")
    )
    run = await run_step(stack, inputs(*GROW_H200))
    await ended(stack, run)
    assert run.outputs is not None and run.outputs["state"] == "failed", run.outputs
    assert "quota <H200> & co" in run.outputs["summary"], run.outputs["summary"]


# ---- no secret at rest ---------------------------------------------------------------------


async def test_no_stored_row_holds_the_step_token(
    database_url: str, make_stack: StackFactory
) -> None:
    """While the step waits for its approval, and after it ended, no row of any table in
    the database holds the step's token (SPEC §1.3)."""
    stack = await make_stack(database_url=database_url)
    run = await run_step(stack, inputs(*SCALE_101))
    opened = await opened_by_step(stack)
    waiting = await every_stored_row(stack)
    assert run.execution_id in waiting and opened.id in waiting  # the rows are there
    assert run.token not in waiting and "xwfp-" not in waiting
    await click(stack, opened, BOB)
    await ended(stack, run)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    await settle(stack)
    after = await every_stored_row(stack)
    assert run.token not in after and "xwfp-" not in after
    assert run.outputs is not None and run.outputs["request_id"] == opened.id
    assert CHANNEL in after
