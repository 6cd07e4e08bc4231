"""The watcher backs off (SPEC §7): after a 429 it waits at least Retry-After before
polling again, after 5xx in a row it doubles its wait, and a success brings it back to the
interval; polls and their errors are counted by provider in /metrics."""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx

from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.conftest import StackFactory
from tests.support.watch_kit import WATCH_EVERY, until, watched_stack


def list_calls(stack: LocalStack) -> int:
    return len(stack.together.calls("list"))


async def call_times(stack: LocalStack, count: int, within: float) -> list[float]:
    """When each of the next ``count`` cluster listings arrived (sampled every 10 ms)."""
    seen = list_calls(stack)
    times: list[float] = []
    deadline = time.monotonic() + within
    while len(times) < count and time.monotonic() < deadline:
        now_seen = list_calls(stack)
        times += [time.monotonic()] * (now_seen - seen)
        seen = now_seen
        await asyncio.sleep(0.01)
    assert len(times) >= count, f"only {len(times)} polls in {within}s"
    return times[:count]


async def test_a_429_waits_for_its_retry_after(make_stack: StackFactory) -> None:
    stack = await watched_stack(make_stack, provider_attempts=1)
    await until(lambda: list_calls(stack) >= 2)
    stack.together.faults.add(Fault(route="list", kind=FaultKind.RATE_LIMIT, retry_after=2))
    project = stack.runtime.watcher.projects[0]
    await until(lambda: project.backoff.failures == 1)
    refused_at, calls = time.monotonic(), list_calls(stack)
    [next_poll] = await call_times(stack, 1, within=10)
    assert next_poll - refused_at >= 2 * 0.9, next_poll - refused_at  # jitter ±10 %
    assert list_calls(stack) == calls + 1
    await until(lambda: project.backoff.failures == 0)
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"{stack.base_url}/metrics")).text
    assert 'gpuops_watch_polls_total{outcome="rate_limited",provider="together"}' in metrics


async def test_5xx_in_a_row_double_the_wait_then_a_success_returns_to_the_interval(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack, provider_attempts=1)
    await until(lambda: list_calls(stack) >= 2)
    stack.together.faults.add(Fault(route="list", kind=FaultKind.SERVER_ERROR, status=503, times=3))
    times = await call_times(stack, 6, within=20)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # Failures 1, 2, 3 wait 2, 4 and 8 intervals (±10 % jitter; the tick adds up to half
    # an interval), the success after them one interval again.
    for gap, intervals in zip(gaps[:3], (2, 4, 8), strict=True):
        assert gap >= intervals * WATCH_EVERY * 0.9, gaps
    assert gaps[3] < 4 * WATCH_EVERY, gaps
