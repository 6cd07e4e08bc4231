"""The watcher backs off (SPEC §7): after a 429 it waits at least Retry-After before
polling again, after 5xx in a row it doubles its wait, and a success brings it back to the
interval; polls and their errors are counted by provider in /metrics."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import httpx

from bot.core.watch.watcher import WatchedProject
from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from bot.providers.errors import ProviderError
from tests.conftest import StackFactory
from tests.support.watch_kit import WATCH_EVERY, until, watched_stack


def list_calls(stack: LocalStack) -> int:
    return len(stack.together.calls("list"))


@dataclass
class PollRecord:
    """What one poll of a project was: when it started, and the wait the watcher chose
    after it (with the moment it chose it)."""

    started: float
    outcome: str = ""
    delay: float = 0.0
    chosen_at: float = 0.0


def record_polls(stack: LocalStack) -> list[PollRecord]:
    """Every poll of the first watched project from now on, as the watcher saw it: judged
    on the waits it chose, not on how soon a busy machine let it poll again."""
    watcher = stack.runtime.watcher
    project = watcher.projects[0]
    backoff = project.backoff
    records: list[PollRecord] = []
    poll_once = watcher.poll_once
    after_error, after_success = backoff.after_error, backoff.after_success

    async def recorded_poll(watched: WatchedProject) -> None:
        if watched is project:
            records.append(PollRecord(started=time.monotonic()))
        await poll_once(watched)

    def chose(outcome: str, delay: float) -> float:
        if records and not records[-1].outcome:
            records[-1].outcome, records[-1].delay = outcome, delay
            records[-1].chosen_at = time.monotonic()
        return delay

    def recorded_error(error: ProviderError) -> float:
        return chose(error.kind, after_error(error))

    def recorded_success() -> float:
        return chose("ok", after_success())

    watcher.poll_once = recorded_poll  # type: ignore[method-assign,assignment]
    backoff.after_error = recorded_error  # type: ignore[method-assign]
    backoff.after_success = recorded_success  # type: ignore[method-assign]
    return records


async def test_5xx_in_a_row_double_the_wait_then_a_success_returns_to_the_interval(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, provider_attempts=1)
    await until(lambda: list_calls(stack) >= 2)
    project = stack.runtime.watcher.projects[0]
    await until(lambda: project.polling is None or project.polling.done())
    records = record_polls(stack)
    stack.together.faults.add(Fault(route="list", kind=FaultKind.SERVER_ERROR, status=503, times=3))
    await until(lambda: len(records) >= 6 and bool(records[5].outcome), within=30)
    chosen = records[:5]
    assert [r.outcome for r in chosen] == ["server"] * 3 + ["ok"] * 2, chosen
    # Failures 1, 2, 3 wait 2, 4 and 8 intervals, each success one interval (±10 % jitter).
    for record, intervals in zip(chosen, (2, 4, 8, 1, 1), strict=True):
        wanted = intervals * WATCH_EVERY
        assert wanted * 0.9 <= record.delay <= wanted * 1.1, (intervals, chosen)
    # The watcher waited what it chose: no poll started before its wait was over.
    for earlier, later in itertools.pairwise(records[:6]):
        assert later.started >= earlier.chosen_at + earlier.delay, records


async def test_a_429_waits_for_its_retry_after(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack, provider_attempts=1)
    await until(lambda: list_calls(stack) >= 2)
    project = stack.runtime.watcher.projects[0]
    await until(lambda: project.polling is None or project.polling.done())
    records = record_polls(stack)
    stack.together.faults.add(Fault(route="list", kind=FaultKind.RATE_LIMIT, retry_after=2))
    await until(lambda: len(records) >= 2 and bool(records[1].outcome), within=30)
    refused, after = records[0], records[1]
    assert refused.outcome == "rate_limited", records
    assert refused.delay >= 2, records  # Retry-After: 2, never shortened by jitter
    assert after.started >= refused.chosen_at + refused.delay, records
    assert after.outcome == "ok", records
    await until(lambda: project.backoff.failures == 0)
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"{stack.base_url}/metrics")).text
    assert 'gpuops_watch_polls_total{outcome="rate_limited",provider="together"}' in metrics
