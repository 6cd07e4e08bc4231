"""The usage ledger over real HTTP (SPEC §13): the watcher's polls of the Together simulator
accrue each cluster's time exactly once — two replicas polling the same moment, the
watching replica killed and the other taking over, a restart, a database outage (its gap
accrued at the last known size, flagged estimated) — and ``/gpu spend`` says what the
ledger holds."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from bot.core.spend.book import project_scope
from bot.core.spend.report import dollars
from bot.local.demo.stack import LocalStack
from bot.local.faults.proxy import FaultProxy
from tests.conftest import PG_URL_TEMPLATE, StackFactory, create_pg_database, drop_pg_database
from tests.support.spend_kit import (
    LEDGER_POLICY,
    TOGETHER,
    assert_accrued_once,
    cursors,
    spend_answer,
    spend_policy,
    sums,
)
from tests.support.watch_kit import polls_held, until, watched_stack
from tests.support.workflow_kit import ALICE, DAVE

CLUSTER = "tc-h100-reserved"


async def accrued_ms(stack: LocalStack, cluster: str = CLUSTER) -> int:
    found = await sums(stack)
    return found[cluster].covered_ms if cluster in found else 0


async def wait_accrued(stack: LocalStack, more_than: int = 0) -> int:
    """Wait for the ledger to hold more than ``more_than`` ms of the cluster."""
    for _ in range(500):
        covered = await accrued_ms(stack)
        if covered > more_than:
            return covered
        await asyncio.sleep(0.05)
    raise AssertionError(f"no accrual past {more_than} ms")


async def test_polls_accrue_and_gpu_spend_reports_the_ledger(
    database_url: str, make_stack: StackFactory
) -> None:
    policy = spend_policy("{monthly_usd: 500000, warn_at: [50], approval_at: 90, deny_at: 100}")
    stack = await watched_stack(make_stack, database_url=database_url, policy_yaml=policy)
    await wait_accrued(stack)
    async with polls_held(stack):
        await assert_accrued_once(stack)
        found = await sums(stack)
        row = found[CLUSTER]
        assert row.currency == "USD" and row.gpu_ms == 16 * row.covered_ms
        assert row.cost_micros > 0 and row.unpriced_ms == 0
        scope = project_scope(stack.runtime.policy, TOGETHER)
        standing = await stack.runtime.ops.access.spend.standing(
            scope, stack.runtime.workflow.clock()
        )
        assert standing.spent == sum((r.cost for r in found.values()), Decimal(0))
        assert standing.hourly == Decimal("325.92")  # 40 H100, 8 H200, 32 B200 at the table
        text = await spend_answer(stack, ALICE, f"spend {TOGETHER}")
    assert f"Month-to-date: {dollars(standing.spent)}" in text, text
    assert "Now: $325.92/h · 80 GPUs · projected month-end" in text, text
    assert "warn at 50% · one more approver from 90% · refused from 100%" in text, text
    assert f"`{CLUSTER}`, {TOGETHER}" in text, text


async def test_gpu_spend_of_a_past_month_and_a_bad_month(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack, policy_yaml=LEDGER_POLICY)
    text = await spend_answer(stack, ALICE, f"spend {TOGETHER} month=2020-01")
    assert "2020-01 (UTC)" in text and "No usage recorded in this month" in text, text
    assert "projected" not in text, text
    text = await spend_answer(stack, ALICE, f"spend {TOGETHER} month=2020-13")
    assert "is not a month: write it as YYYY-MM" in text, text


async def test_two_replicas_polling_at_once_and_a_failover_accrue_each_interval_once(
    pg_database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(
        make_stack,
        database_url=pg_database_url,
        policy_yaml=LEDGER_POLICY,
        start_background=False,
    )
    first = await stack.start_replica("replica-a", start_background=True)
    second = await stack.start_replica("replica-b", start_background=True)
    await wait_accrued(stack)
    # Both replicas poll the same project at the same moments (a lease that lapsed
    # mid-poll): each interval is still accrued by one of them only.
    for _ in range(5):
        await asyncio.gather(
            *(
                replica.runtime.watcher.poll_once(replica.runtime.watcher.projects[0])
                for replica in (first, second)
            )
        )
    await assert_accrued_once(stack)
    watching = next(r for r in (first, second) if r.runtime.watcher.holding)
    other = second if watching is first else first
    before = await accrued_ms(stack)
    await watching.stop()
    stack.replicas.remove(watching)
    await until(lambda: other.runtime.watcher.holding, within=30)
    await wait_accrued(stack, before)
    async with polls_held(stack):
        pass
    await assert_accrued_once(stack)


async def test_a_restart_accrues_the_time_it_was_down_once(
    database_url: str, make_stack: StackFactory
) -> None:
    stack = await watched_stack(make_stack, database_url=database_url, policy_yaml=LEDGER_POLICY)
    await wait_accrued(stack)
    (before,) = [c for c in await cursors(stack) if c.cluster_id == CLUSTER]
    await stack.restart_bot()
    await until(lambda: stack.runtime.watcher.holding, within=30)
    covered = await wait_accrued(stack, await accrued_ms(stack))
    (after,) = [c for c in await cursors(stack) if c.cluster_id == CLUSTER]
    assert after.since == before.since and after.until > before.until and covered > 0
    await assert_accrued_once(stack)


async def test_a_database_outage_is_accrued_after_it_at_the_last_size_as_estimated(
    make_stack: StackFactory,
) -> None:
    name = await create_pg_database()
    proxy = FaultProxy(target_port=5432)
    await proxy.start()
    try:
        url = PG_URL_TEMPLATE.format(name=name).replace(":5432/", f":{proxy.port}/")
        stack = await watched_stack(
            make_stack,
            database_url=url,
            policy_yaml=LEDGER_POLICY,
            extra_settings={"gpuops_db_connect_timeout": 1.0, "gpuops_db_operation_timeout": 2.0},
        )
        await wait_accrued(stack)
        await proxy.outage()
        await asyncio.sleep(2.0)  # the outage lasts well over 2.5 poll intervals (0.75 s)
        await proxy.heal_async()
        found = await sums(stack)
        estimated = found[CLUSTER].estimated_ms
        for _ in range(600):
            found = await sums(stack)
            if found[CLUSTER].estimated_ms >= estimated + 2000:
                break
            await asyncio.sleep(0.05)
        row = found[CLUSTER]
        assert row.estimated_ms >= estimated + 2000, row
        assert row.estimated_cost_micros > 0 and row.gpu_ms == 16 * row.covered_ms
        await assert_accrued_once(stack)
        text = await spend_answer(stack, ALICE, f"spend {TOGETHER}")
        assert "of it estimated $" in text and "(polling gaps)" in text, text
        assert "· estimated " in text, text
    finally:
        await proxy.close()
        await drop_pg_database(name)


async def test_a_changes_result_is_recorded_without_waiting_for_a_poll(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, policy_yaml=LEDGER_POLICY)
    await wait_accrued(stack)

    async def gpus_of(cluster: str) -> int | None:
        found = [c for c in await cursors(stack) if c.cluster_id == cluster]
        return found[0].gpus if found else None

    async with polls_held(stack):
        assert await gpus_of("tc-h200-ondemand") == 8
        text = await spend_answer(stack, DAVE, f"update {TOGETHER} tc-h200-ondemand num_gpus=16")
        assert "ran" in text, text
        for _ in range(400):
            if await gpus_of("tc-h200-ondemand") == 16:
                break
            await asyncio.sleep(0.05)
        (cursor,) = [c for c in await cursors(stack) if c.cluster_id == "tc-h200-ondemand"]
        assert cursor.gpus == 16 and cursor.rate_micros == 16 * 3_790_000
        await assert_accrued_once(stack)


E2E_WATCH = "    location: Delhi\n    watch:\n      every_seconds: 15\n      status: false\n"


async def test_e2e_clusters_accrue_at_their_plans_price_converted_by_the_exchange_rate(
    make_stack: StackFactory,
) -> None:
    policy = LEDGER_POLICY.replace("    location: Delhi\n", E2E_WATCH, 1)
    stack = await watched_stack(make_stack, policy_yaml=policy + "exchange_rates: {INR: 0.012}\n")
    for _ in range(400):
        found = await sums(stack, "e2e-delhi")
        if any(r.cost_micros for r in found.values()):
            break
        await asyncio.sleep(0.05)
    async with polls_held(stack):
        found = await sums(stack, "e2e-delhi")
        priced = [r for r in found.values() if r.cost_micros]
        assert priced and all(r.currency == "INR" for r in priced)
        scope = project_scope(stack.runtime.policy, "e2e-delhi")
        standing = await stack.runtime.ops.access.spend.standing(
            scope, stack.runtime.workflow.clock(), live=False
        )
        assert standing.spent == sum((r.cost * Decimal("0.012") for r in priced), Decimal(0))
        assert standing.unconverted == {}
        text = await spend_answer(stack, ALICE, "spend e2e-delhi")
    assert f"Month-to-date: {dollars(standing.spent)}" in text, text
