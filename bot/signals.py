"""What SIGHUP does to a running server: the registered callbacks run; it never stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

HangupCallback = Callable[[], Awaitable[None]]


class Hangup:
    """A registry of what to do on SIGHUP (e.g. reload the policy). A failing callback is
    logged in one line; the process goes on serving either way."""

    def __init__(self) -> None:
        self._callbacks: list[tuple[str, HangupCallback]] = []
        self._running: set[asyncio.Task[None]] = set()

    def on_hangup(self, name: str, callback: HangupCallback) -> None:
        self._callbacks.append((name, callback))

    def signal(self) -> None:
        """Called from the event loop's signal handler: run the callbacks in a task."""
        task = asyncio.get_running_loop().create_task(self.run())
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def run(self) -> None:
        if not self._callbacks:
            log.info("SIGHUP received: nothing to reload; still serving")
            return
        log.info("SIGHUP received: %s", ", ".join(name for name, _ in self._callbacks))
        for name, callback in self._callbacks:
            try:
                await callback()
            except Exception as exc:  # one callback's failure must not stop the server
                log.error("SIGHUP: %s failed: %s: %s", name, type(exc).__name__, exc)
