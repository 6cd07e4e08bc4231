"""Change freezes over real HTTP (SPEC §8): the refusal names the freeze and its end; an
admin's override goes through the usual approvals, audited and announced in the thread and
the notify channel; the form offers an admin the override input. The freeze logic itself (a
freeze begun after the request stops it at approval and at sending, weekly windows in a
time zone, on SQLite and PostgreSQL) is in tests/core/test_guardrails.py."""

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
    not_admin = await answer_to(stack, DAVE, f'{SCALE} override="please, it is urgent"')
    assert "overriding a freeze needs admin" in not_admin
    assert await stack.runtime.store.list_requests() == []


async def test_an_admins_override_of_a_word_is_refused_with_the_rule(
    make_stack: StackFactory,
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(make_stack, None, now - timedelta(hours=1), now + timedelta(days=1))
    text = await answer_to(stack, ALICE, f'{SCALE} override="x"')
    assert "an override must say why it cannot wait in 10 to 500 characters; yours has 1" in text
    assert await stack.runtime.store.list_requests() == []


async def test_the_forms_override_keeps_the_rule_on_its_input(
    make_stack: StackFactory,
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(make_stack, None, now - timedelta(hours=1), now + timedelta(days=1))
    await stack.sender.command(ALICE, CHANNEL, "action e2e-delhi 101 scale_cluster")
    view = await opened_modal(stack, ALICE, "gpu_action")
    assert input_block(view, "override")["element"]["max_length"] == 500
    values: dict[str, str | int | list[str] | None] = {"additional_nodes": "1", "override": "x"}
    submitted = await stack.sender.view_submission(ALICE, view.id, values)
    assert submitted.status == 200 and submitted.json is not None
    assert submitted.json["response_action"] == "errors"
    assert "in 10 to 500 characters; yours has 1" in submitted.json["errors"]["override"]
    assert await stack.runtime.store.list_requests() == []


async def test_an_admins_override_goes_through_approval_audited_and_announced(
    make_stack: StackFactory,
) -> None:
    now = datetime.now(UTC)
    stack = await frozen_stack(make_stack, None, now - timedelta(hours=1), now + timedelta(days=1))
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
