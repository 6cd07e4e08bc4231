"""The Workflow Builder step ``request_gpu_change`` end to end (SPEC §11), over real HTTP
and Socket Mode: the stand-in runs the step (``function_executed`` with its own token), the
request is made as a command would make it, and the step ends once with
``functions.completeSuccess`` (final state) or ``functions.completeError`` (refusal), sent
with the bot token (no step token is kept) — after an approval, a redelivery, a second
replica, a restart or an expiry."""

from __future__ import annotations

import asyncio
import html
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from bot.core.ask.change import ChangeAsk
from bot.core.lifecycle.builder_steps import claim
from bot.core.store import RequestState as S
from bot.core.store import StepTaken
from bot.core.store.builder_steps import StepState
from bot.local.demo.stack import LocalStack
from tests.conftest import StackFactory
from tests.support.slack_support import refusals, roots
from tests.support.step_kit import (
    GROW_H200,
    SCALE_101,
    STEP,
    completions,
    ended,
    inputs,
    opened_by_step,
    run_step,
    stored_steps,
)
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    ERIN,
    audit_trail,
    click,
    deny,
    events,
    readable_text,
    request,
    wait_state,
)


@pytest.fixture(params=["http", "socket"])
async def any_stack(request: pytest.FixtureRequest, make_stack: StackFactory) -> LocalStack:
    """The demo stack on SQLite, its Slack requests over signed HTTP or Socket Mode."""
    stack = await make_stack()
    if request.param == "socket":
        await stack.use_socket_mode()
    return stack


async def test_a_step_waits_for_approval_and_ends_with_the_outputs(any_stack: LocalStack) -> None:
    stack = any_stack
    run = await run_step(stack, inputs(*SCALE_101, reason="capacity form"))
    opened = await opened_by_step(stack)
    root = stack.slack.message(CHANNEL, opened.root_ts)
    assert root is not None and root.text.startswith("[pending approval]")
    assert "scale_cluster: 2 → 4 nodes" in root.text and "<@U04DAVE>" in readable_text(root)
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and (record.requester, record.channel) == (DAVE, CHANNEL)
    assert record.reason == "capacity form" and record.state is S.PENDING
    assert run.state == "running" and completions(stack) == []

    await click(stack, opened, BOB)
    done = await ended(stack, run)
    assert done.state == "completed" and done.completed_with == "bot_token"
    assert done.outputs is not None
    assert (done.outputs["request_id"], done.outputs["state"]) == (opened.id, "succeeded")
    assert done.outputs["summary"].startswith(f"{opened.id} done: scale_cluster: 2 → 4 nodes")
    assert "e2e-delhi" in done.outputs["summary"]
    assert [c.body for c in stack.e2e.calls("action", "PUT")] == [
        {"action": "scale_cluster", "additional_nodes": 2}
    ]
    assert completions(stack) == ["functions.completeSuccess"]


async def test_a_step_whose_request_runs_at_once_ends_when_it_is_done(
    stack: LocalStack,
) -> None:
    run = await run_step(stack, inputs(*GROW_H200))
    await ended(stack, run)
    assert run.outputs is not None and run.outputs["state"] == "succeeded"
    record = await stack.runtime.store.get_request(run.outputs["request_id"])
    assert record is not None and record.state is S.SUCCEEDED and record.requester == DAVE
    assert [c.body for c in stack.together.calls(method="PUT")] == [{"num_gpus": 16}]
    assert events(await audit_trail(stack.runtime.store, record.id)) == [
        "requested",
        "executing",
        "result",
    ]


async def test_a_refusal_ends_the_step_with_what_a_person_would_read(
    any_stack: LocalStack,
) -> None:
    stack = any_stack
    run = await run_step(stack, inputs("e2e-delhi", "103", "restart_cluster", requester=ERIN))
    await ended(stack, run)
    assert run.state == "failed" and run.completed_with == "bot_token"
    assert run.error is not None and "needs operator" in run.error
    typed = await request_refusal(stack, "action e2e-delhi 103 restart_cluster")
    assert run.error == html.unescape(typed)  # the same words, as plain text
    assert roots(stack, CHANNEL) == [] and stack.e2e.calls("action", "PUT") == []
    assert len(await refusals(stack, ERIN)) == 2  # the step's and the command's
    assert completions(stack) == ["functions.completeError"]


async def request_refusal(stack: LocalStack, text: str) -> str:
    """What erin reads when she types the same change as a command."""
    seen = len(stack.slack.ephemerals_for(ERIN))
    await stack.sender.command(ERIN, CHANNEL, text)
    answer = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for(ERIN)[seen:]), None)
    )
    return answer.text


