"""Durable state and failure (SPEC §5): a pending request survives a restart; a bot killed
while sending a change leaves it ``unknown`` — reported, its cluster freed, never re-run —
while a change another live replica is sending is left alone; provider faults during
execution end in the right state; one running change per cluster. (A sweep racing a
change's start and a failure while starting one are core logic: tests/core/test_execution.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.conftest import StackFactory
from tests.support.reliability import FAST_RETRY_SETTINGS
from tests.support.workflow_kit import (
    BOB,
    CAROL,
    DAVE,
    audit_trail,
    click,
    events,
    next_ephemeral,
    poll_until,
    request,
    serve_process,
    wait_mirror,
    wait_reply,
    wait_root,
    wait_state,
    wait_unlocked,
)

SCALE_101 = "action e2e-delhi 101 scale_cluster additional_nodes=1"
RESTART_NOTE = "The gpuops replica sending this change stopped answering"


def e2e_puts(stack: LocalStack) -> list[Any]:
    return [p.body for p in stack.e2e.calls("action", "PUT")]


async def wait_puts(stack: LocalStack, n: int) -> None:
    await poll_until(lambda: len(stack.e2e.calls("action", "PUT")) >= n)


async def test_a_pending_request_survives_a_restart_and_runs_once(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    before = stack.runtime
    await stack.restart_bot(instance_id="demo-2")
    assert stack.runtime is not before and stack.runtime.workflow.instance_id == "demo-2"
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING

    await click(stack, opened, BOB)
    await wait_root(stack, opened, "done")
    await wait_mirror(stack, opened, "Change done")
    assert e2e_puts(stack) == [{"action": "scale_cluster", "additional_nodes": 1}]
    assert events(await audit_trail(stack.runtime.store, opened.id)) == [
        "requested",
        "approved",
        "executing",
        "result",
    ]


async def test_after_a_restart_with_a_new_policy_the_requesters_grant_is_checked_again(
    stack: LocalStack,
) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    dave_grant = "  - users: [U04DAVE]\n    projects: [together-prod, e2e-delhi]\n"
    policy = stack.runtime.settings.gpuops_policy
    assert dave_grant in policy.read_text()
    policy.write_text(
        policy.read_text().replace(
            dave_grant, "  - users: [U04DAVE]\n    projects: [together-prod]\n"
        )
    )
    await stack.restart_bot()
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    told = await next_ephemeral(stack, BOB, seen)
    assert f"{opened.id} failed — refused at approval: the requester no longer may" in told.text
    record = await wait_state(stack.runtime.store, opened.id, S.FAILED)
    assert record.decision_note == "requester_revoked"
    await wait_reply(stack, opened, "refused at approval: the requester no longer may request")
    await wait_root(stack, opened, "failed")
    await wait_mirror(stack, opened, "Change failed — refused at approval")
    assert e2e_puts(stack) == []


async def test_a_bot_killed_while_sending_leaves_the_change_unknown_never_rerun(
    database_url: str, make_stack: StackFactory
) -> None:
    # Short retry waits: the dead replica's call can no longer arrive ~6 s after it began.
    stack = await make_stack(database_url=database_url, extra_settings=FAST_RETRY_SETTINGS)
    store = stack.runtime.store
    opened = await request(stack, DAVE, SCALE_101)
    stack.e2e.faults.add(Fault(route="action", kind=FaultKind.HANG, seconds=60))
    async with serve_process(stack, "replica-killed") as replica:
        await click(stack, opened, BOB, sender=replica.sender)
        await wait_state(store, opened.id, S.EXECUTING)
        await wait_puts(stack, 1)
        replica.kill()  # SIGKILL while the provider call is in flight
        assert await replica.process.wait() == -9
    # what the dead process left: executing, its cluster locked, its lease not yet expired
    assert (await store.get_request(opened.id)).state is S.EXECUTING  # type: ignore[union-attr]
    assert await store.cluster_holder("e2e", "e2e-delhi", "101") == opened.id
    assert await stack.runtime.workflow.recover_interrupted() == 0  # another id: lease held

    await stack.start_replica("replica-killed")  # the same replica comes back: start-up sweep
    record = await wait_state(store, opened.id, S.UNKNOWN)
    assert record.result_message is not None and RESTART_NOTE in record.result_message
    note = await wait_reply(stack, opened, RESTART_NOTE)
    assert "it will not be re-run" in note.text
    await wait_root(stack, opened, "outcome unknown")
    await wait_mirror(stack, opened, "Change outcome unknown")  # the audit channel hears too
    # the cluster stays taken until the dead replica's call can no longer reach E2E
    max_call = stack.runtime.settings.client_settings().max_call_seconds

    async def freed() -> bool:
        return await store.release_ended_cluster_lock("e2e", "e2e-delhi", "101", opened.id)

    await poll_until(freed, within=max_call + 5)
    assert await stack.runtime.workflow.recover_interrupted() == 0  # once
    assert (await audit_trail(store, opened.id))[-1] == ("gpuops", "result", "unknown")

    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, opened, CAROL)
    late = await next_ephemeral(stack, CAROL, seen)
    assert "was already approved by" in late.text and "outcome unknown" in late.text
    # the cluster is free: the next change on it runs, and the first was never sent again
    stack.e2e.faults.clear()
    nxt = await request(stack, DAVE, SCALE_101)
    await click(stack, nxt, CAROL)
    await wait_state(store, nxt.id, S.SUCCEEDED)
    assert len(e2e_puts(stack)) == 2


async def test_a_change_approved_by_a_bot_that_died_before_sending_it_is_closed(
    stack: LocalStack,
) -> None:
    """A bot killed between the approval and the provider call leaves the request approved
    and, maybe, its cluster locked: nothing was sent, so recovery fails it and frees the
    cluster (else every later change on it is refused as "another change is running")."""
    store = stack.runtime.store
    orphan = await request(stack, DAVE, SCALE_101)
    following = await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    assert await store.transition(orphan.id, from_states={S.PENDING}, to=S.APPROVED, decided_by=BOB)
    assert await store.lock_cluster("e2e", "e2e-delhi", "101", orphan.id)
    assert await stack.runtime.workflow.recover_interrupted() == 0  # just approved: in hand

    later = await stack.start_replica("demo-2", start_background=False)
    later.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=1)
    assert await later.runtime.workflow.recover_interrupted() == 1
    record = await wait_state(store, orphan.id, S.FAILED)
    assert record.result_message is not None and "nothing was sent" in record.result_message
    await wait_reply(stack, orphan, "nothing was sent")
    await wait_root(stack, orphan, "failed")
    assert await store.cluster_holder("e2e", "e2e-delhi", "101") is None
    assert (await audit_trail(store, orphan.id))[-1] == ("gpuops", "result", "failed")

    await click(stack, following, CAROL)
    await wait_state(store, following.id, S.SUCCEEDED)
    assert e2e_puts(stack) == [{"action": "restart_workers"}]


async def test_a_replica_leaves_alone_a_change_another_live_replica_is_sending(
    stack: LocalStack,
) -> None:
    other = await stack.start_replica("replica-b", start_background=False)
    opened = await request(stack, DAVE, SCALE_101)
    stack.e2e.faults.add(Fault(route="action", kind=FaultKind.HANG, seconds=0.6))
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, S.EXECUTING)
    await wait_puts(stack, 1)
    assert await other.runtime.workflow.recover_interrupted() == 0
    assert await stack.runtime.workflow.recover_interrupted() == 0  # its own: in hand
    assert (await stack.runtime.store.get_request(opened.id)).state is S.EXECUTING  # type: ignore[union-attr]
    # the call ends (the provider gives up with a 504): reported by the replica that sent it
    record = await wait_state(stack.runtime.store, opened.id, S.UNKNOWN)
    assert record.result_message is not None and RESTART_NOTE not in record.result_message
    assert "may have applied" in record.result_message
    assert len(e2e_puts(stack)) == 1


@pytest.mark.parametrize(
    ("status", "state", "says"),
    [
        (500, S.UNKNOWN, "The provider may have applied the change"),
        (400, S.FAILED, "Nothing was changed."),
    ],
)
async def test_an_e2e_error_during_execution_ends_in_the_right_state(
    stack: LocalStack, status: int, state: S, says: str
) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    stack.e2e.faults.add(
        Fault(
            route="action",
            kind=FaultKind.SERVER_ERROR,
            status=status,
            message="cluster quota exceeded",
        )
    )
    await click(stack, opened, BOB)
    record = await wait_state(stack.runtime.store, opened.id, state)
    note = await wait_reply(stack, opened, says)
    assert "cluster quota exceeded" in note.text
    await wait_root(stack, opened, "outcome unknown" if state is S.UNKNOWN else "failed")
    assert e2e_puts(stack) == [{"action": "scale_cluster", "additional_nodes": 1}]  # never retried
    assert record.result_message is not None and says in record.result_message
    assert (await audit_trail(stack.runtime.store, opened.id))[-1] == (DAVE, "result", str(state))


async def test_a_together_502_is_retried_and_the_change_succeeds(stack: LocalStack) -> None:
    stack.together.faults.add(Fault(route="update", kind=FaultKind.SERVER_ERROR, status=502))
    opened = await request(
        stack, DAVE, "update together-prod tc-h200-ondemand num_gpus=16", approval=False
    )  # a scale-up: runs at once
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.needs_approval is False
    puts = stack.together.calls("update", "PUT")
    assert [p.body for p in puts] == [{"num_gpus": 16}, {"num_gpus": 16}]
    assert stack.together.clusters["tc-h200-ondemand"]["num_gpus"] == 16
    await wait_reply(stack, opened, "Together accepted the update")
    await wait_root(stack, opened, "done")


async def test_one_change_at_a_time_per_cluster(stack: LocalStack) -> None:
    store = stack.runtime.store
    first = await request(stack, DAVE, SCALE_101)
    second = await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    stack.e2e.faults.add(Fault(route="action", kind=FaultKind.HANG, seconds=0.8))
    await click(stack, first, BOB)
    await wait_state(store, first.id, S.EXECUTING)
    await wait_puts(stack, 1)

    await click(stack, second, CAROL)
    note = await wait_reply(stack, second, f"another change ({first.id}) is running on 101")
    assert "request again when it has finished" in note.text
    record = await wait_state(store, second.id, S.FAILED)
    assert record.result_message is not None and first.id in record.result_message
    await wait_root(stack, second, "failed")
    assert (await audit_trail(store, second.id))[-1] == ("gpuops", "refused", "cluster_busy")
    assert len(e2e_puts(stack)) == 1
    await wait_state(store, first.id, S.UNKNOWN)  # the hung call ends with a 504
    await wait_unlocked(store, "e2e", "e2e-delhi", "101")
    assert e2e_puts(stack) == [{"action": "scale_cluster", "additional_nodes": 1}]
