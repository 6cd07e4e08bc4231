"""Change freezes over real HTTP (SPEC §8), on SQLite and PostgreSQL: the refusal names the
freeze and its end; an admin's override goes through the usual approvals, audited and
announced; a freeze that begins after a request was made stops it at approval and at
sending; a weekly window in a time zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from tests.conftest import StackFactory
from tests.support.guard_kit import absolute_freeze, answer_to, guard_policy
from tests.support.slack_support import input_block, opened_modal
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CHANNEL,
    DAVE,
    audit_trail,
    click,
    poll_until,
    request,
    wait_mirror,
    wait_root,
    wait_state,
)

SCALE = "action e2e-delhi 101 scale_cluster additional_nodes=2"


async def frozen_stack(
    make_stack: StackFactory, database_url: str | None, start: datetime, end: datetime
) -> LocalStack:
    freeze = absolute_freeze("year-end", start, end)
    return await make_stack(policy_yaml=guard_policy(freeze), database_url=database_url)


async def test_a_change_during_a_freeze_is_refused_with_the_freeze_and_its_end(
    make_stack: StackFactory,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    end = now + timedelta(days=1)
    stack = await frozen_stack(make_stack, None, now - timedelta(hours=1), end)
    text = await answer_to(stack, DAVE, SCALE)
    until = end.strftime("%Y-%m-%d %H:%M UTC")
    assert f"e2e-delhi is frozen (year-end) until {until}" in text
    assert 'An admin may add override="why"' in text
    not_admin = await answer_to(stack, DAVE, f'{SCALE} override="please"')
    assert "overriding a freeze needs admin" in not_admin
    assert await stack.runtime.store.list_requests() == []


async def test_an_admins_override_goes_through_approval_audited_and_announced(
    make_stack: StackFactory, database_url: str
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(
        make_stack, database_url, now - timedelta(hours=1), now + timedelta(days=1)
    )
    opened = await request(stack, ALICE, f'{SCALE} override="incident 42 needs capacity"')
    root = stack.slack.message(CHANNEL, opened.root_ts)
    assert root is not None and "freeze *year-end* overridden by <@U01ALICE>" in str(root.blocks)
    announced = await wait_mirror(stack, opened, "Freeze override")  # in the notify channel
    assert "overrode year-end" in announced.text and "incident 42 needs capacity" in announced.text
    await click(stack, opened, BOB)
    await wait_root(stack, opened, "done")
    assert len(stack.e2e.calls("action", "PUT")) == 1
    trail = await audit_trail(stack.runtime.store, opened.id)
    assert (ALICE, "freeze_override", "year-end") in trail


async def test_a_freeze_that_began_after_the_request_stops_it_at_approval(
    make_stack: StackFactory, database_url: str
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(
        make_stack, database_url, now + timedelta(minutes=10), now + timedelta(days=1)
    )
    opened = await request(stack, DAVE, SCALE)
    stack.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=20)
    await click(stack, opened, BOB)
    record = await wait_state(stack.runtime.store, opened.id, S.FAILED)
    assert record.result_message is not None and "frozen (year-end)" in record.result_message
    assert stack.e2e.calls("action", "PUT") == []


async def test_a_request_approved_before_a_freeze_is_refused_at_sending(
    make_stack: StackFactory, database_url: str
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(
        make_stack, database_url, now + timedelta(minutes=10), now + timedelta(days=1)
    )
    opened = await request(stack, DAVE, SCALE)
    store = stack.runtime.store
    # approved before the freeze; its sending was delayed (its replica stopped, say)
    approved = await store.transition(
        opened.id, from_states={S.PENDING}, to=S.APPROVED, decided_by=BOB
    )
    assert approved is not None
    stack.runtime.workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=20)
    await stack.runtime.workflow.execute(opened.id, actor=BOB)
    record = await wait_state(store, opened.id, S.FAILED)
    assert record.result_message is not None
    assert record.result_message.startswith("not sent: e2e-delhi is frozen (year-end)")
    assert stack.e2e.calls("action", "PUT") == []


async def test_a_weekly_freeze_holds_in_its_time_zone(make_stack: StackFactory) -> None:
    weekend = (
        "  - name: weekend\n    projects: [e2e-delhi]\n"
        '    weekly: {days: [sat, sun], from: "00:00", to: "24:00", timezone: Europe/Berlin}\n'
    )
    stack = await make_stack(policy_yaml=guard_policy(weekend))
    # Saturday 2026-12-05 00:30 in Berlin is Friday 23:30 UTC; the weekend ends Sunday 23:00 UTC
    stack.runtime.workflow.clock = lambda: datetime(2026, 12, 4, 23, 30, tzinfo=UTC)
    text = await answer_to(stack, DAVE, SCALE)
    assert "e2e-delhi is frozen (weekend) until 2026-12-06 23:00 UTC" in text
    stack.runtime.workflow.clock = lambda: datetime(2026, 12, 4, 22, 30, tzinfo=UTC)
    opened = await request(stack, DAVE, SCALE)  # Friday 23:30 in Berlin: not frozen
    assert opened.prompt_ts is not None


async def test_the_form_offers_an_admin_the_override_input_during_a_freeze(
    make_stack: StackFactory,
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(make_stack, None, now - timedelta(hours=1), now + timedelta(days=1))
    await stack.sender.command(DAVE, CHANNEL, "action e2e-delhi 101 scale_cluster")
    operator_form = await opened_modal(stack, DAVE, "gpu_action")
    assert "override" not in [b.get("block_id") for b in operator_form.blocks]
    await stack.sender.command(ALICE, CHANNEL, "action e2e-delhi 101 scale_cluster")
    view = await opened_modal(stack, ALICE, "gpu_action")
    hint = input_block(view, "override")["hint"]["text"]
    assert "e2e-delhi is frozen (year-end)" in hint
    values: dict[str, str | int | list[str] | None] = {
        "additional_nodes": "1",
        "override": "capacity for incident 42",
    }
    submitted = await stack.sender.view_submission(ALICE, view.id, values)
    assert submitted.status == 200 and submitted.json is None, submitted.json
    store = stack.runtime.store

    async def opened() -> bool:
        return len(await store.list_requests()) == 1

    await poll_until(opened)
    requests = await store.list_requests()
    assert requests[0].state is S.PENDING and requests[0].requester == ALICE
    trail = await audit_trail(stack.runtime.store, requests[0].id)
    assert (ALICE, "freeze_override", "year-end") in trail
