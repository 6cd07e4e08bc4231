"""Scheduled changes (SPEC §9): ``in=``/``at=`` and the forms' ``run_at`` schedule a change
1 minute to 14 days ahead; approved as usual before its time, it is sent once at its time
(two replicas, a restart in between), expires when not approved by then or when its time
was missed while gpuops was down, and can be cancelled until it is sent. The replicas'
clocks are moved forward (``workflow.clock``) instead of waiting a minute."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from bot.runtime import Runtime
from tests.conftest import StackFactory
from tests.support.slack_support import input_block, opened_modal
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    Opened,
    buttons,
    click,
    next_ephemeral,
    poll_until,
    request,
    wait_reply,
    wait_root,
    wait_state,
)

FAST_TICKS = {"gpuops_schedule_tick_seconds": 0.05}
SCALE = "action e2e-delhi 101 scale_cluster additional_nodes=1"  # needs approval


def e2e_puts(stack: LocalStack) -> list[Any]:
    return [call.body for call in stack.e2e.calls("action", "PUT")]


def advance(runtimes: Iterable[Runtime], seconds: float) -> None:
    """Every replica's clock ``seconds`` ahead (the store's own times stay real)."""
    for runtime in runtimes:
        runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(seconds=seconds)


async def schedule(stack: LocalStack, text: str) -> Opened:
    opened = await request(stack, DAVE, text)
    root = stack.slack.message(CHANNEL, opened.root_ts)
    assert root is not None and "scheduled for" in root.text and "UTC, in 1 min" in root.text
    return opened


async def approved(stack: LocalStack, opened: Opened) -> None:
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, S.APPROVED)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    await stack.slack.wait_for(lambda: prompt is not None and "cancel_request" in buttons(prompt))
    assert e2e_puts(stack) == []  # not before its time


async def test_a_change_scheduled_a_minute_ahead_is_sent_once_by_two_replicas(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(database_url=pg_database_url, extra_settings=FAST_TICKS)
    replica = await stack.start_replica("demo-2")
    opened = await schedule(stack, f"{SCALE} in=1m")
    await approved(stack, opened)
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.run_at is not None

    advance([stack.runtime, replica.runtime], 61)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    await wait_root(stack, opened, "done")
    for runtime in (stack.runtime, replica.runtime):
        await runtime.workflow.drain()
        assert await runtime.workflow.scheduler.run_due() == 0  # nothing due any more
    assert e2e_puts(stack) == [{"action": "scale_cluster", "additional_nodes": 1}]
    executions = [
        e
        for e in await stack.runtime.store.list_audit(request_id=opened.id)
        if e.event == "executing"
    ]
    assert len(executions) == 1


async def test_a_restart_before_its_time_keeps_a_scheduled_change(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(extra_settings=FAST_TICKS)
    opened = await schedule(stack, f"{SCALE} in=1m")
    await approved(stack, opened)
    await stack.restart_bot(instance_id="demo-2")
    assert (await stack.runtime.store.get_request(opened.id)).state is S.APPROVED  # type: ignore[union-attr]
    advance([stack.runtime], 61)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert e2e_puts(stack) == [{"action": "scale_cluster", "additional_nodes": 1}]


async def test_a_time_missed_while_down_expires_the_change(make_stack: StackFactory) -> None:
    stack = await make_stack(extra_settings=FAST_TICKS)
    opened = await schedule(stack, f"{SCALE} in=1m")
    await approved(stack, opened)
    await stack.restart_bot()
    advance([stack.runtime], 60 + 601)  # down past its time and the 600 s grace
    record = await wait_state(stack.runtime.store, opened.id, S.EXPIRED)
    assert record.result_message is not None and "missed its time" in record.result_message
    await wait_reply(stack, opened, "missed its time")
    await wait_root(stack, opened, "expired")
    assert e2e_puts(stack) == []


async def test_a_change_not_approved_by_its_time_expires(make_stack: StackFactory) -> None:
    stack = await make_stack(extra_settings=FAST_TICKS)
    opened = await schedule(stack, f"{SCALE} in=1m")
    advance([stack.runtime], 61)
    await wait_reply(stack, opened, "not approved before its time")
    await wait_state(stack.runtime.store, opened.id, S.EXPIRED)
    assert e2e_puts(stack) == []


async def test_an_approved_scheduled_change_can_be_cancelled_until_it_is_sent(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(extra_settings=FAST_TICKS)
    opened = await schedule(stack, f"{SCALE} in=1m")
    await approved(stack, opened)
    assert (await stack.sender.app_home_opened(DAVE)).status == 200  # Home lists it

    def listed() -> str | None:
        home = stack.slack.home_of(DAVE)
        shown = json.dumps(home.blocks) if home is not None else ""
        return shown if "scheduled for" in shown else None

    assert opened.id in await stack.slack.wait_for(listed)
    await click(stack, opened, DAVE, "cancel_request")
    await wait_state(stack.runtime.store, opened.id, S.CANCELLED)
    await wait_root(stack, opened, "cancelled")
    advance([stack.runtime], 61)
    assert await stack.runtime.workflow.scheduler.run_due() == 0
    assert e2e_puts(stack) == []


async def test_run_times_out_of_bounds_are_refused_with_the_bounds(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    # one bound over HTTP; every bound, and a stale scheduled change: tests/core/test_schedules.py
    seen = len(stack.slack.ephemerals_for(DAVE))
    await stack.sender.command(DAVE, CHANNEL, f"{SCALE} in=15d")
    told = await next_ephemeral(stack, DAVE, seen)
    assert "from 1 minute to 14 days ahead" in told.text, told.text
    assert await stack.runtime.store.list_requests() == []


async def test_the_forms_run_at_schedules_the_change(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command(DAVE, CHANNEL, "update together-prod tc-h200-ondemand")
    view = await opened_modal(stack, DAVE, "gpu_update")
    picker = input_block(view, "run_at")
    assert picker["optional"] is True and picker["element"]["type"] == "datetimepicker"
    assert picker["element"]["action_id"] == "run_at"
    run_at = int((datetime.now(UTC) + timedelta(hours=3)).timestamp())
    early = int((datetime.now(UTC) + timedelta(seconds=20)).timestamp())
    refused = await stack.sender.view_submission(DAVE, view.id, {"num_gpus": "16", "run_at": early})
    assert refused.json is not None and "run_at" in refused.json["errors"]
    submitted = await stack.sender.view_submission(
        DAVE, view.id, {"num_gpus": "16", "run_at": run_at}
    )
    assert submitted.status == 200
    await poll_until(stack.runtime.store.list_requests)
    [record] = await stack.runtime.store.list_requests()
    assert record.run_at is not None and int(record.run_at.timestamp()) == run_at
    assert record.state is S.APPROVED and stack.together.calls("update", "PUT") == []
