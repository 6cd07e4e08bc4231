"""The guard of the core suite (``tests/support/transaction_guard.py``, an autouse fixture
in ``conftest.py``) sees each kind of await a store transaction must not be held across,
on both backends: a provider call, a notifier (Slack) call, a sleep, and another
transaction begun inside it. Every other core test runs its lifecycle paths under it and
fails on any such await."""

from __future__ import annotations

import asyncio

import pytest

from tests.core.conftest import CoreFactory
from tests.support.core_harness import Core
from tests.support.transaction_guard import TransactionGuard

DAVE = "U04DAVE"


def kinds(guard: TransactionGuard) -> list[str]:
    """What the guard found, by kind (then forgotten: the fixture's own check is for the
    awaits the core makes, not these)."""
    found = [line.split(" awaited")[0] for line in guard.found]
    assert all("test_transaction_guard.py" in line for line in guard.found), guard.found
    guard.found.clear()
    return found


async def test_a_lifecycle_awaits_nothing_inside_its_transactions_but_this_does(
    any_core: Core, transaction_guard: TransactionGuard
) -> None:
    opened = await any_core.open(
        DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    assert transaction_guard.found == []  # the opening's transactions hold nothing else
    record = await any_core.record(opened.id)
    async with any_core.store._begin():
        await any_core.e2e.list_clusters()
        await any_core.notifier.request_opened(record)
        await asyncio.sleep(0)
    assert kinds(transaction_guard) == [
        "provider list_clusters",
        "notifier request_opened",
        "asyncio.sleep(0)",
    ]


@pytest.mark.postgres
async def test_a_transaction_begun_inside_another_is_found(
    make_core: CoreFactory, pg_database_url: str, transaction_guard: TransactionGuard
) -> None:
    """On PostgreSQL (SQLite serializes a process's transactions: the inner one would wait
    for the outer one for ever, which is what the guard is there to prevent)."""
    core = await make_core(database_url=pg_database_url)
    async with core.store._begin():
        assert await core.store.get_request("CR-NONE00") is None
    assert kinds(transaction_guard) == ["another transaction"]
