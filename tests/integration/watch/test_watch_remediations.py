"""Together node remediations in the notify channel, end to end over real HTTP on SQLite
and PostgreSQL (SPEC §7.1): posted once, decided once by an approver's click (double
clicks and two replicas send one POST), refused for an operator, rejected with a comment,
decided elsewhere → message edited, progress followed in the thread."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from bot.core.store.watch import RemediationDecision, WatchStore, remediations
from bot.core.watch.remediations import STALE_DECISION
from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.together_remediations import NewRemediation, Resolution
from tests.conftest import StackFactory
from tests.support.watch_kit import (
    NOTIFY,
    WATCH_EVERY,
    decisions_sent,
    pending_remediation,
    press,
    remediation_roots,
    thread,
    watched_stack,
)
from tests.support.workflow_kit import BOB, DAVE, buttons, next_ephemeral, readable_text


async def test_posted_once_with_why_and_approved_once_under_a_double_click(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url)
    spec = NewRemediation(xid={"79": 3, "48": 1}, outcome="SUCCEEDED")
    remediation_id, message = await pending_remediation(stack, spec)
    text = readable_text(message)
    assert "train-h100-reserved" in text and "Xid 79 (3 times)" in text and "Since" in text
    assert set(buttons(message)) == {"approve_remediation", "reject_remediation"}

    await asyncio.gather(
        press(stack, message, BOB, "approve_remediation"),
        press(stack, message, BOB, "approve_remediation"),
    )
    root = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, message.ts)) and not buttons(m) and m
    )
    assert "Approved" in readable_text(root) and "<@U02BOB>" in readable_text(root)
    # the decided message still says what was proposed and why
    assert "Together proposes to" in readable_text(root) and "Xid 79 (3 times)" in readable_text(
        root
    )
    assert decisions_sent(stack, remediation_id) == ["approve"]
    await stack.slack.wait_for(
        lambda: any("SUCCEEDED" in t for t in thread(stack, message)), within=10
    )
    await asyncio.sleep(WATCH_EVERY * 4)  # more polls: nothing posted twice
    assert len(remediation_roots(stack, remediation_id)) == 1
    assert decisions_sent(stack, remediation_id) == ["approve"]
    rows = await stack.runtime.store.list_audit(project="together-prod", limit=50)
    clicks = [(r.actor, r.event, r.outcome) for r in rows if r.event == "remediation_approve"]
    assert ("U02BOB", "remediation_approve", "approved") in clicks
    assert ("U02BOB", "remediation_approve", "too_late") in clicks


async def test_an_operator_is_refused_and_nothing_is_sent(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack)
    remediation_id, message = await pending_remediation(stack)
    for action in ("approve_remediation", "reject_remediation"):
        seen = len(stack.slack.ephemerals_for(DAVE))
        await press(stack, message, DAVE, action)
        refusal = await next_ephemeral(stack, DAVE, seen)
        doing = "approving" if action == "approve_remediation" else "rejecting"
        assert f"you are operator on together-prod; {doing} a remediation needs approver" in (
            refusal.text
        )
    assert decisions_sent(stack, remediation_id) == []
    assert not stack.slack.open_views_for(DAVE)
    still = stack.slack.message(NOTIFY, message.ts)
    assert still is not None and set(buttons(still)) == {
        "approve_remediation",
        "reject_remediation",
    }
    rows = await stack.runtime.store.list_audit(project="together-prod", limit=50)
    assert [r.outcome for r in rows if r.event == "refused"] == ["not_authorized"] * 2


async def test_reject_asks_for_a_comment_and_sends_it_once(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack)
    remediation_id, message = await pending_remediation(stack)
    await press(stack, message, BOB, "reject_remediation")
    view = await stack.slack.wait_for(lambda: stack.slack.last_view_for(BOB, open_only=True))
    result = await stack.sender.view_submission(BOB, view.id, {"comment": "GPU swap scheduled"})
    assert result.ok, result
    root = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, message.ts)) and not buttons(m) and m
    )
    assert "Rejected" in readable_text(root) and "GPU swap scheduled" in readable_text(root)
    assert "NVIDIA Xid" in readable_text(root)  # why it was proposed stays
    assert decisions_sent(stack, remediation_id) == ["reject"]
    sent = stack.together.calls("remediation_decision")[-1]
    assert sent.body == {"comment": "GPU swap scheduled"}


async def test_decided_elsewhere_edits_the_message_and_removes_the_buttons(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url)
    remediation_id, message = await pending_remediation(stack)
    stack.together.remediations.resolve(remediation_id, Resolution(state="AUTO_RESOLVED"))
    root = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, message.ts)) and not buttons(m) and m,
        within=10,
    )
    assert "Decided outside gpuops" in readable_text(root) and "AUTO_RESOLVED" in readable_text(
        root
    )
    seen = len(stack.slack.ephemerals_for(BOB))
    await press(stack, message, BOB, "approve_remediation")
    late = await next_ephemeral(stack, BOB, seen)
    assert "no longer awaiting" in late.text
    assert decisions_sent(stack, remediation_id) == []


async def test_a_console_approval_first_is_already_decided_at_together(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, extra_settings={"gpuops_watch_every_seconds": 30})
    # A long interval: the click reaches Together before a poll sees the console decision.
    remediation_id, message = await pending_remediation(stack, within=40)
    stack.together.remediations.resolve(remediation_id, Resolution(state="PENDING"))
    seen = len(stack.slack.ephemerals_for(BOB))
    await press(stack, message, BOB, "approve_remediation")
    answer = await next_ephemeral(stack, BOB, seen)
    assert "Already decided at Together" in answer.text
    root = stack.slack.message(NOTIFY, message.ts)
    assert root is not None and not buttons(root)
    assert "Already decided at Together" in readable_text(root)
    assert decisions_sent(stack, remediation_id) == ["approve"]


async def test_a_refused_decision_is_shown_and_the_buttons_stay(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack)
    remediation_id, message = await pending_remediation(stack)
    stack.together.faults.add(
        Fault(
            route="remediation_decision",
            kind=FaultKind.SERVER_ERROR,
            status=400,
            message="comment too long",
        )
    )
    seen = len(stack.slack.ephemerals_for(BOB))
    await press(stack, message, BOB, "approve_remediation")
    answer = await next_ephemeral(stack, BOB, seen)
    assert "Together did not take it" in answer.text and "comment too long" in answer.text
    note = await stack.slack.wait_for(lambda: thread(stack, message))
    assert "Not sent" in note[0]
    root = stack.slack.message(NOTIFY, message.ts)
    assert root is not None and "approve_remediation" in buttons(root)
    await press(stack, root, BOB, "approve_remediation")  # and it can be tried again
    await stack.slack.wait_for(lambda: any("SUCCEEDED" in t for t in thread(stack, message)))
    assert decisions_sent(stack, remediation_id) == ["approve", "approve"]


async def test_a_lost_answer_is_not_resent_until_a_poll_shows_it_was_not_taken(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack)
    remediation_id, message = await pending_remediation(stack)
    stack.together.faults.add(
        Fault(route="remediation_decision", kind=FaultKind.SERVER_ERROR, status=503)
    )
    seen = len(stack.slack.ephemerals_for(BOB))
    await press(stack, message, BOB, "approve_remediation")
    answer = await next_ephemeral(stack, BOB, seen)
    assert "may or may not have taken it" in answer.text
    assert decisions_sent(stack, remediation_id) == ["approve"]  # the 503 was not retried
    # The simulator did not apply it: the next poll sees it still awaiting approval.
    await stack.slack.wait_for(
        lambda: any("The buttons are back" in t for t in thread(stack, message)), within=10
    )
    root = stack.slack.message(NOTIFY, message.ts)
    assert root is not None and "approve_remediation" in buttons(root)
    assert [v.text.rsplit(": ", 1)[-1].split(" — ")[-1] for v in root.versions] == [
        "awaiting approval",
        "unknown",
        "awaiting approval",
    ]


async def test_a_decision_cut_off_by_a_dead_replica_reopens_when_not_taken(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack)
    remediation_id, message = await pending_remediation(stack)
    watch_store = WatchStore(stack.runtime.store)
    record_id = buttons(message)["approve_remediation"]
    # A replica won the click, then died before sending it (or before hearing back).
    won = await watch_store.decide_remediation(
        record_id,
        from_decisions={RemediationDecision.AWAITING},
        to=RemediationDecision.DECIDING,
        decided_by=BOB,
    )
    assert won is not None
    await asyncio.sleep(WATCH_EVERY * 3)
    assert not thread(stack, message)  # a fresh decision is left to its sender
    long_ago = datetime.now(UTC) - STALE_DECISION - timedelta(seconds=1)
    async with stack.runtime.store.engine.begin() as conn:
        await conn.execute(
            update(remediations).where(remediations.c.id == record_id).values(updated_at=long_ago)
        )
    await stack.slack.wait_for(
        lambda: any("The buttons are back" in t for t in thread(stack, message)), within=10
    )
    assert decisions_sent(stack, remediation_id) == []
