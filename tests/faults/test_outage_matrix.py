"""Nothing lost, nothing false (issue #16): answers, remediation alerts and decisions across
store outages and Slack faults, end to end over real HTTP on SQLite and PostgreSQL.

The outage is one replica's store refusing every transaction (``StoreOutage``: the error the
store raises for a refused or reset connection), switched at the step each cell names; the
PostgreSQL-only cells through the fault proxy are in ``test_db_faults.py``. Each cell checks
what people were told (never an untrue "nothing was changed"), that nothing was sent twice,
and that what the store missed is caught up once it is back."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.store import RequestState
from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.together_remediations import NewRemediation
from tests.conftest import StackFactory
from tests.support.reliability import TOGETHER_SCALE_UP, StoreOutage, command, newest_request
from tests.support.watch_kit import (
    CLUSTER,
    NOTIFY,
    WATCH_EVERY,
    decisions_sent,
    pending_remediation,
    press,
    remediation_roots,
    thread,
    until,
    watched_stack,
)
from tests.support.workflow_kit import BOB, buttons, poll_until, readable_text, wait_state

S = RequestState


# ---- 2. a change whose call may have gone out is never "nothing was changed" -----------


async def test_a_change_sent_before_the_store_went_is_not_called_unchanged(
    database_url: str, make_stack: StackFactory
) -> None:
    """A no-approval Together scale-up whose PUT is in flight when the store goes: the
    answer says it was sent and what Together said, not "nothing was changed"; the result
    is recorded once the store is back; one PUT."""
    stack = await make_stack(database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    stack.together.faults.add(Fault(route="update", kind=FaultKind.LATENCY, seconds=0.8))
    asking = asyncio.create_task(command(stack, TOGETHER_SCALE_UP))
    await poll_until(lambda: len(stack.together.calls("update", "PUT")) == 1)
    outage.start()
    answer = await asking
    assert "nothing was changed" not in answer.text.lower(), answer.text
    assert "was sent" in answer.text and "Together accepted the update" in answer.text
    outage.end()
    record = await newest_request(stack)
    assert record is not None
    await wait_state(stack.runtime.store, record.id, S.SUCCEEDED, within=10)
    assert len(stack.together.calls("update", "PUT")) == 1


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
