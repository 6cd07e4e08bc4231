"""Reverting a change (SPEC §9): the result of a succeeded change offers ``revert_request``;
pressing it opens the inverse as a new request by the presser, under the normal policy,
linked both ways; a cluster that no longer shows the change's result is refused as stale;
changes without an inverse offer no button."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from bot.core.store import ChangeRequestRecord
from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from bot.local.slack.sender import SlackSender
from tests.conftest import StackFactory
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    MALLORY,
    Opened,
    buttons,
    click,
    find_prompt,
    next_ephemeral,
    poll_until,
    request,
    wait_reply,
    wait_root,
    wait_state,
    wait_summary,
)

SCALE_UP = "update together-prod tc-h200-ondemand num_gpus=16"  # 8 → 16, needs no approval


@pytest.fixture
async def stack(sqlite_stack: LocalStack) -> LocalStack:
    """These flows over HTTP on SQLite: what they show does not depend on the backend;
    their logic runs on SQLite and PostgreSQL on the core harness (tests/core/)."""
    return sqlite_stack


async def succeeded(stack: LocalStack, opened: Opened) -> ChangeRequestRecord:
    """The request once it succeeded, with the ts of its result (the summary) as shown in
    its thread: gpuops stores that ts only for a follow-up, which edits the summary."""
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    summary = await wait_summary(stack, opened)
    return record.model_copy(update={"summary_ts": summary.ts})


async def press_revert(stack: LocalStack, record: ChangeRequestRecord, user: str) -> str:
    """``user`` presses Revert on the result; the ephemeral answer they get."""
    seen = len(stack.slack.ephemerals_for(user))
    result = await stack.sender.block_action(
        user,
        CHANNEL,
        action_id="revert_request",
        value=record.id,
        message_ts=record.summary_ts or "",
    )
    assert result.status == 200 and result.acked_in_time, result
    return (await next_ephemeral(stack, user, seen)).text


async def wait_ready(stack: LocalStack, cluster_id: str) -> None:
    await poll_until(lambda: stack.together.view(cluster_id)["status"] == "Ready")


async def test_a_together_revert_sends_the_old_values_after_approval(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, SCALE_UP, approval=False)
    original = await succeeded(stack, opened)
    assert original.prior_values is not None
    assert original.prior_values["fields"] == {"num_gpus": 8}
    result = stack.slack.message(CHANNEL, original.summary_ts or "")
    assert result is not None and buttons(result) == {"revert_request": original.id}
    await wait_ready(stack, "tc-h200-ondemand")

    told = await press_revert(stack, original, DAVE)
    assert "waiting for approval" in told  # scaling back down needs its approval
    note = await wait_reply(stack, opened, "asked to revert this change")
    reverts = await stack.runtime.store.list_reverts(original.id)
    assert len(reverts) == 1 and reverts[0].id in note.text
    revert = reverts[0]
    assert revert.requester == DAVE and revert.state is S.PENDING
    assert revert.plan["inputs"] == {"num_gpus": 8}
    root = stack.slack.message(CHANNEL, revert.root_ts or "")
    assert root is not None and f"reverts request `{original.id}`" in str(root.blocks)
    prompt = find_prompt(stack, CHANNEL, revert.root_ts or "")
    assert prompt is not None
    puts = len(stack.together.calls("update", "PUT"))

    await click(stack, Opened(revert.id, CHANNEL, revert.root_ts or "", prompt.ts), BOB)
    await wait_state(stack.runtime.store, revert.id, S.SUCCEEDED)
    bodies = [c.body for c in stack.together.calls("update", "PUT")[puts:]]
    assert bodies == [{"num_gpus": 8}]
    assert stack.together.view("tc-h200-ondemand")["num_gpus"] == 8


async def test_a_revert_of_a_changed_cluster_is_refused_as_stale(stack: LocalStack) -> None:
    first = await succeeded(stack, await request(stack, DAVE, SCALE_UP, approval=False))
    await wait_ready(stack, "tc-h200-ondemand")
    again = "update together-prod tc-h200-ondemand num_gpus=24"
    await succeeded(stack, await request(stack, DAVE, again, approval=False))
    told = await press_revert(stack, first, DAVE)
    assert "stale" in told and "no longer shows the result" in told
    assert await stack.runtime.store.list_reverts(first.id) == []


async def test_a_revert_is_refused_once_under_way_and_after_its_window(stack: LocalStack) -> None:
    original = await succeeded(stack, await request(stack, DAVE, SCALE_UP, approval=False))
    await wait_ready(stack, "tc-h200-ondemand")
    assert "waiting for approval" in await press_revert(stack, original, DAVE)
    assert "already has a revert" in await press_revert(stack, original, DAVE)
    stack.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(hours=25)
    assert "that time has passed" in await press_revert(stack, original, DAVE)


NO_GRANT = "you have no grant in gpuops — a gpuops admin can grant one in the policy."


def provider_reads(stack: LocalStack) -> int:
    return len(stack.together.requests) + len(stack.e2e.requests)


async def test_mallory_pressing_revert_or_cancel_learns_nothing_and_costs_no_provider_read(
    stack: LocalStack,
) -> None:
    """Mallory has no grant: on a change whose revert is pending she is told one line,
    nothing of the revert, and the simulators see no request for her clicks."""
    original = await succeeded(stack, await request(stack, DAVE, SCALE_UP, approval=False))
    await wait_ready(stack, "tc-h200-ondemand")
    assert "waiting for approval" in await press_revert(stack, original, DAVE)
    [pending] = await stack.runtime.store.list_reverts(original.id)
    prompt = find_prompt(stack, CHANNEL, pending.root_ts or "")
    assert prompt is not None
    reads = provider_reads(stack)

    told = await press_revert(stack, original, MALLORY)
    assert told == NO_GRANT, told
    seen = len(stack.slack.ephemerals_for(MALLORY))
    opened = Opened(pending.id, CHANNEL, pending.root_ts or "", prompt.ts)
    await click(stack, opened, MALLORY, "cancel_request")
    cancel = (await next_ephemeral(stack, MALLORY, seen)).text
    assert "no access" in cancel and "pending" not in cancel and pending.id not in cancel
    assert provider_reads(stack) == reads
    still = await stack.runtime.store.get_request(pending.id)
    assert still is not None and still.state is S.PENDING


REPLICA_ROUNDS = 20


async def press_revert_on(sender: SlackSender, record: ChangeRequestRecord, user: str) -> None:
    """``user`` presses Revert on the result, the click reaching ``sender``'s replica."""
    result = await sender.block_action(
        user,
        CHANNEL,
        action_id="revert_request",
        value=record.id,
        message_ts=record.summary_ts or "",
    )
    assert result.status == 200 and result.acked_in_time, result


