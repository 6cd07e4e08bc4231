"""Background work of the change workflow, drained or awaited on shutdown.

Spawned tasks (follow-ups, heartbeats) and the changes this process is sending now."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable
from typing import TypeVar

from bot.redact import redact

log = logging.getLogger(__name__)

T = TypeVar("T")


class BackgroundTasks:
    """Tasks that outlive the request that spawned them; failures are logged, redacted."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def spawn(self, coro: Awaitable[T], name: str) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "background task %s failed: %s", task.get_name(), redact(repr(task.exception()))
            )

    async def drain(self) -> None:
        """Wait for background work (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)


class InFlight:
    """The request ids this process is starting or sending to a provider now (counted: two
    executions of one request here, one of which will find it taken, are two)."""

    def __init__(self) -> None:
        self._ids: Counter[str] = Counter()
        self._idle = asyncio.Event()  # set while nothing is being sent
        self._idle.set()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids

    def start(self, request_id: str) -> None:
        self._ids[request_id] += 1
        self._idle.clear()

    def done(self, request_id: str) -> None:
        self._ids[request_id] -= 1
        if self._ids[request_id] <= 0:
            del self._ids[request_id]
        if not self._ids:
            self._idle.set()

    async def wait(self, grace: float) -> set[str]:
        """Let changes being sent finish (on shutdown); the ids still running."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._idle.wait()
        return set(self._ids)
