"""Pacing of the work a command does after its ack.

Everything runs on one event loop, and Slack needs the ack within 3 s. Each command's work
(provider calls, state writes, Slack posts) is a chain of short CPU steps; when many
commands work at once, the loop runs a step of each of them between two steps of every new
request, and acks slow down in proportion to the work in flight (measured: ack p99 x10
with 200 changes running). A ``Pacer`` lets ``slots`` commands work at a time, first come
first served, so a burst queues cheaply behind the ack path instead of inside it.

A command holds its slot until its work ends or ``max_hold`` seconds have passed,
whichever comes first: a provider that answers slowly (or not at all) delays the commands
behind it by ``max_hold`` at most, never by its timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

DEFAULT_SLOTS = 1
DEFAULT_MAX_HOLD_SECONDS = 0.25


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

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for a slot (first come, first served) and hold it while the block runs,
        for ``max_hold`` seconds at most."""
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self._free.release()

        timer = asyncio.get_running_loop().call_later(self.max_hold, release)
        try:
            yield
        finally:
            timer.cancel()
            release()
