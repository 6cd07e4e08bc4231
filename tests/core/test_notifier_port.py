"""What the core tells through its Notifier port, on the core harness: every meaningful
event with who and why, in order; a request that cannot be shown is withdrawn, never left
waiting; a notify channel that refuses its copy is audited."""

from __future__ import annotations

import asyncio

from bot.core.ask.change import ChangeAsk
from bot.core.notifier import NotDelivered
from bot.core.store import RequestState as S
from tests.support.core_harness import BOB, DAVE, NOTIFY_CHANNEL, Core, reply_text


async def test_an_approved_change_is_told_as_events_with_who_and_why(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"})
    [asked] = core.notifier.of(opened.id, "approval_requested")
    assert asked.text == "30" and asked.record.root_ts is not None  # minutes, after the root
    await core.approve(BOB, opened.id)
    changed = [(t.state, t.kind, t.actor) for t in core.notifier.of(opened.id, "request_changed")]
    assert changed == [
        (S.APPROVED, "approved", BOB),
        (S.EXECUTING, "executing", BOB),
        (S.SUCCEEDED, "finished", DAVE),
    ]
    [approved, executing, finished] = core.notifier.of(opened.id, "request_changed")
    assert approved.left_pending and not executing.left_pending and not finished.left_pending
    assert finished.text == "Adding 1 node(s)"
    assert core.notifier.mirrors(opened.id) == ["Change requested", "Change done"]
    assert {t.channel for t in core.notifier.of(opened.id, "mirror")} == {NOTIFY_CHANNEL}


async def test_a_denial_is_one_event_that_leaves_pending(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "103", "restart_workers")
    await core.deny(BOB, opened.id, reason="not now")
    [denied] = core.notifier.of(opened.id, "request_changed")
    assert (denied.state, denied.kind, denied.actor, denied.text) == (
        S.DENIED,
        "denied",
        BOB,
        "not now",
    )
    assert denied.left_pending


async def test_a_request_that_cannot_be_shown_is_withdrawn(core: Core) -> None:
    core.notifier.fail("request_opened", NotDelivered("channel_not_found", "Invite gpuops first."))
    reply = await core.workflow.request_change(
        ChangeAsk(
            user=DAVE,
            channel="C0GONE",
            project="e2e-delhi",
            cluster_id="101",
            action="restart_workers",
            inputs={},
            reason=None,
        )
    )
    told = reply_text(reply)
    assert told.startswith("Invite gpuops first. Nothing was changed (request CR-")
    [record] = await core.store.list_requests()
    assert record.state is S.CANCELLED and record.decided_by == "gpuops"
    assert record.decision_note == "could not post in the channel (channel_not_found)"
    assert core.notifier.events(record.id) == ["withdrawn"]
    assert core.notifier.mirrors(record.id) == []  # never shown anywhere: not mirrored
    assert (await core.trail(record.id))[-1] == ("gpuops", "withdrawn", "cancelled")
    assert core.e2e.script.of("apply") == []


async def test_a_request_whose_prompt_cannot_be_posted_is_withdrawn(core: Core) -> None:
    core.notifier.fail("approval_requested", NotDelivered("msg_too_long", "Slack refused it."))
    reply = await core.workflow.request_change(
        ChangeAsk(
            user=DAVE,
            channel="C0INCIDENT",
            project="e2e-delhi",
            cluster_id="101",
            action="restart_workers",
            inputs={},
            reason=None,
        )
    )
    assert "Nothing was changed" in reply_text(reply)
    [record] = await core.store.list_requests()
    assert record.state is S.CANCELLED and record.root_ts is not None
    assert record.decision_note == "could not post the approval prompt (msg_too_long)"
    assert await core.approve(BOB, record.id) is not None  # nothing left to approve
    assert core.e2e.script.of("apply") == []


async def test_a_refused_mirror_is_audited_and_the_change_goes_on(core: Core) -> None:
    core.notifier.mirrors_delivered = False
    opened = await core.open(DAVE, "e2e-delhi", "101", "restart_workers")
    await core.approve(BOB, opened.id)
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert (await core.events(opened.id)).count("mirror_failed") == 2
    assert core.notifier.mirrors(opened.id) == []


async def test_a_slow_surface_holds_the_story_in_order(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "restart_workers")
    hang = core.notifier.hang("request_changed")
    deciding = asyncio.create_task(core.approve(BOB, opened.id))
    await hang.entered.wait()
    assert core.e2e.script.of("apply") == []  # told "approved" before anything is sent
    assert (await core.record(opened.id)).state is S.APPROVED
    hang.release()
    assert await deciding is None
    assert core.notifier.events(opened.id) == ["approved", "executing", "finished"]
