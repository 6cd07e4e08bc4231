"""Watcher writes the store could not take (where a message was posted, a claim given back,
an audit line): kept in memory in order, and written before the next poll does anything."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

from bot.core.store import StoreUnavailable

log = logging.getLogger(__name__)

Write = Callable[[], Awaitable[None]]
MAX_KEPT = 1000  # past this the oldest is dropped, logged as an error


class StoreBacklog:
    """What was done in Slack but not yet written down, written once the store answers."""

    def __init__(self, limit: int = MAX_KEPT) -> None:
        self._kept: deque[tuple[str, Write]] = deque()
        self.limit = limit

    def __len__(self) -> int:
        return len(self._kept)

    async def attempt(self, what: str, write: Write) -> None:
        """Write now; with the store unavailable, keep it for the next poll (in order: a
        write never overtakes one kept before it)."""
        if self._kept:
            self._keep(what, write)
            return
        try:
            await write()
        except StoreUnavailable as exc:
            log.warning("%s: kept until the store is back (%s)", what, exc.reason)
            self._keep(what, write)

    def keep(self, what: str, write: Write) -> None:
        """Keep a write that just failed for the next poll (after any kept before it)."""
        log.warning("%s: kept until the store is back", what)
        self._keep(what, write)

    async def flush(self) -> None:
        """Write what was kept, oldest first; StoreUnavailable (the rest kept) if it is
        still down."""
        while self._kept:
            what, write = self._kept[0]
            await write()
            self._kept.popleft()
            log.info("%s: written now that the store is back", what)

    def _keep(self, what: str, write: Write) -> None:
        if len(self._kept) >= self.limit:
            lost, _ = self._kept.popleft()
            log.error("%s: dropped, too many writes waiting for the store", lost)
        self._kept.append((what, write))
