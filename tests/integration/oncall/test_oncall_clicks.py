"""On-call approvers decide over real HTTP (SPEC §16): a signed click judged against who is
on call at that moment (the PagerDuty simulator's schedule rotating between request and
click, in both directions), a click in a DM copy deciding the request and every copy
edited, each fault of the on-call tool with the rule's fallback (audited), the requester
on call counted as one approval, two replicas deciding one card once."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault
from tests.conftest import StackFactory
from tests.support.oncall_kit import NIGHT, SCALE_101, dm_messages, oncall_policy
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    audit_trail,
    buttons,
    click,
    next_ephemeral,
    readable_text,
    request,
    thread_texts,
    wait_state,
)

NO_CACHE = {"gpuops_oncall_cache_seconds": 0}  # each click reads the schedule anew


async def _oncall_stack(make_stack: StackFactory, policy: str, **options: object) -> LocalStack:
    return await make_stack(policy_yaml=policy, oncall_now=NIGHT, **options)


async def test_the_on_call_approves_at_night_and_someone_off_call_is_refused(
    make_stack: StackFactory,
) -> None:
    stack = await _oncall_stack(make_stack, oncall_policy(), transition_seconds=0)
    opened = await request(stack, DAVE, SCALE_101)
    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, opened, CAROL)  # an approver by the grants, not on call
    refused = await next_ephemeral(stack, CAROL, seen)
    assert (
        f"to approve {opened.id} you must be on call now on platform-primary (up to level 2); "
        "on call now: <@U02BOB> (level 1), <@U01ALICE> (level 2). Nothing was recorded."
    ) in readable_text(refused)
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == []
    await click(stack, opened, BOB)
    done = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert done.decided_by == BOB
    assert len(stack.e2e.calls("action", "PUT")) == 1
    trail = await audit_trail(stack.runtime.store, opened.id)
    assert (CAROL, "refused", "not_on_call") in trail
    assert stack.slack.spec_problems == []


async def test_a_rotation_between_request_and_click_in_both_directions(
    make_stack: StackFactory,
) -> None:
    people = "{PBOB0001: U02BOB, PCAROL01: U03CAROL}"
    stack = await _oncall_stack(
        make_stack,
        oncall_policy(people=people, approvers="[{oncall: platform-primary}]"),
        extra_settings=NO_CACHE,
    )
    opened = await request(stack, DAVE, SCALE_101)
    stack.pagerduty.advance(10 * 3600)  # 13:00: Carol's shift begins, Bob's ends
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    told = readable_text(await next_ephemeral(stack, BOB, seen))
    assert "you were on call when it was requested, but are not now" in told
    assert "on call now: <@U03CAROL> (level 1)" in told
    await click(stack, opened, CAROL)  # not on call when it was asked: on call now
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED, S.APPROVED)
    assert record.decided_by == CAROL


async def test_a_click_in_a_dm_copy_decides_and_every_copy_is_edited(
    make_stack: StackFactory,
) -> None:
    stack = await _oncall_stack(make_stack, oncall_policy(), transition_seconds=0)
    opened = await request(stack, DAVE, SCALE_101)
    await stack.slack.wait_for(lambda: dm_messages(stack, BOB) and dm_messages(stack, ALICE))
    (alice_copy,) = dm_messages(stack, ALICE)
    dm = stack.slack.dm_channel(ALICE)
    result = await stack.sender.block_action(
        ALICE, dm, action_id="approve_request", value=opened.id, message_ts=alice_copy.ts
    )
    assert result.status == 200 and result.acked_in_time
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.decided_by == ALICE

    def all_closed() -> bool:
        copies = [*dm_messages(stack, BOB), *dm_messages(stack, ALICE)]
        prompt = stack.slack.message(opened.channel, opened.prompt_ts or "")
        return prompt is not None and all(buttons(m) == {} for m in [prompt, *copies])

    await stack.slack.wait_for(lambda: all_closed() or None)
    for copy in (*dm_messages(stack, BOB), *dm_messages(stack, ALICE)):
        assert f"Approval for {opened.id}: approved" in copy.text
    assert len(stack.e2e.calls("action", "PUT")) == 1
    trail = await audit_trail(stack.runtime.store, opened.id)
    assert (ALICE, "approved", "approved") in trail


FAULTS = [
    pytest.param({"kind": "latency", "seconds": 5}, "did not answer within 1.5 s", id="slow"),
    pytest.param({"kind": "rate_limit", "retry_after": 9}, "rate limiting gpuops", id="429"),
    pytest.param({"kind": "server_error", "status": 503}, "answered 503", id="5xx"),
]


@pytest.mark.parametrize(("fault", "said"), FAULTS)
async def test_a_fault_at_the_click_with_fallback_refuse(
    make_stack: StackFactory, fault: dict[str, object], said: str
) -> None:
    stack = await _oncall_stack(make_stack, oncall_policy(), extra_settings=NO_CACHE)
    opened = await request(stack, DAVE, SCALE_101)
    stack.pagerduty.faults.add(Fault.model_validate({**fault, "times": -1}))
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    told = readable_text(await next_ephemeral(stack, BOB, seen))
    assert said in told and "the approval rule's fallback is refuse" in told
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == []
    audit = await stack.runtime.store.list_audit(limit=100)
    fallbacks = [e for e in audit if e.event == "oncall_fallback"]
    assert [(e.actor, e.outcome, e.detail["fallback"]) for e in fallbacks] == [
        (BOB, "refused", "refuse")
    ]


async def test_unreachable_with_fallback_groups(make_stack: StackFactory) -> None:
    rule = "      usergroups: [S0PLATFORM]\n      fallback: groups\n"
    stack = await _oncall_stack(
        make_stack, oncall_policy(rule=rule), extra_settings=NO_CACHE, transition_seconds=0
    )
    opened = await request(stack, DAVE, SCALE_101)
    await stack.pagerduty.stop()  # the on-call tool is gone
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    told = readable_text(await next_ephemeral(stack, BOB, seen))
    assert "PagerDuty could not be reached" in told
    assert "falls back to user group S0PLATFORM, and you are not in it" in told
    await click(stack, opened, CAROL)  # in S0PLATFORM
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.decided_by == CAROL
    audit = await stack.runtime.store.list_audit(limit=100)
    fallbacks = [(e.actor, e.outcome) for e in audit if e.event == "oncall_fallback"]
    assert sorted(fallbacks) == sorted([(BOB, "refused"), (CAROL, "allowed")])


async def test_the_requester_on_call_counts_as_one_never_all(make_stack: StackFactory) -> None:
    rule = "      requester_on_call_counts_as: 1\n"
    slots = "[{oncall: platform-primary, max_level: 2}, {oncall: platform-primary, max_level: 2}]"
    stack = await _oncall_stack(
        make_stack, oncall_policy(rule=rule, approvers=slots), transition_seconds=0
    )
    opened = await request(stack, BOB, SCALE_101)  # Bob is on call, and asks
    seen = len(stack.slack.ephemerals_for(BOB))
    await click(stack, opened, BOB)
    told = readable_text(await next_ephemeral(stack, BOB, seen))
    assert f"Break glass on {opened.id} counts as one approval: 1 of 2" in told
    record = await stack.runtime.store.get_request(opened.id)
    assert record is not None and record.state is S.PENDING and record.approvers == [BOB]
    notes = thread_texts(stack, opened)
    assert any("the requester is on call now on platform-primary (level 1)" in t for t in notes)
    await click(stack, opened, ALICE)
    done = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert done.decided_by == ALICE and set(done.approvers) == {BOB, ALICE}


async def test_two_replicas_deciding_the_same_card_once(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await _oncall_stack(
        make_stack,
        oncall_policy(),
        database_url=pg_database_url,
        transition_seconds=0,
        instance_id="replica-a",
    )
    replica_b = await stack.start_replica("replica-b")
    opened = await request(stack, DAVE, SCALE_101)
    await asyncio.gather(
        click(stack, opened, BOB), click(stack, opened, ALICE, sender=replica_b.sender)
    )
    record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED)
    assert record.decided_by in (BOB, ALICE)
    await stack.runtime.workflow.drain()
    await replica_b.runtime.workflow.drain()
    assert len(stack.e2e.calls("action", "PUT")) == 1
    executed = [
        e for e in await stack.runtime.store.list_audit(limit=200) if e.event == "executing"
    ]
    assert len(executed) == 1
