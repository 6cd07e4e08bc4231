"""Outcomes of changes that were sent but could not be recorded because the store was
down: kept in memory in order and recorded (then reported) once it answers again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.core.requests.fencing import LeaseKeeper
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable
from bot.providers.base import ClusterSummary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What became of one change: ``sent`` False means nothing reached the provider."""

    to: RequestState
    message: str
    kind: str = "ok"
    summary: ClusterSummary | None = None
    sent: bool = True


@dataclass
class Unrecorded:
    """A result waiting for the store, with the lease (kept alive) it must be written under
    (None: nothing was sent and no lease was taken; it is written unfenced from approved)."""

    record: ChangeRequestRecord
    result: Result
    keeper: LeaseKeeper | None
    heartbeat: asyncio.Task[None] | None
    kept_at: float = field(default_factory=time.monotonic)
    on_settled: Callable[[], None] | None = None  # recorded or given up: no longer in hand

    def stop(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.cancel()
        if self.on_settled is not None:
            self.on_settled()


Record = Callable[[Unrecorded], Awaitable[None]]
Spawn = Callable[[Awaitable[None], str], asyncio.Task[None]]


class PendingOutcomes:
    """Replays unrecorded results in the order they happened, with backoff; bounded in
    number (``limit``) and in time (``give_up_seconds``), each loss logged as an error."""

    def __init__(
        self,
        record: Record,
        spawn: Spawn,
        *,
        limit: int = 1000,
        give_up_seconds: float = 6 * 3600.0,
        wait_initial: float = 0.2,
        wait_max: float = 5.0,
    ) -> None:
        self._record = record
        self._spawn = spawn
        self._queue: deque[Unrecorded] = deque()
        self._replaying: asyncio.Task[None] | None = None
        self.limit = limit
        self.give_up_seconds = give_up_seconds
        self.wait_initial = wait_initial
        self.wait_max = wait_max

    def __len__(self) -> int:
        return len(self._queue)

    def keep(self, item: Unrecorded) -> None:
        if len(self._queue) >= self.limit:
            self._drop(self._queue.popleft(), "too many results waiting for the store")
        self._queue.append(item)
        if self._replaying is None or self._replaying.done():
            self._replaying = self._spawn(self._replay(), "replay-outcomes")

    async def _replay(self) -> None:
        delay = self.wait_initial
        while self._queue:
            head = self._queue[0]
            try:
                await self._record(head)
            except StoreUnavailable as exc:
                if time.monotonic() - head.kept_at > self.give_up_seconds:
                    self._drop(self._queue.popleft(), f"store still unavailable ({exc.reason})")
                    continue
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.wait_max)
                continue
            except Exception:
                log.exception("recording the result of %s failed", head.record.id)
            self._queue.popleft()
            head.stop()
            delay = self.wait_initial

    @staticmethod
    def _drop(item: Unrecorded, why: str) -> None:
        item.stop()
        log.error(
            "gave up recording the result of %s (%s: %s): %s",
            item.record.id,
            item.result.to,
            item.result.message[:200],
            why,
        )
