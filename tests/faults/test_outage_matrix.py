"""Nothing lost, nothing false (issue #16): answers, remediation alerts and decisions across
store outages and Slack faults, end to end over real HTTP on SQLite and PostgreSQL.

The outage is one replica's store refusing every transaction (``StoreOutage``: the error the
store raises for a refused or reset connection), switched at the step each cell names; the
PostgreSQL-only cells through the fault proxy are in ``test_db_faults.py``. Each cell checks
what people were told (never an untrue "nothing was changed"), that nothing was sent twice,
and that what the store missed is caught up once it is back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event, update

from bot.core.answers import STORE_UNAVAILABLE_TEXT
from bot.core.store import RequestState, StoreUnavailable
from bot.core.store.watch import RemediationDecision, WatchStore, remediations
from bot.core.watch.remediations import STALE_DECISION
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.together_remediations import NewRemediation, Resolution
from bot.local.slack.models import FakeEvent, MessagePosted
from tests.conftest import StackFactory
from tests.support.reliability import (
    E2E_ATTACH,
    E2E_SCALE,
    FAST,
    INCIDENT,
    TOGETHER_SCALE_UP,
    StoreOutage,
    click,
    command,
    newest_request,
    settle,
    thread_texts,
    wait_terminal,
)
from tests.support.watch_kit import (
    CLUSTER,
    NOTIFY,
    WATCH_EVERY,
    _value_of,
    decisions_sent,
    pending_remediation,
    polls_held,
    press,
    remediation_roots,
    thread,
    until,
    watched_stack,
)
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    Opened,
    buttons,
    next_ephemeral,
    open_direct,
    poll_until,
    readable_text,
    wait_state,
)
from tests.support.workflow_kit import click as press_prompt

S = RequestState


# ---- 2. a change whose call may have gone out is never "nothing was changed" -----------


@pytest.mark.parametrize(
    ("flow", "text", "route"),
    [("together", TOGETHER_SCALE_UP, "update"), ("e2e", E2E_ATTACH, "action")],
    ids=["together-update", "e2e-attach_ip"],
)
async def test_a_change_sent_before_the_store_went_is_not_called_unchanged(
    database_url: str, make_stack: StackFactory, flow: str, text: str, route: str
) -> None:
    """A no-approval change whose provider call is in flight when the store goes: the
    answer says it was sent and how it ended, not "nothing was changed" (a repeat would be
    a second write); the result is recorded once the store is back; one call."""
    stack = await make_stack(database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    simulator = stack.together if flow == "together" else stack.e2e
    simulator.faults.add(Fault(route=route, kind=FaultKind.LATENCY, seconds=0.8))
    asking = asyncio.create_task(command(stack, text))
    await poll_until(lambda: len(simulator.calls(route, "PUT")) == 1)
    outage.start()
    answer = await asking
    assert "nothing was changed" not in answer.text.lower(), answer.text
    assert "was sent" in answer.text and "lost contact" in answer.text, answer.text
    outage.end()
    record = await newest_request(stack)
    assert record is not None
    await wait_state(stack.runtime.store, record.id, S.SUCCEEDED, within=10)
    assert len(simulator.calls(route, "PUT")) == 1


# ---- 1. a remediation alert is never lost ----------------------------------------------


@pytest.mark.parametrize("error", ["not_in_channel", "http_500"])
async def test_a_remediation_whose_root_post_failed_is_posted_by_the_next_poll(
    database_url: str, make_stack: StackFactory, error: str
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url)
    status = 500 if error == "http_500" else None
    stack.slack.fail("chat.postMessage", "internal_error" if status else error, status=status)
    remediation_id, message = await pending_remediation(stack)
    assert set(buttons(message)) == {"approve_remediation", "reject_remediation"}
    await asyncio.sleep(WATCH_EVERY * 4)  # more polls: posted once
    assert len(remediation_roots(stack, remediation_id)) == 1
    await press(stack, message, BOB, "approve_remediation")
    await stack.slack.wait_for(lambda: any("Approved" in t for t in thread(stack, message)))
    assert decisions_sent(stack, remediation_id) == ["approve"]


async def test_a_remediation_claimed_as_the_store_goes_is_posted_once_it_is_back(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store goes away right after the remediation's alert key is claimed: once it is
    back the remediation is posted (once), its message recorded and approvable."""
    stack = await watched_stack(make_stack, database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    outage.start_after("INSERT INTO gpuops_watch_alerts")
    created = stack.together.create_remediation(CLUSTER, NewRemediation())
    remediation_id = str(created["id"])
    await until(lambda: outage.down)
    await asyncio.sleep(WATCH_EVERY * 2)  # polls fail meanwhile
    outage.end()
    message = await stack.slack.wait_for(
        lambda: next(iter(remediation_roots(stack, remediation_id)), None), within=10
    )
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(remediation_roots(stack, remediation_id)) == 1
    await press(stack, message, BOB, "approve_remediation")
    root = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, message.ts)) and not buttons(m) and m
    )
    assert "Approved" in readable_text(root)
    assert decisions_sent(stack, remediation_id) == ["approve"]


