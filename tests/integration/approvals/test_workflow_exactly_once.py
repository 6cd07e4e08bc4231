"""Exactly once (SPEC §5): a click delivered twice (one after the other, or both at the same
moment), two approvers clicking at once, two (and three: issue #34) bot replicas on one
PostgreSQL database each receiving one of the clicks, and Slack's retries of events and
slash commands — every time the provider sees one call. The races run many rounds, each on
a fresh request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from bot.core.store import RequestState as S
from bot.local.demo.stack import LocalStack
from bot.local.slack.sender import SlackSender
from tests.conftest import StackFactory
from tests.support.slack_support import roots
from tests.support.workflow_kit import (
    ALICE,
    BOB,
    CAROL,
    CHANNEL,
    DAVE,
    Opened,
    click,
    next_ephemeral,
    open_direct,
    twice_at_once_sender,
    wait_mirror,
    wait_reply,
    wait_state,
)

ROUNDS = 50
REPLICA_ROUNDS = 20
THREE_REPLICA_ROUNDS = 8  # issue #34: the race of three, kept lean
APPROVERS = (BOB, CAROL, ALICE)
RACE_ROUNDS = 20
E2E_CLUSTERS = ("101", "103", "104", "105", "106")
TOGETHER_CLUSTER = "tc-h200-ondemand"


async def fresh_request(stack: LocalStack, round_no: int) -> Opened:
    """A change that needs approval: mostly E2E scale_cluster on a rotating cluster, every
    third round a Together cluster_type flip."""
    if round_no % 3 == 2:
        current = stack.together.clusters[TOGETHER_CLUSTER]["cluster_type"]
        target = "SLURM" if current == "KUBERNETES" else "KUBERNETES"
        return await open_direct(
            stack, DAVE, "together-prod", TOGETHER_CLUSTER, "update", {"cluster_type": target}
        )
    cluster = E2E_CLUSTERS[round_no % len(E2E_CLUSTERS)]
    return await open_direct(
        stack, DAVE, "e2e-delhi", cluster, "scale_cluster", {"additional_nodes": "1"}
    )


def provider_writes(stack: LocalStack) -> int:
    return len(stack.e2e.calls("action", "PUT")) + len(stack.together.calls("update", "PUT"))


async def run_rounds(
    stack: LocalStack, rounds: int, approve: Callable[[Opened], Awaitable[None]]
) -> None:
    """Per round: reset the simulators' logs, open a request, let ``approve`` click (it
    returns when every delivery is acknowledged and every loser answered), wait for the end
    of the request, and count the provider calls."""
    for round_no in range(rounds):
        stack.e2e.requests.clear()
        stack.together.requests.clear()
        opened = await fresh_request(stack, round_no)
        await approve(opened)
        await wait_mirror(stack, opened, "Change done")  # the last thing a request does
        record = await stack.runtime.store.get_request(opened.id)
        assert record is not None and record.state is S.SUCCEEDED, record
        assert provider_writes(stack) == 1, f"round {round_no}: {provider_writes(stack)} PUTs"


async def test_a_click_redelivered_by_slack_executes_once(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(database_url=database_url, transition_seconds=0)

    async def approve(opened: Opened) -> None:
        first = await click(stack, opened, BOB)
        again = await stack.sender.redeliver(first)
        assert again.status == 200

    await run_rounds(stack, ROUNDS, approve)


async def test_the_same_click_delivered_twice_at_once_executes_once(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(database_url=database_url, transition_seconds=0)
    async with twice_at_once_sender(stack) as (sender, transport):

        async def approve(opened: Opened) -> None:
            await click(stack, opened, BOB, sender=sender)

        await run_rounds(stack, ROUNDS, approve)
    assert transport.statuses == [200] * (2 * ROUNDS)


def approver_race(
    stack: LocalStack, senders: tuple[SlackSender, ...], winners: list[str]
) -> Callable[[Opened], Awaitable[None]]:
    """Bob (through the first sender), Carol (the second) and, with a third sender, Alice
    press Approve at the same moment; each who lost is told who won."""
    users = APPROVERS[: len(senders)]

    async def approve(opened: Opened) -> None:
        seen = {user: len(stack.slack.ephemerals_for(user)) for user in users}
        await asyncio.gather(
            *(click(stack, opened, user, sender=s) for user, s in zip(users, senders, strict=True))
        )
        approved = await wait_reply(stack, opened, "Approved by")
        [winner] = [user for user in users if f"<@{user}>" in approved.text]
        winners.append(winner)
        for loser in (user for user in users if user != winner):
            told = await next_ephemeral(stack, loser, seen[loser])
            assert f"{opened.id} was already approved by" in told.text, told.text
            assert winner in told.text
        assert len(stack.slack.ephemerals_for(winner)) == seen[winner]

    return approve


async def test_two_approvers_clicking_at_once_execute_once(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(database_url=database_url, transition_seconds=0)
    winners: list[str] = []
    await run_rounds(stack, ROUNDS, approver_race(stack, (stack.sender, stack.sender), winners))
    assert len(winners) == ROUNDS


async def test_approve_and_cancel_at_once_either_runs_once_or_never(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(database_url=database_url, transition_seconds=0)
    for round_no in range(RACE_ROUNDS):
        stack.e2e.requests.clear()
        stack.together.requests.clear()
        opened = await fresh_request(stack, round_no)
        seen = {user: len(stack.slack.ephemerals_for(user)) for user in (BOB, DAVE)}
        await asyncio.gather(
            click(stack, opened, BOB), click(stack, opened, DAVE, "cancel_request")
        )
        record = await wait_state(stack.runtime.store, opened.id, S.SUCCEEDED, S.CANCELLED)
        if record.state is S.CANCELLED:
            told = await next_ephemeral(stack, BOB, seen[BOB])
            assert f"{opened.id} was already cancelled by" in told.text, told.text
            await wait_mirror(stack, opened, "Change cancelled")
            assert provider_writes(stack) == 0, f"round {round_no}: cancelled yet sent"
        else:
            told = await next_ephemeral(stack, DAVE, seen[DAVE])
            assert f"{opened.id} was already approved by" in told.text, told.text
            await wait_mirror(stack, opened, "Change done")
            assert provider_writes(stack) == 1, f"round {round_no}: {provider_writes(stack)}"


async def test_two_replicas_on_one_postgres_database_execute_once(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await make_stack(
        database_url=pg_database_url, transition_seconds=0, instance_id="replica-a"
    )
    replica_b = await stack.start_replica("replica-b")
    assert replica_b.runtime.workflow.instance_id == "replica-b"
    assert replica_b.runtime.store is not stack.runtime.store
    winners: list[str] = []
    race = approver_race(stack, (stack.sender, replica_b.sender), winners)
    await run_rounds(stack, REPLICA_ROUNDS, race)
    assert len(winners) == REPLICA_ROUNDS
    # one click, delivered at the same moment to replica A and (a retry) to replica B
    async with twice_at_once_sender(stack, second_url=replica_b.events_url) as (both, wire):

        async def approve(opened: Opened) -> None:
            await click(stack, opened, BOB, sender=both)

        await run_rounds(stack, REPLICA_ROUNDS, approve)
    assert wire.statuses == [200] * (2 * REPLICA_ROUNDS)
    executed = [
        e for e in await stack.runtime.store.list_audit(limit=1000) if e.event == "executing"
    ]
    assert len(executed) == 2 * REPLICA_ROUNDS  # one execution per request, never two


async def test_three_replicas_on_one_postgres_database_execute_once(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    """Issue #34: three replicas, each taking one approver's click at the same moment."""
    stack = await make_stack(
        database_url=pg_database_url, transition_seconds=0, instance_id="replica-a"
    )
    others = [await stack.start_replica(f"replica-{n}") for n in ("b", "c")]
    assert len({r.runtime.store for r in others} | {stack.runtime.store}) == 3
    winners: list[str] = []
    senders = (stack.sender, *(r.sender for r in others))
    await run_rounds(stack, THREE_REPLICA_ROUNDS, approver_race(stack, senders, winners))
    assert len(winners) == THREE_REPLICA_ROUNDS
    executed = [
        e for e in await stack.runtime.store.list_audit(limit=1000) if e.event == "executing"
    ]
    assert len(executed) == THREE_REPLICA_ROUNDS  # one execution per request, never two


