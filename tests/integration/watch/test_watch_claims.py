"""A watch alert whose claim was stored but never posted is posted by a later poll (issue
#32, item 5), on SQLite and PostgreSQL: the claim's commit reaches the database and its
answer is lost, in-process (``StoreOutage.lose_answer_after``) and, on PostgreSQL, at the
wire (the fault proxy forwards the claim's COMMIT and drops the server's answer); once the
claim is older than the takeover bound a poll takes it over and posts it, once. The
compare-and-set itself, replica against replica, is in ``test_watch_claim_takeover.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select

from bot.core.store import Store
from bot.core.store.watch import WatchStore, alerts
from bot.core.watch.keys import remediation_key
from bot.local.demo.stack import LocalStack
from bot.local.faults.proxy import FaultProxy
from bot.local.simulators.together_remediations import NewRemediation
from tests.conftest import PG_URL_TEMPLATE, StackFactory, create_pg_database, drop_pg_database
from tests.integration.watch.test_watch_reminders import REMINDER_POLICY, ends_in, reminders
from tests.support.reliability import StoreOutage
from tests.support.watch_kit import (
    CLUSTER,
    HEALTH_POLICY,
    NOTIFY,
    WATCH_EVERY,
    incident_roots,
    press,
    remediation_roots,
    thread,
    until,
    watched_stack,
)
from tests.support.workflow_kit import BOB

TAKEOVER = 1.0  # seconds: the test's claim takeover bound (300 by default)
PROJECT = "together-prod"
CLAIM = "INSERT INTO gpuops_watch_alerts"


async def claim_answer_lost(
    make_stack: StackFactory, database_url: str, policy: str | None = None
) -> tuple[LocalStack, StoreOutage]:
    """A watched stack whose next alert claim commits with its answer lost."""
    options = {"policy_yaml": policy} if policy is not None else {}
    stack = await watched_stack(
        make_stack,
        database_url=database_url,
        extra_settings={"gpuops_claim_takeover_seconds": TAKEOVER},
        **options,
    )
    outage = StoreOutage(stack.runtime.store)
    outage.lose_answer_after(CLAIM)
    return stack, outage


async def back_after_the_lost_answer(outage: StoreOutage) -> None:
    await until(lambda: outage.answers_lost == 1)
    outage.end()


async def unposted_claims(store: Store) -> list[str]:
    async with store.engine.begin() as conn:
        rows = await conn.execute(select(alerts.c.key).where(alerts.c.ts.is_(None)))
        return list(rows.scalars())


async def test_a_remediation_whose_claim_answer_was_lost_is_posted_by_a_later_poll(
    database_url: str, make_stack: StackFactory
) -> None:
    stack, outage = await claim_answer_lost(make_stack, database_url)
    created = stack.together.create_remediation(CLUSTER, NewRemediation())
    remediation_id = str(created["id"])
    await back_after_the_lost_answer(outage)
    message = await stack.slack.wait_for(
        lambda: next(iter(remediation_roots(stack, remediation_id)), None), within=20
    )
    await asyncio.sleep(WATCH_EVERY * 4)  # more polls: still one
    assert len(remediation_roots(stack, remediation_id)) == 1
    watch = WatchStore(stack.runtime.store)
    assert await watch.alert_ts(remediation_key(PROJECT, remediation_id)) == message.ts
    await press(stack, message, BOB, "approve_remediation")  # its record knows its message
    await stack.slack.wait_for(lambda: any("Approved" in t for t in thread(stack, message)))


async def test_an_incident_whose_claim_answer_was_lost_is_posted_by_a_later_poll(
    database_url: str, make_stack: StackFactory
) -> None:
    stack, outage = await claim_answer_lost(make_stack, database_url, HEALTH_POLICY)
    await until(lambda: len(stack.together.calls("list")) >= 2)  # seen healthy first
    stack.together.degrade(CLUSTER, "Degraded")
    await back_after_the_lost_answer(outage)
    root = await stack.slack.wait_for(
        lambda: next(iter(incident_roots(stack, CLUSTER)), None), within=20
    )
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(incident_roots(stack, CLUSTER)) == 1
    assert await unposted_claims(stack.runtime.store) == []
    stack.together.restore(CLUSTER)  # the root's ts was recorded: the recovery replies
    await stack.slack.wait_for(lambda: stack.slack.replies(NOTIFY, root.ts), within=10)


async def test_a_reminder_whose_claim_answer_was_lost_is_posted_by_a_later_poll(
    database_url: str, make_stack: StackFactory
) -> None:
    stack, outage = await claim_answer_lost(make_stack, database_url, REMINDER_POLICY)
    ends_in(stack, timedelta(hours=23, minutes=30))
    await back_after_the_lost_answer(outage)
    await stack.slack.wait_for(lambda: reminders(stack), within=20)
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(reminders(stack)) == 1
    assert await unposted_claims(stack.runtime.store) == []


# ---- at the wire (PostgreSQL) ---------------------------------------------------------


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(target_port=5432)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.close()


@pytest.fixture
async def proxied_url(proxy: FaultProxy) -> AsyncIterator[str]:
    """A fresh PostgreSQL database, reached through the fault proxy (set up before the
    test's stacks, so dropped after them)."""
    name = await create_pg_database()
    yield PG_URL_TEMPLATE.format(name=name).replace(":5432/", f":{proxy.port}/")
    await drop_pg_database(name)


def lose_the_claims_commit_answer(store: Store, proxy: FaultProxy) -> None:
    """Arm the proxy as the transaction that claimed an alert key commits: that COMMIT
    reaches the server, its answer is dropped and the link reset."""
    armed: list[bool] = []

    def after(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not armed and statement.lstrip().upper().startswith(CLAIM.upper()):
            conn.info["claiming"] = True

    def commit(conn: Any) -> None:
        if conn.info.pop("claiming", False) and not armed:
            armed.append(True)
            proxy.lose_commit_answer()

    def rollback(conn: Any) -> None:
        conn.info.pop("claiming", None)

    engine = store.engine.sync_engine
    event.listen(engine, "after_cursor_execute", after)
    event.listen(engine, "commit", commit)
    event.listen(engine, "rollback", rollback)


@pytest.mark.postgres
async def test_a_remediation_whose_claim_commit_answer_was_lost_at_the_wire_is_posted(
    proxied_url: str, proxy: FaultProxy, make_stack: StackFactory
) -> None:
    stack = await watched_stack(
        make_stack,
        database_url=proxied_url,
        extra_settings={"gpuops_claim_takeover_seconds": TAKEOVER},
    )
    lose_the_claims_commit_answer(stack.runtime.store, proxy)
    created = stack.together.create_remediation(CLUSTER, NewRemediation())
    remediation_id = str(created["id"])
    await asyncio.wait_for(proxy.commit_answer_lost.wait(), timeout=20)
    message = await stack.slack.wait_for(
        lambda: next(iter(remediation_roots(stack, remediation_id)), None), within=20
    )
    await asyncio.sleep(WATCH_EVERY * 4)
    assert len(remediation_roots(stack, remediation_id)) == 1
    watch = WatchStore(stack.runtime.store)
    assert await watch.alert_ts(remediation_key(PROJECT, remediation_id)) == message.ts
    await press(stack, message, BOB, "approve_remediation")
    await stack.slack.wait_for(lambda: any("Approved" in t for t in thread(stack, message)))


async def test_a_reminder_whose_ts_write_missed_an_outage_longer_than_the_bound_is_posted_once(
    database_url: str, make_stack: StackFactory
) -> None:
    """Posted, then the store goes before its ts is written, for longer than the takeover
    bound: the ts write waits for the store and lands before the next poll looks, so the
    claim is not taken over and the reminder not posted again."""
    stack = await watched_stack(
        make_stack,
        database_url=database_url,
        policy_yaml=REMINDER_POLICY,
        extra_settings={"gpuops_claim_takeover_seconds": TAKEOVER},
    )
    outage = StoreOutage(stack.runtime.store)
    outage.start_after(CLAIM)
    ends_in(stack, timedelta(hours=23, minutes=30))
    await stack.slack.wait_for(lambda: reminders(stack), within=20)
    assert outage.down
    await asyncio.sleep(TAKEOVER * 2)  # the outage's length: past the bound, on purpose
    outage.end()
    await asyncio.sleep(WATCH_EVERY * 6)  # polls after it: still one
    assert len(reminders(stack)) == 1
    assert await unposted_claims(stack.runtime.store) == []
