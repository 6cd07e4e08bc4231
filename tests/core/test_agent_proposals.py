"""An agent's proposal in the core (SPEC §15): opened pending and awaiting its requester's
Confirm, with nobody asked to approve it and nothing sent; Confirm is one compare-and-set
(two clicks at once confirm and send it once); an approval before Confirm is refused; an
unconfirmed proposal expires as any pending request does; a cancel ends it."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.ask.change import ChangeAsk
from bot.core.store import RequestState
from tests.support.core_harness import BOB, CHANNEL, DAVE, REQUEST_ID, Core, reply_text

pytestmark = pytest.mark.asyncio


async def propose(core: Core, action: str, inputs: dict[str, object], project: str) -> str:
    cluster = "101" if project == "e2e-delhi" else "tc-h200-ondemand"
    reply = await core.workflow.request_change(
        ChangeAsk(
            user=DAVE,
            channel=CHANNEL,
            project=project,
            cluster_id=cluster,
            action=action,
            inputs=inputs,
            origin="agent",
            via="mcp",
            client="claude-code",
            token="laptop",
        )
    )
    text = reply_text(reply)
    assert "waiting for <@U04DAVE> to confirm it" in text, text
    found = REQUEST_ID.search(text)
    assert found is not None
    return found.group(0)


async def test_a_proposal_waits_and_two_confirms_at_once_send_it_once(core: Core) -> None:
    request_id = await propose(core, "update", {"num_gpus": "16"}, "together-prod")
    record = await core.record(request_id)
    assert (record.state, record.confirm, record.via) == (RequestState.PENDING, "awaiting", "mcp")
    assert "approval_requested" not in core.notifier.methods(request_id)
    assert core.together.script.of("apply") == []
    confirms = [
        core.workflow.confirm(user=DAVE, channel=CHANNEL, request_id=request_id) for _ in range(2)
    ]
    answers = [reply_text(r) for r in await asyncio.gather(*confirms)]
    assert sum("is confirmed and ran" in a for a in answers) == 1, answers
    done = await core.record(request_id)
    assert done.state is RequestState.SUCCEEDED and done.confirm == "confirmed"
    assert len(core.together.script.of("apply")) == 1
    assert [e for _, e, _ in await core.trail(request_id)].count("confirmed") == 1


async def test_an_approval_before_confirm_is_refused_and_after_it_counts(core: Core) -> None:
    request_id = await propose(core, "scale_cluster", {"additional_nodes": "2"}, "e2e-delhi")
    early = await core.approve(BOB, request_id)
    assert early is not None and "has not confirmed yet" in reply_text(early)
    assert (await core.record(request_id)).approvers == []
    assert "approval_requested" not in core.notifier.methods(request_id)
    other = await core.workflow.confirm(user=BOB, channel=CHANNEL, request_id=request_id)
    assert "only <@U04DAVE>" in reply_text(other)
    confirmed = await core.workflow.confirm(user=DAVE, channel=CHANNEL, request_id=request_id)
    assert "waits for approval" in reply_text(confirmed)
    assert "approval_requested" in core.notifier.methods(request_id)
    assert core.e2e.script.of("apply") == []
    assert await core.approve(BOB, request_id) is None
    assert (await core.record(request_id)).state is RequestState.SUCCEEDED
    trail = await core.trail(request_id)
    assert (BOB, "refused", "unconfirmed") in trail and (DAVE, "confirmed", "pending") in trail


async def test_an_unconfirmed_proposal_expires_and_a_cancelled_one_cannot_be_confirmed(
    core: Core,
) -> None:
    waiting = await propose(core, "update", {"num_gpus": "16"}, "together-prod")
    core.clock.advance(minutes=31)
    assert await core.workflow.expire_due() == 1
    assert (await core.record(waiting)).state is RequestState.EXPIRED
    late = await core.workflow.confirm(user=DAVE, channel=CHANNEL, request_id=waiting)
    assert "expired" in reply_text(late)
    cancelled = await propose(core, "update", {"num_gpus": "24"}, "together-prod")
    await core.cancel(DAVE, cancelled)
    after = await core.workflow.confirm(user=DAVE, channel=CHANNEL, request_id=cancelled)
    assert "cancelled" in reply_text(after)
    assert core.together.script.of("apply") == []