# ---- 4. remediation buttons while the store is down are answered ----------------------


@pytest.mark.parametrize("when", ["down", "lost-after-de-dup"])
@pytest.mark.parametrize("action_id", ["approve_remediation", "reject_remediation"])
async def test_a_remediation_click_while_the_store_is_down_is_answered(
    database_url: str, make_stack: StackFactory, action_id: str, when: str
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url)
    remediation_id, message = await pending_remediation(stack)
    outage = StoreOutage(stack.runtime.store)
    if when == "down":
        outage.start()
    else:
        outage.start_after("INSERT INTO gpuops_deliveries")
    seen = len(stack.slack.ephemerals_for(BOB))
    await press(stack, message, BOB, action_id)
    told = await next_ephemeral(stack, BOB, seen)
    assert STORE_UNAVAILABLE_TEXT in told.text
    outage.end()
    assert not stack.slack.open_views_for(BOB)
    assert decisions_sent(stack, remediation_id) == []
    root = stack.slack.message(NOTIFY, message.ts)
    assert root is not None and action_id in buttons(root)
    await press(stack, root, BOB, "approve_remediation")  # and it is decided once back
    await stack.slack.wait_for(lambda: any("Approved" in t for t in thread(stack, message)))
    assert decisions_sent(stack, remediation_id) == ["approve"]


async def test_a_reject_form_submitted_while_the_store_is_down_is_answered(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url)
    remediation_id, message = await pending_remediation(stack)
    await press(stack, message, BOB, "reject_remediation")
    view = await stack.slack.wait_for(lambda: stack.slack.last_view_for(BOB, open_only=True))
    outage = StoreOutage(stack.runtime.store)
    outage.start()
    seen = len(stack.slack.ephemerals_for(BOB))
    result = await stack.sender.view_submission(BOB, view.id, {"comment": "swap it first"})
    assert result.ok, result
    told = await next_ephemeral(stack, BOB, seen)
    assert STORE_UNAVAILABLE_TEXT in told.text
    outage.end()
    assert decisions_sent(stack, remediation_id) == []


# ---- 3. a decision cut off by the store is told, shown and recorded -------------------


