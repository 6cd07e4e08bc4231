"""Lifecycle details: a stopping bot lets a change being sent finish, the delivery memory is
pruned, a cluster that only finished provisioning is not a stale preview, and 'already
decided' answers mention the person who decided."""

from __future__ import annotations

import json
from datetime import timedelta

from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.support.workflow_kit import (
    BOB,
    CAROL,
    DAVE,
    click,
    next_ephemeral,
    open_direct,
    wait_state,
)


async def test_stopping_the_bot_lets_a_change_being_sent_finish(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    stack.e2e.faults.add(Fault(route="action", kind=FaultKind.LATENCY, seconds=0.6))
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.EXECUTING)
    store = stack.runtime.store
    unfinished = await stack.runtime.workflow.wait_for_executions(grace=5.0)
    assert unfinished == set()
    record = await store.get_request(opened.id)
    assert record is not None and record.state is RequestState.SUCCEEDED
    assert len(stack.e2e.calls("action", "PUT")) == 1


async def test_wait_for_executions_gives_up_after_its_grace(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    opened = await open_direct(stack, DAVE, "e2e-delhi", "103", "restart_cluster", {})
    stack.e2e.faults.add(Fault(route="action", kind=FaultKind.LATENCY, seconds=1.0))
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.EXECUTING)
    assert await stack.runtime.workflow.wait_for_executions(grace=0.1) == {opened.id}
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)


async def test_the_sweeper_forgets_deliveries_after_a_day(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    store, workflow = stack.runtime.store, stack.runtime.workflow
    assert await store.remember_delivery("event:Ev0001")
    await workflow.sweep_once()
    assert not await store.remember_delivery("event:Ev0001")  # still remembered today
    real_clock = workflow.clock
    workflow.clock = lambda: real_clock() + timedelta(days=2)
    await workflow.sweep_once()
    assert await store.remember_delivery("event:Ev0001")  # pruned: a key seen afresh


async def test_a_cluster_that_finished_provisioning_is_not_a_stale_preview(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    # tc-booting is still provisioning when the change is requested...
    opened = await open_direct(
        stack, DAVE, "together-prod", "tc-booting", "update", {"num_gpus": "0"}
    )
    # ...and Ready by the time an approver looks: the preview (num_gpus 8 → 0) still holds.
    stack.together.clusters["tc-booting"]["status"] = "Ready"
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    [put] = stack.together.calls("update", "PUT")
    assert put.body == {"num_gpus": 0}


async def test_already_decided_mentions_who_decided(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    opened = await open_direct(stack, DAVE, "e2e-delhi", "104", "restart_workers", {})
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, opened, CAROL)
    late = await next_ephemeral(stack, CAROL, seen)
    assert f"{opened.id} was already approved by <@{BOB}>" in late.text
    assert "&lt;@" not in json.dumps(late.blocks)