@pytest.mark.parametrize(
    ("cluster", "change", "says"),
    [
        ("tc-h200-ondemand", "num_gpus", "is not a `field=value` pair"),
        ("tc-h200-ondemand", "num_gpus=12 num_gpus=16", "`num_gpus` is given twice"),
        ("tc-h200-ondemand", "", "The step's input `change` is empty"),
        ("tc-h200-ondemand", "reason=later", "names no field"),
        ("tc-h200-ondemand", "num_preemptible_gpus=12", "multiple of 8"),
        ("101", "scale_cluster", "`scale_cluster` needs `additional_nodes`"),
        ("101", "additional_nodes=2", "names no action"),
    ],
)
async def test_invalid_input_ends_the_step_with_the_error(
    sqlite_stack: LocalStack, cluster: str, change: str, says: str
) -> None:
    project = "e2e-delhi" if cluster == "101" else "together-prod"
    given = inputs(project, cluster, change)
    run = sqlite_stack.slack.start_function(STEP, {**given, "change": change or "x"})
    run.inputs["change"] = change  # Workflow Builder requires it; a payload may still lack it
    _, result = await sqlite_stack.sender.function_executed(STEP, given, run=run)
    assert result.ok
    await ended(sqlite_stack, run)
    assert run.state == "failed" and run.error is not None and says in run.error, run.error
    assert roots(sqlite_stack, CHANNEL) == []
    assert (
        sqlite_stack.together.calls(method="PUT") == sqlite_stack.e2e.calls("action", "PUT") == []
    )


async def test_a_redelivered_step_makes_nothing_new(any_stack: LocalStack) -> None:
    stack = any_stack
    run, first = await stack.sender.function_executed(STEP, inputs(*SCALE_101))
    again = await stack.sender.redeliver(first)  # Slack's retry: the same envelope
    _, other = await stack.sender.function_executed(STEP, {}, run=run)  # another envelope
    assert first.ok and again.ok and other.ok
    opened = await opened_by_step(stack)
    await click(stack, opened, BOB)
    await ended(stack, run)
    await stack.runtime.workflow.drain()
    assert len(await stack.runtime.store.list_requests()) == 1
    assert len(roots(stack, CHANNEL)) == 1
    assert completions(stack) == ["functions.completeSuccess"]