async def test_an_event_retried_by_slack_is_answered_once(stack: LocalStack) -> None:
    gets = len(stack.e2e.calls("get", "GET"))
    first = await stack.sender.mention(DAVE, CHANNEL, "show e2e-delhi 101")
    event_id = json.loads(first.request_body)["event_id"]
    again = await stack.sender.mention(DAVE, CHANNEL, "", event_id=event_id, retry_num=1)
    assert first.status == again.status == 200
    assert json.loads(again.request_body)["event_id"] == event_id
    mention_ts = json.loads(first.request_body)["event"]["ts"]
    # a different mention afterwards: when it is answered, a repeat would have been too
    await stack.sender.mention(DAVE, CHANNEL, "show e2e-delhi 103", thread_ts=mention_ts)

    def answers() -> list[str]:
        return [
            m.text
            for m in stack.slack.replies(CHANNEL, mention_ts)
            if m.user == stack.slack.bot_user_id
        ]

    await stack.slack.wait_for(lambda: len(answers()) >= 2 and answers())
    assert sum("train-h100-a (101)" in t for t in answers()) == 1
    assert sum("train-a100-small (103)" in t for t in answers()) == 1
    assert len(stack.e2e.calls("get", "GET")) == gets + 2


async def test_a_slash_command_retried_by_slack_acts_once(stack: LocalStack) -> None:
    seen = len(stack.slack.ephemerals_for(DAVE))
    first = await stack.sender.command(
        DAVE, CHANNEL, "action e2e-delhi 101 add_security_group security_groups_ids=602"
    )  # needs no approval: runs at once
    again, third = await asyncio.gather(
        stack.sender.redeliver(first), stack.sender.redeliver(first, retry_num=2)
    )
    assert first.status == again.status == third.status == 200
    answer = await next_ephemeral(stack, DAVE, seen)
    assert "ran — see the thread" in answer.text
    # a later, different command: once it is answered, a repeat would have been too
    await stack.sender.command(DAVE, CHANNEL, "help")
    await next_ephemeral(stack, DAVE, seen + 1)
    assert [p.body for p in stack.e2e.calls("action", "PUT")] == [
        {"action": "add_security_group", "security_groups_ids": [602]}
    ]
    assert len(roots(stack, CHANNEL)) == 1
    assert len(await stack.runtime.store.list_requests()) == 1
    assert len(stack.slack.ephemerals_for(DAVE)) == seen + 2


async def test_a_refused_change_retried_by_slack_is_refused_and_audited_once(
    stack: LocalStack,
) -> None:
    """A retry of a refused change says nothing and records nothing a second time: its
    delivery key is claimed before the command runs."""
    mallory = "U06MALLORY"  # no grant anywhere
    first = await stack.sender.command(
        mallory, CHANNEL, "update together-prod tc-h200-ondemand num_gpus=16"
    )
    again, third = await asyncio.gather(
        stack.sender.redeliver(first), stack.sender.redeliver(first, retry_num=2)
    )
    assert first.status == again.status == third.status == 200
    answer = await next_ephemeral(stack, mallory, 0)
    assert "together-prod" in answer.text
    await stack.sender.command(mallory, CHANNEL, "help")  # once answered, a repeat would be
    await next_ephemeral(stack, mallory, 1)
    assert len(stack.slack.ephemerals_for(mallory)) == 2
    refused = [e for e in await stack.runtime.store.list_audit(limit=50) if e.actor == mallory]
    assert [e.event for e in refused] == ["refused"]
    assert await stack.runtime.store.list_requests() == []