async def test_a_remediation_decision_cut_off_by_the_store_is_told_shown_and_recorded(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store goes as the approve POST is out: the clicker hears how it went, the root
    loses its buttons, the thread says so; once the store is back the decision is recorded
    (a later click reads "approved by bob"). One POST."""
    stack = await watched_stack(make_stack, database_url=database_url)
    remediation_id, message = await pending_remediation(stack)
    stack.together.faults.add(
        Fault(route="remediation_decision", kind=FaultKind.LATENCY, seconds=0.8)
    )
    outage = StoreOutage(stack.runtime.store)
    seen = len(stack.slack.ephemerals_for(BOB))
    await press(stack, message, BOB, "approve_remediation")
    await until(lambda: decisions_sent(stack, remediation_id) == ["approve"])
    outage.start()
    told = await next_ephemeral(stack, BOB, seen)
    assert "Approved; Together says" in told.text and "lost contact" in told.text, told.text
    root = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, message.ts)) and not buttons(m) and m
    )
    assert "Approved" in readable_text(root)
    assert any("Approved" in t for t in thread(stack, message))
    outage.end()
    watch_store = WatchStore(stack.runtime.store)
    record_id = _value_of(message, "approve_remediation")

    async def decided() -> bool:
        record = await watch_store.get_remediation(record_id)
        return record is not None and record.decision is RemediationDecision.APPROVED

    await poll_until(decided, within=10)
    seen = len(stack.slack.ephemerals_for(ALICE))
    await press(stack, message, ALICE, "approve_remediation")
    late = await next_ephemeral(stack, ALICE, seen)
    assert "no longer awaiting a decision (approved by <@U02BOB>)" in late.text, late.text
    assert decisions_sent(stack, remediation_id) == ["approve"]


async def test_a_decision_whose_sender_died_is_settled_once_together_moved_on(
    database_url: str, make_stack: StackFactory
) -> None:
    """A replica won the click and died; Together no longer awaits a decision: the next poll
    says so in the thread and removes the buttons (it was stuck "deciding" for ever)."""
    stack = await watched_stack(make_stack, database_url=database_url)
    remediation_id, message = await pending_remediation(stack)
    watch_store = WatchStore(stack.runtime.store)
    record_id = buttons(message)["approve_remediation"]
    won = await watch_store.decide_remediation(
        record_id,
        from_decisions={RemediationDecision.AWAITING},
        to=RemediationDecision.DECIDING,
        decided_by=BOB,
    )
    assert won is not None
    # Both at once for the watcher: a poll between them would find the decision stale while
    # Together still awaits one, and rightly reopen it.
    async with polls_held(stack):
        async with stack.runtime.store.engine.begin() as conn:  # its sender died long ago
            await conn.execute(
                update(remediations)
                .where(remediations.c.id == record_id)
                .values(updated_at=datetime.now(UTC) - STALE_DECISION - timedelta(seconds=1))
            )
        stack.together.remediations.resolve(remediation_id, Resolution(state="PENDING"))
    note = await stack.slack.wait_for(
        lambda: next((t for t in thread(stack, message) if "no longer awaits" in t), None),
        within=10,
    )
    assert "SUCCEEDED" in note or "PENDING" in note or "RUNNING" in note, note
    root = stack.slack.message(NOTIFY, message.ts)
    assert root is not None and not buttons(root)
    assert "Already decided at Together" in readable_text(root)
    assert decisions_sent(stack, remediation_id) == []


# ---- 8. one vanished remediation does not blind the watcher -----------------------------


@pytest.mark.parametrize("how", ["purged", "cluster-deleted"])
async def test_a_vanished_remediation_is_closed_and_the_poll_goes_on(
    database_url: str, make_stack: StackFactory, how: str
) -> None:
    """A followed remediation answers 404 (purged at Together, or its cluster deleted): its
    message says so without buttons, it is not asked for again, and a new remediation on
    another cluster is still posted."""
    stack = await watched_stack(make_stack, database_url=database_url)
    gone_id, gone = await pending_remediation(stack)
    if how == "purged":
        stack.together.remediations.items.pop(gone_id)
    else:
        assert stack.together.remove(CLUSTER)
    note = await stack.slack.wait_for(
        lambda: next((t for t in thread(stack, gone) if "no longer has" in t), None), within=10
    )
    assert "purged" in note
    root = stack.slack.message(NOTIFY, gone.ts)
    assert root is not None and not buttons(root)
    created = stack.together.create_remediation(OTHER_CLUSTER, NewRemediation())
    await stack.slack.wait_for(
        lambda: next(iter(remediation_roots(stack, str(created["id"]))), None), within=10
    )
    asked = len(_gets_of(stack, gone_id))
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(_gets_of(stack, gone_id)) == asked == 1  # closed: never asked for again
    assert len(thread(stack, gone)) == 1


OTHER_CLUSTER = "tc-h200-ondemand"


def _gets_of(stack: LocalStack, remediation_id: str) -> list[object]:
    return [
        call
        for call in stack.together.requests
        if call.method == "GET" and call.path.endswith(f"/remediations/{remediation_id}")
    ]


# ---- 5. a root posted as the store goes keeps its edits and replies -------------------


async def test_a_remediation_posted_as_the_store_goes_is_edited_and_followed_after(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store goes the moment the remediation's root is posted (before its ts is
    stored): once it is back the ts is recorded, so the decision edits that root and the
    note and progress land in its thread; posted once."""
    stack = await watched_stack(make_stack, database_url=database_url)
    outage = StoreOutage(stack.runtime.store)

    def on_post(event: FakeEvent) -> None:
        if isinstance(event, MessagePosted) and event.message.channel == NOTIFY:
            outage.start()

    unsubscribe = stack.slack.subscribe(on_post)
    remediation_id, message = await pending_remediation(stack)
    unsubscribe()
    await asyncio.sleep(WATCH_EVERY * 2)  # polls fail meanwhile
    outage.end()
    watch_store = WatchStore(stack.runtime.store)

    async def ts_recorded() -> bool:
        record = await watch_store.get_remediation(buttons(message)["approve_remediation"])
        return record is not None and record.ts == message.ts

    await poll_until(ts_recorded, within=10)
    await press(stack, message, BOB, "approve_remediation")
    root = await stack.slack.wait_for(
        lambda: (m := stack.slack.message(NOTIFY, message.ts)) and not buttons(m) and m
    )
    assert "Approved" in readable_text(root)
    await stack.slack.wait_for(
        lambda: any("SUCCEEDED" in t for t in thread(stack, message)), within=15
    )
    assert len(remediation_roots(stack, remediation_id)) == 1
    assert decisions_sent(stack, remediation_id) == ["approve"]


# ---- 6. /healthz probes what a change needs ---------------------------------------------


async def test_healthz_is_not_ok_while_the_sqlite_disk_is_full(make_stack: StackFactory) -> None:
    """SQLite's file can grow no more (``max_page_count`` at its size: SQLite's own "database
    or disk is full"), and a change is refused: /healthz says 503, and 200 again once there
    is room. (Its probe used to be an UPDATE matching no row, which needs no room.)"""
    stack = await make_stack()
    store = stack.runtime.store
    full = [True]

    def no_room(dbapi_connection: Any, _record: Any) -> None:
        if full[0]:
            pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(store.engine.sync_engine, "connect", no_room)
    await store.reconnect()  # every connection from now on: the file cannot grow
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        for size in (2000, 400, 40, 1):  # use up the free room inside the file
            with pytest.raises(StoreUnavailable, match="full"):
                for n in range(10_000):
                    await store.remember_delivery(f"filler-{size}-{n}-" + "x" * size)
        text = await command(stack, TOGETHER_SCALE_UP)
        assert STORE_UNAVAILABLE_TEXT in text.text  # a change is refused …
        assert (await client.get("/healthz")).status_code == 503  # … and health says so
        full[0] = False
        await store.reconnect()
        assert (await client.get("/healthz")).status_code == 200


async def test_a_request_root_posted_as_the_store_goes_is_stored_and_followed_after(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store goes the moment a request's root is posted: its prompt is still posted and
    the requester told it waits for approval (true: it is stored); once the store is back
    where both are is recorded, so the approval edits the root and the thread has the
    decision note and the result. One change sent."""
    stack = await make_stack(database_url=database_url, **FAST)
    outage = StoreOutage(stack.runtime.store)

    def on_root(event: FakeEvent) -> None:
        message = getattr(event, "message", None)
        if isinstance(event, MessagePosted) and message and not message.is_reply:
            outage.start()

    unsubscribe = stack.slack.subscribe(on_root)
    answer = await command(stack, E2E_SCALE)
    unsubscribe()
    assert "waiting for approval" in answer.text, answer.text
    outage.end()
    record = await newest_request(stack)
    assert record is not None

    async def stored() -> bool:
        current = await stack.runtime.store.get_request(record.id)
        return current is not None and bool(current.root_ts and current.prompt_ts)

    await poll_until(stored, within=10)
    await click(stack, record.id)
    done = await wait_terminal(stack, record.id)
    assert done.state is S.SUCCEEDED
    await settle(stack)
    texts = thread_texts(stack, done)
    assert any("Approved" in t or "approved" in t for t in texts), texts
    root = stack.slack.message(INCIDENT, done.root_ts or "")
    assert root is not None
    assert root.text.startswith("[done]"), root.text
    assert len(stack.e2e.calls("action", "PUT")) == 1


# ---- 4. a decision whose commit answer was lost is read back before it is told ---------

SCALE_NEEDS_TWO = DEMO_POLICY.replace(
    "  break_glass: true\n",
    "  break_glass: true\n  rules:\n"
    "    - projects: [e2e-delhi]\n      kinds: [scale_cluster]\n      approvers: 2\n",
)
assert SCALE_NEEDS_TWO != DEMO_POLICY
REQUEST_WRITE = "UPDATE gpuops_change_requests"  # the decision's compare-and-set


async def _scale_request(make_stack: StackFactory, **options: Any) -> tuple[LocalStack, Opened]:
    stack = await make_stack(**options)
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    return stack, opened


async def _events(stack: LocalStack, request_id: str) -> list[str]:
    entries = await stack.runtime.store.list_audit(request_id=request_id, limit=100)
    return sorted(entry.event for entry in entries)


async def _told(stack: LocalStack, opened: Opened, user: str, action_id: str) -> str:
    """``user`` presses ``action_id`` on the prompt; the first answer they get."""
    seen = len(stack.slack.ephemerals_for(user))
    await press_prompt(stack, opened, user, action_id)
    return (await next_ephemeral(stack, user, seen)).text


def _prompt_text(stack: LocalStack, opened: Opened) -> str:
    prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
    return readable_text(prompt) if prompt is not None else ""


async def test_an_approval_whose_commit_answer_was_lost_is_told_recorded_and_counts_once(
    make_stack: StackFactory,
) -> None:
    """Issue #32.1, SQLite (the PostgreSQL cell, lost at the wire, is in test_db_faults):
    a 2-approver rule; bob's approval commits, the answer is lost. He is told "recorded:
    1 of 2" (read back), the approval is audited in the same transaction, the prompt is
    redrawn, and carol's approval then sends it: once, on two approvals."""
    stack, opened = await _scale_request(make_stack, policy_yaml=SCALE_NEEDS_TWO)
    StoreOutage(stack.runtime.store).lose_commit_answer(REQUEST_WRITE)
    told = await _told(stack, opened, BOB, "approve_request")
    assert told == f"Your approval of {opened.id} is recorded: 1 of 2.", told
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == [BOB]
    assert await _events(stack, opened.id) == ["approval_added", "requested"]
    await stack.slack.wait_for(lambda: "1 of 2: <@U02BOB>" in _prompt_text(stack, opened))
    assert stack.e2e.calls("action", "PUT") == []
    await press_prompt(stack, opened, CAROL)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert len(stack.e2e.calls("action", "PUT")) == 1
    done = await stack.runtime.store.get_request(opened.id)
    assert done is not None and done.approvers == [BOB, CAROL] and done.decided_by == CAROL


async def test_an_approval_cut_off_before_its_commit_is_told_to_press_again(
    database_url: str, make_stack: StackFactory
) -> None:
    """The store fails before the approval's COMMIT (rolled back): bob is told it was not
    recorded and to press again — no approver, no audit entry — and his next press counts."""
    stack, opened = await _scale_request(
        make_stack, database_url=database_url, policy_yaml=SCALE_NEEDS_TWO
    )
    StoreOutage(stack.runtime.store).lose_commit_answer(REQUEST_WRITE, committed=False)
    told = await _told(stack, opened, BOB, "approve_request")
    assert f"Your approval of {opened.id} was not recorded" in told, told
    assert "Press the button again" in told and STORE_UNAVAILABLE_TEXT not in told
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == []
    assert await _events(stack, opened.id) == ["requested"]
    again = await _told(stack, opened, BOB, "approve_request")
    assert again == f"Your approval of {opened.id} is recorded: 1 of 2.", again


async def test_the_last_approval_whose_commit_answer_was_lost_is_sent_once(
    make_stack: StackFactory,
) -> None:
    """One approver needed; bob's approval (approver, state and audit in one transaction)
    commits and its answer is lost: read back as approved by him, it is sent, once."""
    stack, opened = await _scale_request(make_stack)
    StoreOutage(stack.runtime.store).lose_commit_answer(REQUEST_WRITE)
    seen = len(stack.slack.ephemerals_for(BOB))
    await press_prompt(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert len(stack.e2e.calls("action", "PUT")) == 1
    assert not any(STORE_UNAVAILABLE_TEXT in e.text for e in stack.slack.ephemerals_for(BOB)[seen:])
    assert (await _events(stack, opened.id)).count("approved") == 1


async def test_a_cancel_whose_commit_answer_was_lost_is_shown_as_cancelled(
    make_stack: StackFactory,
) -> None:
    """The requester's cancel commits and its answer is lost: read back, it is told as any
    cancel (the prompt loses its buttons), never "nothing was changed". Deny and a refusal
    at approval take the same path (``Settling.settle_decision``)."""
    stack, opened = await _scale_request(make_stack)
    StoreOutage(stack.runtime.store).lose_commit_answer(REQUEST_WRITE)
    seen = len(stack.slack.ephemerals_for(DAVE))
    await press_prompt(stack, opened, DAVE, "cancel_request")
    prompt = await stack.slack.wait_for(
        lambda: (
            (m := stack.slack.message(opened.channel, opened.prompt_ts or ""))
            and not buttons(m)
            and m
        )
    )
    assert prompt is not None
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.CANCELLED
    assert not any(
        STORE_UNAVAILABLE_TEXT in e.text for e in stack.slack.ephemerals_for(DAVE)[seen:]
    )
