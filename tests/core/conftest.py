"""Fixtures of the core tests: a composed core on a temp SQLite store (``core``), the same
on SQLite and PostgreSQL (``any_core``), and a factory for other policies and settings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.core_harness import Core, core_harness
from tests.support.transaction_guard import TransactionGuard, guarding

CoreFactory = Callable[..., Awaitable[Core]]


@pytest.fixture(autouse=True)
def transaction_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[TransactionGuard]:
    """Every core test, on each backend it runs on, fails if a store transaction was held
    open across an await of anything but its own statements (issue 34;
    ``tests/support/transaction_guard.py``)."""
    with guarding(monkeypatch) as guard:
        yield guard
    assert guard.found == [], "\n".join(guard.found)


@pytest.fixture
async def make_core(tmp_path: Path) -> AsyncIterator[CoreFactory]:
    """Compose cores with options (``policy_yaml``, ``database_url``, workflow settings)."""
    async with AsyncExitStack() as stack:
        made = 0

        async def factory(**options: Any) -> Core:
            nonlocal made
            workdir = tmp_path / f"core{made}"
            workdir.mkdir()
            made += 1
            return await stack.enter_async_context(core_harness(workdir, **options))

        yield factory


@pytest.fixture
async def core(make_core: CoreFactory) -> Core:
    """The demo policy on a fresh SQLite store."""
    return await make_core()


@pytest.fixture
async def any_core(database_url: str, make_core: CoreFactory) -> Core:
    """The demo policy on SQLite and on PostgreSQL (``database_url`` is torn down last)."""
    return await make_core(database_url=database_url)
