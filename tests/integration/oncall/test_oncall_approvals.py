"""On-call approvers end to end over real HTTP (SPEC §16): signed Slack requests to the
bot, the PagerDuty and Opsgenie simulators (their schedules rotating on a clock the test
moves), the Slack stand-in. A night-time request names who is on call now and asks them."""

from __future__ import annotations

import asyncio
import functools
import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault
from bot.local.slack.server import BOT_SCOPES
from tests.conftest import StackFactory
from tests.support.oncall_kit import NIGHT, SCALE_101, oncall_policy
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    DAVE,
    DECISION_BUTTONS,
    buttons,
    readable_text,
    request,
    thread_texts,
)


@pytest.fixture
async def stack(make_stack: StackFactory) -> LocalStack:
    return await make_stack(policy_yaml=oncall_policy(), oncall_now=NIGHT)


async def test_the_prompt_says_who_is_on_call_now_and_asks_them(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None
    shown = readable_text(prompt)
    assert "on call now: <@U02BOB> (level 1), <@U01ALICE> (level 2)" in shown
    assert f"Asking <@{BOB}>, <@U01ALICE>." in shown
    (call,) = stack.pagerduty.calls("oncalls")
    assert call.query["schedule_ids[]"] == "PPLATFRM"
    assert call.headers["authorization"].startswith("Token token=")
    assert stack.slack.spec_problems == []


async def test_the_card_is_sent_by_dm_to_each_on_call_approver(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    copies = await stack.slack.wait_for(
        lambda: (
            [stack.slack.messages.get(stack.slack.dm_channel(u)) for u in (BOB, ALICE)]
            if all(stack.slack.messages.get(stack.slack.dm_channel(u)) for u in (BOB, ALICE))
            else None
        )
    )
    for dm in copies:
        assert dm is not None and len(dm) == 1
        (copy,) = dm
        assert buttons(copy) == dict.fromkeys(DECISION_BUTTONS, opened.id)
        assert f"asks for approval of `{opened.id}` in <#C0INCIDENT>" in readable_text(copy)
    stored = await stack.runtime.store.approval_copies(opened.id)
    assert sorted(c.user_id for c in stored) == sorted([BOB, ALICE])
    assert stack.slack.messages.get(stack.slack.dm_channel(DAVE)) is None  # the requester


async def test_no_decision_after_escalate_after_adds_the_next_level_once(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(
        policy_yaml=oncall_policy(rule="      escalate_after: 10m\n"), oncall_now=NIGHT
    )
    opened = await request(stack, DAVE, SCALE_101)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None
    assert "on call now: <@U02BOB> (level 1)" in readable_text(prompt)
    assert "U01ALICE" not in readable_text(prompt)  # level 2 comes after 10 minutes
    await stack.slack.wait_for(lambda: stack.slack.messages.get(stack.slack.dm_channel(BOB)))
    assert stack.slack.messages.get(stack.slack.dm_channel(ALICE)) is None

    workflow = stack.runtime.workflow
    workflow.clock = lambda: datetime.now(UTC) + timedelta(minutes=11)
    await asyncio.gather(workflow.sweep_once(), workflow.sweep_once())  # two sweeps at once
    await workflow.sweep_once()
    notes = [t for t in thread_texts(stack, opened) if "No decision after" in t]
    assert notes == [
        f"No decision after 10 min: level 2 may approve {opened.id} now; on call now: "
        "<@U02BOB> (level 1), <@U01ALICE> (level 2). Sent by DM to <@U01ALICE>."
    ]
    (copy,) = stack.slack.messages[stack.slack.dm_channel(ALICE)]
    assert buttons(copy) == dict.fromkeys(DECISION_BUTTONS, opened.id)
    assert len(stack.slack.messages[stack.slack.dm_channel(BOB)]) == 1  # not DMed twice
    assert await stack.runtime.store.escalated_levels(opened.id) == [2]


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ({"kind": "latency", "seconds": 5}, "PagerDuty did not answer within 1.5 s"),
        ({"kind": "rate_limit", "retry_after": 30}, "PagerDuty is rate limiting gpuops (429"),
    ],
)
async def test_an_on_call_fault_at_request_says_the_fallback_in_the_prompt(
    make_stack: StackFactory, fault: dict[str, object], said: str
) -> None:
    stack = await make_stack(policy_yaml=oncall_policy(), oncall_now=NIGHT)
    stack.pagerduty.faults.add(Fault.model_validate({**fault, "times": -1}))
    opened = await request(stack, DAVE, SCALE_101)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None
    shown = readable_text(prompt)
    assert f"on call now: unknown (PagerDuty schedule PPLATFRM: {said}" in shown
    assert "approvals are refused" in shown  # the rule's fallback: refuse
    assert not any(stack.slack.messages.get(stack.slack.dm_channel(u)) for u in (BOB, ALICE))


async def test_people_found_by_email_and_one_left_unmapped(make_stack: StackFactory) -> None:
    stack = await make_stack(
        policy_yaml=oncall_policy(people="{PALICE01: U01ALICE}").replace(
            "  people:", "  match_by_email: true\n  people:"
        ),
        oncall_now=NIGHT,
        slack_scopes=BOT_SCOPES | {"users:read.email"},
    )
    stack.slack.emails.pop(ALICE)  # Alice is mapped by the table, not by e-mail
    opened = await request(stack, DAVE, SCALE_101)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None
    assert "on call now: <@U02BOB> (level 1), <@U01ALICE> (level 2)" in readable_text(prompt)
    lookups = [c for c in stack.slack.calls if c.method == "users.lookupByEmail"]
    assert [c.args.get("email") for c in lookups] == ["bob@example.com"]


async def test_without_the_email_scope_the_on_call_person_is_named_unmapped(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(
        policy_yaml=oncall_policy(people="{PALICE01: U01ALICE}").replace(
            "  people:", "  match_by_email: true\n  people:"
        ),
        oncall_now=NIGHT,
    )
    opened = await request(stack, DAVE, SCALE_101)
    prompt = stack.slack.message(CHANNEL, opened.prompt_ts or "")
    assert prompt is not None
    assert (
        "on call now: <@U01ALICE> (level 2), Bob (PagerDuty user PBOB0001, level 1: no Slack user)"
        in readable_text(prompt)
    )
    refused = [c for c in stack.slack.calls if c.method == "users.lookupByEmail"]
    assert refused and all(c.error == "missing_scope" for c in refused)


async def test_home_lists_the_request_for_the_on_call_only(stack: LocalStack) -> None:
    opened = await request(stack, DAVE, SCALE_101)
    for user, waiting in ((BOB, True), (CAROL, False)):
        result = await stack.sender.app_home_opened(user)
        assert result.status == 200
        home = await stack.slack.wait_for(functools.partial(stack.slack.home_of, user))
        shown = json.dumps(home.blocks, ensure_ascii=False)
        assert "Waiting for your approval" in shown
        assert (opened.id in shown) is waiting, (user, shown)
