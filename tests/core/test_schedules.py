"""Scheduled changes and reverts on the core harness (SPEC §9): sent once at its time by
two replicas, kept across a restart, expired when not approved by then or missed while
down, cancelled until sent, refused as stale; the inverse of a change as a new request,
refused once under way, after its window, on a changed cluster, or when there is none."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.requests.workflow import ChangeWorkflow
from bot.core.store import ChangeRequestRecord
from bot.core.store import RequestState as S
from tests.core.conftest import CoreFactory
from tests.support.core_harness import BOB, CHANNEL, DAVE, ERIN, MALLORY, Core, reply_text

SCALE = "action e2e-delhi 101 scale_cluster additional_nodes=1"  # needs approval
SCALE_UP = "update together-prod tc-h200-ondemand num_gpus=16"  # 8 → 16, needs none


async def scheduled(core: Core, text: str = f"{SCALE} in=1m") -> str:
    told = await core.answer(DAVE, text)
    assert "scheduled for" in told and "UTC, in 1 min" in told, told
    [record] = [r for r in await core.store.list_requests() if r.run_at is not None][-1:]
    return record.id


async def approved(core: Core, request_id: str) -> None:
    assert await core.approve(BOB, request_id) is None
    assert (await core.record(request_id)).state is S.APPROVED
    assert core.e2e.script.of("apply") == []  # not before its time
    assert await core.workflow.scheduler.run_due() == 0


async def tick(*workflows: ChangeWorkflow) -> int:
    """One scheduler tick on each replica, then wait for the changes it started."""
    acted = 0
    for workflow in workflows:
        acted += await workflow.scheduler.run_due()
    for workflow in workflows:
        await workflow.drain()
    return acted


async def test_a_change_scheduled_a_minute_ahead_is_sent_once_by_two_replicas(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await make_core(database_url=database_url)
    replica = await core.replica("core-b")
    request_id = await scheduled(core)
    record = await core.record(request_id)
    assert record.run_at is not None and record.expires_at == record.run_at
    await approved(core, request_id)
    core.clock.advance(seconds=61)
    assert await tick(core.workflow, replica) >= 1
    assert (await core.record(request_id)).state is S.SUCCEEDED
    assert await tick(core.workflow, replica) == 0  # nothing due any more
    assert [c.body for c in core.e2e.script.of("apply")] == [
        {"action": "scale_cluster", "additional_nodes": 1}
    ]
    assert (await core.events(request_id)).count("executing") == 1
    assert (await core.trail(request_id))[2] == ("gpuops", "executing", None)


async def test_a_restart_before_its_time_keeps_a_scheduled_change(core: Core) -> None:
    request_id = await scheduled(core)
    await approved(core, request_id)
    after = await core.replica("core-2")
    assert await after.recover_interrupted() == 0  # waiting for its time: not an orphan
    core.clock.advance(seconds=61)
    assert await after.recover_interrupted() == 0
    assert (await core.record(request_id)).state is S.APPROVED
    await tick(after)
    assert (await core.record(request_id)).state is S.SUCCEEDED
    assert len(core.e2e.script.of("apply")) == 1


async def test_a_time_missed_while_down_expires_the_change(core: Core) -> None:
    request_id = await scheduled(core)
    await approved(core, request_id)
    core.clock.advance(seconds=60 + 601)  # past its time and the 600 s grace
    assert await tick(core.workflow) == 1
    record = await core.record(request_id)
    assert record.state is S.EXPIRED and record.result_message is not None
    assert "missed its time" in record.result_message
    assert core.notifier.mirrors(request_id)[-1] == "Scheduled change expired"
    assert (await core.trail(request_id))[-1] == ("gpuops", "expired", "missed_time")
    assert core.e2e.script.of("apply") == []


async def test_a_change_not_approved_by_its_time_expires(core: Core) -> None:
    request_id = await scheduled(core)
    core.clock.advance(seconds=61)
    assert await tick(core.workflow) == 1
    record = await core.record(request_id)
    assert record.state is S.EXPIRED
    [expired] = core.notifier.of(request_id, "request_changed")
    assert expired.text is not None and "not approved before its time" in expired.text
    assert (await core.trail(request_id))[-1] == ("gpuops", "expired", "not_approved")
    assert core.e2e.script.of("apply") == []


async def test_an_approved_scheduled_change_can_be_cancelled_until_it_is_sent(core: Core) -> None:
    request_id = await scheduled(core)
    await approved(core, request_id)
    assert await core.cancel(DAVE, request_id) is None
    assert (await core.record(request_id)).state is S.CANCELLED
    core.clock.advance(seconds=61)
    assert await tick(core.workflow) == 0
    assert core.e2e.script.of("apply") == []


async def test_a_scheduled_change_whose_cluster_changed_is_refused_as_stale(core: Core) -> None:
    told = await core.answer(DAVE, f"{SCALE_UP} in=1m")
    assert "is approved, scheduled for" in told
    [record] = await core.store.list_requests()
    assert record.state is S.APPROVED  # a scale-up needs none
    other = await core.open(DAVE, "together-prod", "tc-h200-ondemand", "update", {"num_gpus": "24"})
    assert (await core.record(other.id)).state is S.SUCCEEDED
    core.clock.advance(seconds=61)
    await tick(core.workflow)
    ended = await core.record(record.id)
    assert ended.state is S.FAILED and ended.result_message is not None
    assert ended.result_message.startswith("stale")
    assert len(core.together.script.of("apply")) == 1


@pytest.mark.parametrize("when", ["in=15d", "at=2020-01-01T00:00:00Z", "in=0m"])
async def test_run_times_out_of_bounds_are_refused_with_the_bounds(core: Core, when: str) -> None:
    assert "from 1 minute to 14 days ahead" in await core.answer(DAVE, f"{SCALE} {when}")
    assert await core.store.list_requests() == []


# -- reverts --------------------------------------------------------------------------------


async def succeeded(core: Core, text: str = SCALE_UP) -> ChangeRequestRecord:
    assert "ran — see the thread" in await core.answer(DAVE, text)
    record = (await core.store.list_requests())[-1]
    assert record.state is S.SUCCEEDED
    assert "result" in core.notifier.methods(record.id)  # its summary, with the Undo button
    return record


async def revert(core: Core, record: ChangeRequestRecord, user: str = DAVE) -> str:
    return reply_text(await core.ops.revert(user=user, channel=CHANNEL, request_id=record.id))


async def test_a_together_revert_sends_the_old_values_after_approval(any_core: Core) -> None:
    core = any_core
    original = await succeeded(core)
    assert original.prior_values is not None
    assert original.prior_values["fields"] == {"num_gpus": 8}
    assert "waiting for approval" in await revert(core, original)  # scaling down needs one
    [revert_request] = await core.store.list_reverts(original.id)
    assert revert_request.requester == DAVE and revert_request.state is S.PENDING
    assert revert_request.plan["inputs"] == {"num_gpus": 8}
    assert revert_request.revert_of == original.id and revert_request.channel == CHANNEL
    [told] = core.notifier.of(original.id, "request_changed")[-1:]
    assert told.kind == "revert_requested" and told.text is not None
    assert revert_request.id in told.text and "asked to revert this change" in told.text
    assert await core.approve(BOB, revert_request.id) is None
    assert (await core.record(revert_request.id)).state is S.SUCCEEDED
    assert [c.body for c in core.together.script.of("apply")] == [{"num_gpus": 16}, {"num_gpus": 8}]
    assert core.together.clusters["tc-h200-ondemand"]["num_gpus"] == 8


async def test_a_revert_of_a_changed_cluster_is_refused_as_stale(any_core: Core) -> None:
    core = any_core
    first = await succeeded(core)
    await succeeded(core, "update together-prod tc-h200-ondemand num_gpus=24")
    told = await revert(core, first)
    assert "stale" in told and "no longer shows the result" in told
    assert await core.store.list_reverts(first.id) == []
    assert (await core.trail(first.id))[-1] == (DAVE, "refused", "stale")


async def test_a_revert_is_refused_once_under_way_and_after_its_window(any_core: Core) -> None:
    core = any_core
    original = await succeeded(core)
    assert "waiting for approval" in await revert(core, original)
    assert "already has a revert" in await revert(core, original)
    core.clock.advance(hours=25)
    assert "that time has passed" in await revert(core, original)


REVERT_ROUNDS = 10


async def revert_on(workflow: ChangeWorkflow, record: ChangeRequestRecord) -> str:
    """Dave presses Revert on ``record``, the press reaching ``workflow`` (a replica)."""
    return reply_text(await workflow.revert(user=DAVE, channel=CHANNEL, request_id=record.id))


async def test_two_replicas_pressing_revert_at_once_open_one_revert(any_core: Core) -> None:
    """Both presses pass every check before either opens (each hangs in its read of the
    cluster until both are there): the store lets one open, and the other is told which.
    The revert cancelled, the next round may open one again."""
    core = any_core
    replica = await core.replica("core-b")
    original = await succeeded(core)
    for round_no in range(REVERT_ROUNDS):
        hangs = [core.together.script.hang("get_cluster") for _ in range(2)]
        presses = [
            asyncio.ensure_future(revert(core, original)),
            asyncio.ensure_future(revert_on(replica, original)),
        ]
        for hang in hangs:
            await asyncio.wait_for(hang.entered.wait(), 10)
        for hang in hangs:
            hang.release()
        told = [await press for press in presses]
        live = [r for r in await core.store.list_reverts(original.id) if r.state is S.PENDING]
        assert len(live) == 1, (round_no, told)
        [opened] = [t for t in told if "waiting for approval" in t]
        [refused] = [t for t in told if t is not opened]
        assert f"{original.id} already has a revert: {live[0].id} (pending approval)" in refused
        assert await core.cancel(DAVE, live[0].id) is None
    reverts = await core.store.list_reverts(original.id)
    assert [r.state for r in reverts] == [S.CANCELLED] * REVERT_ROUNDS


@pytest.mark.parametrize("kind", ["revertible", "pending revert", "failed", "none such"])
async def test_revert_pressed_without_a_grant_tells_nothing_and_reads_no_provider(
    core: Core, kind: str
) -> None:
    """Mallory has no grant: whatever the request, she is told the same, nothing of its
    state or its revert, and no cluster is read for her."""
    original = await succeeded(core)
    if kind == "pending revert":
        assert "waiting for approval" in await revert(core, original)
    target = original.id
    if kind == "failed":
        opened = await core.open(
            DAVE, "e2e-delhi", "101", "update_image", {"image_version_id": "3"}
        )
        await core.deny(BOB, opened.id)
        target = opened.id
    elif kind == "none such":
        target = "CR-NOSUCH"
    reads = len(core.together.script.calls) + len(core.e2e.script.calls)
    told = reply_text(await core.ops.revert(user=MALLORY, channel=CHANNEL, request_id=target))
    assert len(core.together.script.calls) + len(core.e2e.script.calls) == reads
    assert told == "you have no grant in gpuops — a gpuops admin can grant one in the policy."
    [entry] = await core.store.list_audit(limit=1)
    assert (entry.actor, entry.event, entry.outcome) == (MALLORY, "refused", "not_authorized")


async def test_revert_pressed_by_a_viewer_is_refused_before_any_read_of_its_state(
    core: Core,
) -> None:
    original = await succeeded(core)
    assert "waiting for approval" in await revert(core, original)
    reads = len(core.together.script.calls)
    told = await revert(core, original, ERIN)
    assert "you are viewer on together-prod; reverting a change needs operator" in told
    assert "already has a revert" not in told and "pending" not in told
    assert len(core.together.script.calls) == reads


async def test_e2e_attach_ip_reverts_to_detach_ip_and_scaling_has_none(any_core: Core) -> None:
    core = any_core
    attached = await succeeded(core, "action e2e-delhi 101 attach_ip reserved_ip_id=501")
    assert "waiting for approval" in await revert(core, attached)  # detach needs one
    [revert_request] = await core.store.list_reverts(attached.id)
    assert revert_request.action == "detach_ip"
    await core.approve(BOB, revert_request.id)
    assert (await core.record(revert_request.id)).state is S.SUCCEEDED
    assert core.e2e.script.of("apply")[-1].body == {
        "action": "detach_ip",
        "reserved_ip_id": 501,
        "ip_type": "reserved",
    }
    opened = await core.open(DAVE, "e2e-delhi", "103", "scale_cluster", {"additional_nodes": "1"})
    await core.approve(BOB, opened.id)
    scaled = await core.record(opened.id)
    assert "has no revert" in await revert(core, scaled)


async def test_a_request_that_did_not_succeed_has_no_revert(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "update_image", {"image_version_id": "3"})
    await core.deny(BOB, opened.id)
    told = await revert(core, await core.record(opened.id))
    assert f"{opened.id} (denied) has no revert" in told
    assert "there is no change request CR-NOSUCH" in reply_text(
        await core.ops.revert(user=DAVE, channel=CHANNEL, request_id="CR-NOSUCH")
    )
