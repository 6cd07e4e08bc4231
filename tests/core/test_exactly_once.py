"""Exactly once on the core harness (SPEC §5): decisions racing each other in one process
and across two and three replicas on one store send a change at most once, and every delivery key
is first seen once. (The same races over real HTTP stay in tests/integration.)"""

from __future__ import annotations

import asyncio

import pytest

from bot.core.store import RequestState as S
from tests.core.conftest import CoreFactory
from tests.support.core_harness import ALICE, BOB, CAROL, CHANNEL, DAVE, Core
from tests.support.guard_kit import guard_policy

SCALE = {"additional_nodes": "1"}


async def test_two_approvers_at_once_execute_once(any_core: Core) -> None:
    core = any_core
    for cluster in ("101", "103", "104"):
        opened = await core.open(DAVE, "e2e-delhi", cluster, "scale_cluster", SCALE)
        answers = await asyncio.gather(core.approve(BOB, opened.id), core.approve(CAROL, opened.id))
        assert answers.count(None) == 1  # the other is told it was already approved
        assert (await core.record(opened.id)).state is S.SUCCEEDED
        trail = await core.events(opened.id)
        assert trail.count("approved") == 1 and trail.count("executing") == 1
    assert len(core.e2e.script.of("apply")) == 3


async def test_the_same_click_twice_at_once_executes_once(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    await asyncio.gather(*(core.approve(BOB, opened.id) for _ in range(3)))
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert len(core.e2e.script.of("apply")) == 1
    assert core.notifier.events(opened.id).count("approved") == 1


async def test_approve_and_cancel_at_once_either_runs_once_or_never(any_core: Core) -> None:
    core = any_core
    for cluster in ("101", "103", "104", "105"):
        opened = await core.open(DAVE, "e2e-delhi", cluster, "scale_cluster", SCALE)
        before = len(core.e2e.script.of("apply"))
        await asyncio.gather(core.approve(BOB, opened.id), core.cancel(DAVE, opened.id))
        record = await core.record(opened.id)
        sent = len(core.e2e.script.of("apply")) - before
        assert (record.state, sent) in {(S.SUCCEEDED, 1), (S.CANCELLED, 0)}
        ended = [e for e in await core.events(opened.id) if e in ("approved", "cancelled")]
        assert len(ended) == 1


@pytest.mark.parametrize("replicas", [2, 3])
async def test_replicas_deciding_at_once_execute_once(any_core: Core, replicas: int) -> None:
    """Each replica (a workflow of its own on the one store) takes one approver's click at
    the same moment: one approval wins, one change is sent, the others are told."""
    core = any_core
    others = [await core.replica(f"core-{n}") for n in range(1, replicas)]
    approvers = (BOB, CAROL, ALICE)[:replicas]
    for cluster in ("101", "103", "104"):
        opened = await core.open(DAVE, "e2e-delhi", cluster, "scale_cluster", SCALE)
        answers = await asyncio.gather(
            core.approve(BOB, opened.id),
            *(
                other.decide(user=user, channel=CHANNEL, request_id=opened.id, decision="approve")
                for other, user in zip(others, approvers[1:], strict=True)
            ),
        )
        assert answers.count(None) == 1, answers  # the others are told who won
        assert all("already approved" in str(a) for a in answers if a is not None), answers
        assert (await core.record(opened.id)).state is S.SUCCEEDED
        trail = await core.events(opened.id)
        assert trail.count("approved") == 1 and trail.count("executing") == 1
    assert len(core.e2e.script.of("apply")) == 3


async def test_the_last_two_approvals_of_a_rule_at_once_on_two_replicas_send_once(
    make_core: CoreFactory, database_url: str
) -> None:
    core = await make_core(policy_yaml=guard_policy(), database_url=database_url)
    replica = await core.replica("core-b")
    for day in (12, 11, 10):  # each end earlier than the last: decommissions
        end = {"reservation_end_time": f"2027-06-{day}T00:00:00Z"}
        opened = await core.open(DAVE, "together-prod", "tc-h100-reserved", "update", end)
        await asyncio.gather(
            core.approve(BOB, opened.id),
            replica.decide(user=CAROL, channel=CHANNEL, request_id=opened.id, decision="approve"),
        )
        record = await core.record(opened.id)
        assert sorted(record.approvers) == [BOB, CAROL]
        assert record.state is S.SUCCEEDED
        trail = await core.events(opened.id)
        assert trail.count("approved") == 1 and trail.count("executing") == 1
    assert len(core.together.script.of("apply")) == 3


async def test_a_decision_redelivered_after_it_ran_does_nothing_again(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    assert await core.approve(BOB, opened.id) is None
    again = await core.approve(BOB, opened.id)
    assert again is not None and f"{opened.id} was already approved by" in str(again)
    assert len(core.e2e.script.of("apply")) == 1


async def test_a_delivery_key_is_first_seen_once_under_concurrency(any_core: Core) -> None:
    core = any_core
    firsts = await asyncio.gather(*(core.ops.first_delivery("command:abc") for _ in range(8)))
    assert firsts.count(True) == 1
    assert await core.ops.first_delivery("command:other")


async def test_a_cancel_racing_an_admins_cancel_ends_it_once(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    answers = await asyncio.gather(core.cancel(DAVE, opened.id), core.cancel(ALICE, opened.id))
    assert answers.count(None) == 1
    assert core.notifier.events(opened.id) == ["cancelled"]
    assert (await core.events(opened.id)).count("cancelled") == 1