@pytest.mark.postgres
async def test_two_replicas_given_one_step_make_one_request(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(database_url=pg_database_url)
    replica = await stack.start_replica("demo-2")
    run = stack.slack.start_function(STEP, inputs(*GROW_H200))
    deliveries = await asyncio.gather(
        stack.sender.function_executed(STEP, {}, run=run),
        replica.sender.function_executed(STEP, {}, run=run),
    )
    assert all(result.ok for _, result in deliveries)
    await ended(stack, run)
    await stack.runtime.workflow.drain()
    await replica.runtime.workflow.drain()
    assert len(await stack.runtime.store.list_requests()) == 1
    assert len(stack.together.calls(method="PUT")) == 1
    assert completions(stack) == ["functions.completeSuccess"]


async def test_a_step_waiting_for_approval_survives_a_restart(stack: LocalStack) -> None:
    await survives_a_restart(stack)


async def test_a_step_waiting_for_approval_survives_a_restart_over_socket_mode(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    await stack.use_socket_mode()
    await survives_a_restart(stack)
    assert stack.sender.transport == "socket"


async def survives_a_restart(stack: LocalStack) -> None:
    run = await run_step(stack, inputs(*SCALE_101))
    opened = await opened_by_step(stack)
    await stack.restart_bot(instance_id="demo-2")
    step = await stack.runtime.steps.steps.get(run.execution_id)
    assert step is not None and step.state is StepState.RUNNING and step.request_id == opened.id
    waiting = await stored_steps(stack)  # while the request waits, no row holds a token
    assert [row["execution_id"] for row in waiting] == [run.execution_id]
    assert "token" not in waiting[0] and run.token not in str(waiting)

    run.started_at -= 16 * 60  # approved long after the step began, by a bot that restarted
    await click(stack, opened, BOB)
    await ended(stack, run)
    assert run.outputs is not None and run.outputs["state"] == "succeeded"
    assert run.completed_with == "bot_token"
    await stack.runtime.workflow.drain()
    done = await stack.runtime.steps.steps.get(run.execution_id)
    assert done is not None and done.state is StepState.COMPLETED
    assert run.token not in str(await stored_steps(stack))
    requested = [
        e for e in await stack.runtime.store.list_audit(limit=20) if e.event == "requested"
    ]
    assert [e.detail.get("workflow_step") for e in requested] == [run.execution_id]


async def test_an_expired_approval_ends_the_step_as_expired(any_stack: LocalStack) -> None:
    stack = any_stack
    run = await run_step(stack, inputs(*SCALE_101))
    opened = await opened_by_step(stack)
    workflow = stack.runtime.workflow
    workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=31)
    assert await workflow.expire_due() == 1
    await ended(stack, run)
    assert run.outputs is not None
    assert (run.outputs["request_id"], run.outputs["state"]) == (opened.id, "expired")
    assert "expired" in run.outputs["summary"]
    assert (await wait_state(stack.runtime.store, opened.id, S.EXPIRED)).id == opened.id


async def test_a_denied_request_ends_the_step_as_denied(sqlite_stack: LocalStack) -> None:
    run = await run_step(sqlite_stack, inputs(*SCALE_101))
    opened = await opened_by_step(sqlite_stack)
    await deny(sqlite_stack, opened, BOB)
    await ended(sqlite_stack, run)
    assert run.outputs is not None and run.outputs["state"] == "denied"


async def test_a_completion_slack_did_not_take_is_sent_again(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.slack.fail("functions.completeSuccess", "internal_error")
    run = await run_step(stack, inputs(*GROW_H200))
    completer = stack.runtime.steps.completer

    async def left_completing() -> bool:
        step = await completer.steps.get(run.execution_id)
        return step is not None and step.state is StepState.COMPLETING

    await stack.slack.wait_for(lambda: stack.slack.calls_to("functions.completeSuccess"))
    await stack.runtime.workflow.drain()
    assert await left_completing() and run.state == "running"
    assert await completer.reconcile() == 0  # too early: the first attempt may still land
    completer.clock = lambda: datetime.now(UTC) + timedelta(minutes=1)
    assert await completer.reconcile() == 1
    await ended(stack, run)
    assert run.outputs is not None and run.outputs["state"] == "succeeded"
    assert [c.ok for c in stack.slack.calls_to("functions.completeSuccess")] == [False, True]


async def test_the_step_token_is_never_logged(
    sqlite_stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    run = await run_step(
        sqlite_stack, inputs("e2e-delhi", "103", "restart_cluster", requester=ERIN)
    )
    await ended(sqlite_stack, run)
    assert run.token not in caplog.text


async def test_reconcile_ends_a_step_whose_request_ended_unheard(sqlite_stack: LocalStack) -> None:
    # A replica recorded the request's end and died before telling anyone.
    stack = sqlite_stack
    run = await run_step(stack, inputs(*SCALE_101))
    opened = await opened_by_step(stack)
    store = stack.runtime.store
    assert await store.transition(opened.id, from_states={S.PENDING}, to=S.CANCELLED)
    assert run.state == "running"
    assert await stack.runtime.steps.completer.reconcile() == 1
    await ended(stack, run)
    assert run.outputs is not None and run.outputs["state"] == "cancelled"
    assert await stack.runtime.steps.completer.reconcile() == 0  # once


async def test_reconcile_fails_a_step_that_never_got_its_request(sqlite_stack: LocalStack) -> None:
    # Claimed by a replica that died before making the request.
    stack = sqlite_stack
    run = stack.slack.start_function(STEP, inputs(*GROW_H200))
    steps = stack.runtime.steps.steps
    assert await claim(steps, run.execution_id, DAVE, CHANNEL)
    completer = stack.runtime.steps.completer
    assert await completer.reconcile() == 0  # it may still be on its way
    completer.clock = lambda: datetime.now(UTC) + timedelta(minutes=11)
    assert await completer.reconcile() == 1
    await ended(stack, run)
    assert run.error is not None and "nothing was changed" in run.error
    made = stack.runtime.workflow.request_change
    with pytest.raises(StepTaken):  # the dead replica's request, were it to come, is refused
        await made(
            ChangeAsk(
                user=DAVE,
                channel=CHANNEL,
                project=GROW_H200[0],
                cluster_id=GROW_H200[1],
                action="update",
                inputs={"num_gpus": "16"},
                reason=None,
                step=run.execution_id,
            )
        )
    assert await stack.runtime.store.list_requests() == []


async def test_a_step_request_written_by_an_older_replica_still_ends_its_step(
    sqlite_stack: LocalStack,
) -> None:
    """During a rolling upgrade a replica older than migration 10 writes requests without
    ``step_id`` (NULL: not known); the step that made one is looked up when it ends, as
    before, where a request known to have none ("") looks nothing up."""
    stack = sqlite_stack
    run = await run_step(stack, inputs(*SCALE_101))
    opened = await opened_by_step(stack)
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.step_id == run.execution_id
    async with stack.runtime.store.engine.begin() as conn:  # as the older replica left it
        await conn.execute(
            text("UPDATE gpuops_change_requests SET step_id = NULL WHERE id = :id"),
            {"id": opened.id},
        )
    await click(stack, opened, BOB)
    done = await ended(stack, run)
    assert done.state == "completed" and done.outputs is not None
    assert done.outputs["state"] == "succeeded"
    by_hand = await request(
        stack, DAVE, "update together-prod tc-h200-ondemand num_gpus=16", approval=False
    )
    made = await stack.runtime.store.get_request(by_hand.id)
    assert made is not None and made.step_id == ""
