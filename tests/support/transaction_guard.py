"""Finds a store transaction held open across an ``await`` of anything but its own
statements (issue 34): a provider call, a Slack (notifier) call, a sleep, or another
transaction begun inside it.

While a transaction of the store is open, ``OPEN`` (a context variable: it follows the
coroutine that opened it, and the tasks it would start) names it. The core harness's
provider and notifier doubles call ``note`` on every call; ``guarding`` also wraps
``asyncio.sleep`` and the store's ``_begin`` (a transaction begun inside another is one
more await that is not the first one's statement). A note made while ``OPEN`` is set is
kept in the guard's ``found``; a test (or the core suite's fixture) asserts it stays empty.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.core.store.engine import StoreBase

OPEN: ContextVar[str | None] = ContextVar("gpuops_open_transaction", default=None)


@dataclass
class TransactionGuard:
    """What was awaited inside an open transaction, with where that transaction began."""

    found: list[str] = field(default_factory=list)


_ACTIVE: list[TransactionGuard] = []


def note(what: str) -> None:
    """``what`` is being awaited now: kept if a transaction is open around it."""
    during = OPEN.get()
    if during is not None and _ACTIVE:
        _ACTIVE[-1].found.append(f"{what} awaited inside the transaction begun at {during}")


def _opener() -> str:
    """Where the store's caller opened the transaction (the first frame outside the store)."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if "/bot/core/store/" not in frame.filename and "contextlib" not in frame.filename:
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "the store"


@contextmanager
def guarding(monkeypatch: pytest.MonkeyPatch) -> Iterator[TransactionGuard]:
    """Watch every store transaction, sleep, provider and notifier call until the end."""
    guard = TransactionGuard()
    real_begin = StoreBase._begin
    real_sleep = asyncio.sleep

    @asynccontextmanager
    async def begin(self: StoreBase, *args: Any, **kwargs: Any) -> AsyncIterator[AsyncConnection]:
        note("another transaction")
        async with real_begin(self, *args, **kwargs) as conn:
            token = OPEN.set(_opener())
            try:
                yield conn
            finally:
                # Before the commit: it is the transaction's own (and SQLite's exit lets the
                # loop run once, after the commit).
                OPEN.reset(token)

    async def sleep(delay: float, result: Any = None) -> Any:
        note(f"asyncio.sleep({delay})")
        return await real_sleep(delay, result)

    monkeypatch.setattr(StoreBase, "_begin", begin)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    _ACTIVE.append(guard)
    try:
        yield guard
    finally:
        _ACTIVE.remove(guard)
