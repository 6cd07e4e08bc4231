"""One watcher per deployment (SPEC §7): two replicas on one PostgreSQL database — one
holds the watch lease, a click on each sends one decision; the watching replica killed →
the other holds the lease within two intervals and posts nothing twice; a restart
remembers what was posted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from bot.core.store import Lease
from bot.local.demo.stack import BotReplica, LocalStack
from bot.local.simulators.together_remediations import NewRemediation
from tests.conftest import StackFactory
from tests.support.watch_kit import (
    decisions_sent,
    pending_remediation,
    press,
    remediation_roots,
    thread,
    until,
    watched_stack,
)
from tests.support.workflow_kit import BOB, CAROL, buttons

FAILOVER_EVERY = 1.0  # seconds; the takeover bound below is two of these


async def two_watching_replicas(
    make_stack: StackFactory, database_url: str, every: float
) -> tuple[LocalStack, BotReplica, BotReplica]:
    stack = await watched_stack(
        make_stack,
        database_url=database_url,
        start_background=False,  # the stack's own bot only answers Slack
        extra_settings={"gpuops_watch_every_seconds": every},
    )
    first = await stack.start_replica("replica-a", start_background=True)
    second = await stack.start_replica("replica-b", start_background=True)
    return stack, first, second


def holder(*replicas: BotReplica) -> BotReplica | None:
    holding = [r for r in replicas if r.runtime.watcher.holding]
    assert len(holding) <= 1, "two replicas watch at once"
    return holding[0] if holding else None


async def test_two_replicas_one_watcher_and_one_decision_from_clicks_on_each(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack, first, second = await two_watching_replicas(make_stack, pg_database_url, 0.3)
    remediation_id, message = await pending_remediation(stack)
    assert holder(first, second) is not None
    await asyncio.gather(
        press(stack, message, BOB, "approve_remediation", sender=first.sender),
        press(stack, message, CAROL, "approve_remediation", sender=second.sender),
    )
    await stack.slack.wait_for(
        lambda: (m := stack.slack.message(message.channel, message.ts)) and not buttons(m)
    )
    await stack.slack.wait_for(lambda: any("SUCCEEDED" in t for t in thread(stack, message)))
    assert decisions_sent(stack, remediation_id) == ["approve"]
    assert len(remediation_roots(stack, remediation_id)) == 1


async def test_the_watching_replica_killed_the_other_takes_over_within_two_intervals(
    pg_database_url: str, make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, first, second = await two_watching_replicas(make_stack, pg_database_url, FAILOVER_EVERY)
    before_id, before = await pending_remediation(stack)
    await until(lambda: holder(first, second) is not None)
    watching = holder(first, second)
    assert watching is not None
    other = second if watching is first else first

    async def dies_holding(name: str, holder_id: str) -> None:
        """A killed process releases nothing: its lease runs out."""

    last_expiry: list[datetime] = []
    take_lease = watching.runtime.store.take_lease

    async def taking(name: str, holder_id: str, ttl_seconds: float) -> Lease | None:
        lease = await take_lease(name, holder_id, ttl_seconds)
        if lease is not None:
            last_expiry.append(lease.expires_at)
        return lease

    asks: list[tuple[datetime, bool]] = []
    acquire_lease = other.runtime.store.acquire_lease

    async def asking(name: str, holder_id: str, ttl_seconds: float) -> bool:
        started = datetime.now(UTC)
        held = await acquire_lease(name, holder_id, ttl_seconds)
        asks.append((started, held))
        return held

    monkeypatch.setattr(watching.runtime.store, "take_lease", taking)
    await until(lambda: bool(last_expiry))  # a renewal went through the recorder
    monkeypatch.setattr(other.runtime.store, "acquire_lease", asking)
    monkeypatch.setattr(watching.runtime.store, "release_lease", dies_holding)
    killed_at = datetime.now(UTC)
    await watching.stop()
    stack.replicas.remove(watching)
    await until(lambda: other.runtime.watcher.holding, within=30)
    # Within two intervals, counted in what the watchers did rather than on a clock (a busy
    # machine only makes the standby ask less often): the dead holder's lease ran at most one
    # and a half intervals past the kill; the standby asks every half interval; every ask
    # before that expiry was refused and the first one after it took the lease.
    assert other.runtime.watcher.tick_seconds == FAILOVER_EVERY / 2
    expiry = last_expiry[-1]
    assert (expiry - killed_at).total_seconds() <= 1.5 * FAILOVER_EVERY
    refused = [at for at, held in asks if not held]
    assert asks and asks[-1][1] and all(at < expiry for at in refused), (asks, expiry)
    assert sum(1 for at, _ in asks if at >= expiry) <= 1, (asks, expiry)

    after_id, after = await pending_remediation(stack, NewRemediation(node=1))
    await asyncio.sleep(3 * FAILOVER_EVERY)  # several polls by the new watcher
    assert len(remediation_roots(stack, before_id)) == 1
    assert len(remediation_roots(stack, after_id)) == 1
    assert set(buttons(before)) == {"approve_remediation", "reject_remediation"}
    await press(stack, after, BOB, "approve_remediation", sender=other.sender)
    await stack.slack.wait_for(lambda: any("SUCCEEDED" in t for t in thread(stack, after)))
    assert decisions_sent(stack, after_id) == ["approve"]


async def test_a_restart_remembers_what_was_posted_and_follows_it(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url)
    remediation_id, message = await pending_remediation(stack)
    await press(stack, message, BOB, "approve_remediation")
    await stack.restart_bot()
    await asyncio.sleep(0.3 * 4)  # several polls after the restart
    assert len(remediation_roots(stack, remediation_id)) == 1
    await stack.slack.wait_for(
        lambda: any("SUCCEEDED" in t for t in thread(stack, message)), within=10
    )
    states = [t for t in thread(stack, message) if "Remediation *" in t]
    assert len(states) == len(set(states)), states  # each state said once
    assert decisions_sent(stack, remediation_id) == ["approve"]
