"""PendingOutcomes: results kept while the store is down are recorded in order once it is
back, and memory and time are bounded (each loss logged as an error)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bot.core.requests.fencing import LeaseKeeper
from bot.core.requests.outcomes import PendingOutcomes, Result, Unrecorded
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable


def _item(request_id: str, settled: list[str]) -> Unrecorded:
    # Only the id is read here: the rest of the record does not matter.
    record = cast(ChangeRequestRecord, SimpleNamespace(id=request_id))
    return Unrecorded(
        record,
        Result(RequestState.SUCCEEDED, f"done {request_id}"),
        cast(LeaseKeeper, None),
        None,
        on_settled=lambda: settled.append(request_id),
    )


class FlakyStore:
    """Refuses the first ``failures`` writes, then records."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.recorded: list[str] = []

    async def record(self, item: Unrecorded) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("postgresql://db", "connection refused")
        self.recorded.append(item.record.id)


def _pending(store: FlakyStore, tasks: list[asyncio.Task[Any]], **bounds: Any) -> PendingOutcomes:
    def spawn(coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        tasks.append(task)
        return task

    return PendingOutcomes(store.record, spawn, wait_initial=0.001, wait_max=0.01, **bounds)


async def test_results_are_recorded_in_order_once_the_store_answers() -> None:
    store = FlakyStore(failures=5)
    tasks: list[asyncio.Task[Any]] = []
    settled: list[str] = []
    pending = _pending(store, tasks)
    for request_id in ("CR-1", "CR-2", "CR-3"):
        pending.keep(_item(request_id, settled))
    await asyncio.gather(*tasks)
    assert store.recorded == ["CR-1", "CR-2", "CR-3"]
    assert settled == ["CR-1", "CR-2", "CR-3"] and len(pending) == 0


async def test_memory_is_bounded_and_the_oldest_loss_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore(failures=1_000_000)
    tasks: list[asyncio.Task[Any]] = []
    settled: list[str] = []
    pending = _pending(store, tasks, limit=2)
    for request_id in ("CR-1", "CR-2", "CR-3"):
        pending.keep(_item(request_id, settled))
    assert len(pending) == 2 and settled == ["CR-1"]
    assert "gave up recording the result of CR-1" in caplog.text
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_result_is_given_up_after_its_time(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore(failures=1_000_000)
    tasks: list[asyncio.Task[Any]] = []
    settled: list[str] = []
    pending = _pending(store, tasks, give_up_seconds=0.05)
    pending.keep(_item("CR-1", settled))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
    assert settled == ["CR-1"] and len(pending) == 0 and store.recorded == []
    assert "store still unavailable" in caplog.text