async def test_a_double_press_of_revert_on_two_replicas_opens_one_revert(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    """Dave's two clicks of Revert reach replica A and replica B at the same moment (one
    PostgreSQL): each round one revert is opened, the other click is told which one; the
    revert cancelled, the next round starts over."""
    stack = await make_stack(database_url=pg_database_url, instance_id="replica-a")
    replica_b = await stack.start_replica("replica-b")
    store = stack.runtime.store
    original = await succeeded(stack, await request(stack, DAVE, SCALE_UP, approval=False))
    await wait_ready(stack, "tc-h200-ondemand")
    for round_no in range(REPLICA_ROUNDS):
        seen = len(stack.slack.ephemerals_for(DAVE))
        await asyncio.gather(
            press_revert_on(stack.sender, original, DAVE),
            press_revert_on(replica_b.sender, original, DAVE),
        )
        await next_ephemeral(stack, DAVE, seen + 1)
        told = [e.text for e in stack.slack.ephemerals_for(DAVE)[seen:]]
        live = [r for r in await store.list_reverts(original.id) if r.state is S.PENDING]
        assert len(live) == 1, (round_no, told)
        assert sum("waiting for approval" in t for t in told) == 1, told
        refused = f"{original.id} already has a revert: {live[0].id} (pending approval)"
        assert sum(refused in t for t in told) == 1, told
        cancel = {"user": DAVE, "channel": CHANNEL, "request_id": live[0].id}
        assert await stack.runtime.ops.decide(**cancel, decision="cancel") is None
    reverts = await store.list_reverts(original.id)
    assert [r.state for r in reverts] == [S.CANCELLED] * REPLICA_ROUNDS


async def test_e2e_attach_ip_reverts_to_detach_ip_and_scaling_has_no_button(
    stack: LocalStack,
) -> None:
    attach = "action e2e-delhi 101 attach_ip reserved_ip_id=501"  # needs no approval
    opened = await request(stack, DAVE, attach, approval=False)
    attached = await succeeded(stack, opened)
    await wait_root(stack, opened, "done")
    assert "waiting for approval" in await press_revert(stack, attached, DAVE)  # detach does
    (revert,) = await stack.runtime.store.list_reverts(attached.id)
    assert revert.action == "detach_ip"
    prompt = find_prompt(stack, CHANNEL, revert.root_ts or "")
    assert prompt is not None
    await click(stack, Opened(revert.id, CHANNEL, revert.root_ts or "", prompt.ts), BOB)
    done = await wait_state(stack.runtime.store, revert.id, S.SUCCEEDED, S.FAILED)
    assert done.state is S.SUCCEEDED, done.result_message
    last = stack.e2e.calls("action", "PUT")[-1].body
    assert last == {"action": "detach_ip", "reserved_ip_id": 501, "ip_type": "reserved"}

    scaled = await request(stack, DAVE, "action e2e-delhi 103 scale_cluster additional_nodes=1")
    await click(stack, scaled, BOB)
    record = await succeeded(stack, scaled)
    summary = stack.slack.message(CHANNEL, record.summary_ts or "")
    assert summary is not None and "revert_request" not in buttons(summary)
    assert "has no revert" in await press_revert(stack, record, DAVE)
