"""Pacing of the work commands do after their ack.

Everything runs on one event loop, and Slack needs each ack within 3 s. A command's work
(state writes, rendering, building requests) is a chain of CPU steps between waits on the
provider and on Slack. With many commands working at once, the loop runs a step of each of
them between two steps of every new request, so acks slow down in proportion to the work in
flight (measured in bench/: ack p99 x10 with 200 changes in flight).

A ``Pacer`` lets ``slots`` commands compute at a time, first come first served: a command
takes a turn (``async with pacer.turn()``), gives the slot up while it waits on another
service (``async with waiting_elsewhere()`` around provider and Slack API calls, so a slow
provider holds no one back) and queues for it again when the answer is in. The queue is
cheap and sits behind the acks, not inside them.

A turn that holds the slot for ``max_hold`` seconds at a stretch (a wait not wrapped in
``waiting_elsewhere``, or a long computation) gives it up until its next wait: nothing
queues behind a stuck command for long.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

DEFAULT_SLOTS = 1
DEFAULT_MAX_HOLD_SECONDS = 0.25


class _Turn:
    """One command's turn: whether it holds a slot now, and the guard on how long."""

    def __init__(self, pacer: Pacer, task: asyncio.Task[object] | None) -> None:
        self.pacer = pacer
        self.task = task
        self.holding = False
        self._guard: asyncio.TimerHandle | None = None

    async def hold(self) -> None:
        await self.pacer._acquire()
        self.holding = True
        self._guard = asyncio.get_running_loop().call_later(self.pacer.max_hold, self.release)

    def release(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
            self._guard = None
        if self.holding:
            self.holding = False
            self.pacer._free.release()


_current: ContextVar[_Turn | None] = ContextVar("gpuops_pacing_turn", default=None)


class Pacer:
    def __init__(
        self, slots: int = DEFAULT_SLOTS, max_hold: float = DEFAULT_MAX_HOLD_SECONDS
    ) -> None:
        if slots < 1 or max_hold <= 0:
            raise ValueError("a pacer needs at least one slot and a positive max_hold")
        self.slots = slots
        self.max_hold = max_hold
        self._free = asyncio.Semaphore(slots)
        self.waiting = 0  # commands queued for a slot now

    async def _acquire(self) -> None:
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Run the block as one command's turn: it computes only while it holds a slot."""
        turn = _Turn(self, asyncio.current_task())
        await turn.hold()
        token = _current.set(turn)
        try:
            yield
        finally:
            _current.reset(token)
            turn.release()


@asynccontextmanager
async def waiting_elsewhere() -> AsyncIterator[None]:
    """Around an await on another service: the current command's slot (if it holds one)
    is free meanwhile, and taken again, in the queue, when the block ends."""
    turn = _current.get()
    if turn is None or turn.task is not asyncio.current_task():
        yield  # not a paced command (or a task it spawned): nothing to give up
        return
    turn.release()
    try:
        yield
    finally:
        await turn.hold()
