"""Helpers for the spend tests (SPEC §13): the watched demo policy with prices and a
budget, and the ledger's figures read from the store behind a running bot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.core.store.usage import UsageStore, epoch_ms
from bot.core.store.usage_records import UsageCursor, UsageSum
from bot.local.demo.stack import LocalStack
from tests.support.guard_kit import RECENT
from tests.support.watch_kit import WATCH_POLICY
from tests.support.workflow_kit import next_ephemeral, readable_text

TOGETHER = "together-prod"
PRICES = f"""\
    prices:
      currency: USD
      as_of: "{RECENT}"
      per_gpu_hour: {{H100_SXM: 2.99, H200_SXM: 3.79, B200_SXM: 5.50}}
"""
_WATCH_HEAD = "    watch:\n      every_seconds: 15\n"
assert _WATCH_HEAD in WATCH_POLICY
LEDGER_POLICY = WATCH_POLICY.replace(_WATCH_HEAD, PRICES + _WATCH_HEAD, 1)


def spend_policy(budget: str = "", teams: str = "") -> str:
    """The watched policy with prices, ``budget`` (a YAML mapping) on together-prod and
    ``teams`` (YAML under ``teams:``)."""
    policy = LEDGER_POLICY
    if budget:
        policy = policy.replace(PRICES, PRICES + f"    budget: {budget}\n", 1)
    return policy + (f"teams:\n{teams}" if teams else "")


def usage_of(stack: LocalStack) -> UsageStore:
    """The running bot's ledger store."""
    return stack.runtime.ops.access.spend.usage


async def cursors(stack: LocalStack, project: str = TOGETHER) -> list[UsageCursor]:
    return await usage_of(stack).cursors([project])


async def sums(stack: LocalStack, project: str = TOGETHER) -> dict[str, UsageSum]:
    """Per cluster, everything the ledger holds of it (all time)."""
    start = datetime(2000, 1, 1, tzinfo=UTC)
    end = datetime.now(UTC) + timedelta(days=1)
    rows = await usage_of(stack).by_cluster([project], start, end)
    return {row.cluster_id: row for row in rows}


async def assert_accrued_once(stack: LocalStack, project: str = TOGETHER) -> None:
    """Every cluster's accrued time is exactly its span from first seen to its cursor:
    no interval counted twice, none left out. Read between two equal reads of the cursors
    (a poller may be accruing meanwhile: a cursor moves with its buckets, in one commit)."""
    for _ in range(200):
        spans = await cursors(stack, project)
        found = await sums(stack, project)
        if await cursors(stack, project) == spans:
            break
    else:
        raise AssertionError("the ledger never held still between two reads")
    assert spans, "nothing recorded"
    for cursor in spans:
        covered = found[cursor.cluster_id].covered_ms if cursor.cluster_id in found else 0
        assert covered == epoch_ms(cursor.until) - epoch_ms(cursor.since), cursor


async def spend_answer(stack: LocalStack, user: str, text: str) -> str:
    """``user`` types ``/gpu text``: everything the ephemeral answer's blocks say."""
    seen = len(stack.slack.ephemerals_for(user))
    result = await stack.sender.command(user, "C0INCIDENT", text)
    assert result.status == 200 and result.acked_in_time, result
    return readable_text(await next_ephemeral(stack, user, seen))
