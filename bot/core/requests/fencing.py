"""Holding a change's execution lease while it is sent: a heartbeat that rides out a store
outage until the lease could really have been taken, and knows when it was lost."""

from __future__ import annotations

import asyncio
import logging
import time

from bot.core.store import Lease, Store, StoreUnavailable

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews ``lease`` every third of its ``ttl``. When the store cannot be reached it
    retries sooner, with backoff, because the lease is still ours until ``ttl`` has passed
    since the last renewal — and even after, until somebody else takes it (the token
    changes, and the store's fenced writes refuse ours)."""

    def __init__(self, store: Store, lease: Lease, ttl_seconds: float) -> None:
        self.store = store
        self.lease = lease
        self.ttl = ttl_seconds
        self._renewed_at = time.monotonic()
        self.lost = False  # the store said another holder has it
        self.store_failed = False  # a renewal could not reach the store
        self.releasing = False  # the executor is giving it up: a renewal refused is no news
        self._warned = False

    @property
    def surely_held(self) -> bool:
        """Nobody else can hold it yet: less than ``ttl`` since a renewal was sent."""
        return not self.lost and time.monotonic() - self._renewed_at < self.ttl

    async def run(self) -> None:
        steady = self.ttl / 3
        retry = min(steady, max(self.ttl / 20, 0.05))
        delay = steady
        while not self.lost:
            await asyncio.sleep(delay)
            if await self.renew_once():
                delay = steady
            else:
                delay = min(delay * 2 if delay < steady else retry, steady)

    async def renew_once(self) -> bool:
        """One renewal; False when the store could not be reached (or the lease is lost)."""
        sent_at = time.monotonic()
        try:
            renewed = await self.store.renew_lease(self.lease, self.ttl)
        except StoreUnavailable as exc:
            self.store_failed = True
            if not self.surely_held and not self._warned:
                self._warned = True
                log.warning("lease %s may have lapsed: %s", self.lease.name, exc.reason)
            return False
        if renewed is None:
            self.lost = True
            if not self.releasing:
                log.warning(
                    "lease %s was taken by another holder; stopping writes", self.lease.name
                )
            return False
        self.lease = renewed
        self._renewed_at = sent_at
        self._warned = False
        return True
