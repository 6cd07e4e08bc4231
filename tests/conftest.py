"""Shared fixtures: the local stack (simulators + fake Slack + the bot over real HTTP) on
SQLite and on this machine's PostgreSQL. A PostgreSQL that cannot be reached is a test
failure, never a skip."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bot.local.demo.stack import LocalStack, StackOptions

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PG_URL_TEMPLATE = "postgresql://postgres@127.0.0.1:5432/{name}"


async def create_pg_database() -> str:
    name = f"gpuops_t_{secrets.token_hex(6)}"
    try:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(
            f"PostgreSQL at 127.0.0.1:5432 is not reachable ({exc!r}); the suite "
            "needs it (never skipped)"
        )
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name


async def drop_pg_database(name: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty state database: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpuops.db'}"
        return
    name = await create_pg_database()
    try:
        yield PG_URL_TEMPLATE.format(name=name)
    finally:
        await drop_pg_database(name)


@pytest.fixture
async def pg_database_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database (for tests that need two processes on one database)."""
    name = await create_pg_database()
    try:
        yield PG_URL_TEMPLATE.format(name=name)
    finally:
        await drop_pg_database(name)


StackFactory = Callable[..., Awaitable[LocalStack]]


@pytest.fixture
async def make_stack(tmp_path: Path) -> AsyncIterator[StackFactory]:
    """Start local stacks with options (fast defaults for tests); all stopped at teardown."""
    started: list[LocalStack] = []

    async def factory(**overrides: Any) -> LocalStack:
        options = StackOptions(
            poll_seconds=overrides.pop("poll_seconds", 0),
            transition_seconds=overrides.pop("transition_seconds", 0.3),
            sweep_seconds=overrides.pop("sweep_seconds", 3600),
            total_timeout=overrides.pop("total_timeout", 2.0),
            provider_attempts=overrides.pop("provider_attempts", 3),
            **overrides,
        )
        workdir = tmp_path / f"stack{len(started)}"
        workdir.mkdir()
        stack = await LocalStack.start(options, workdir)
        started.append(stack)
        return stack

    yield factory
    for stack in reversed(started):
        await stack.stop()


@pytest.fixture
async def stack(database_url: str, make_stack: StackFactory) -> LocalStack:
    """The demo policy and seed data, on SQLite and on PostgreSQL. (``database_url`` comes
    first so that it is torn down last: the stack stops before its database is dropped.)"""
    return await make_stack(database_url=database_url)


@pytest.fixture
async def sqlite_stack(make_stack: StackFactory) -> LocalStack:
    """The demo policy and seed data on SQLite only (for tests of Slack-side behaviour)."""
    return await make_stack()
