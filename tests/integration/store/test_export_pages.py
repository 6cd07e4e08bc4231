"""``audit export`` and ``verify`` stream (issue 34): the trail is read a page at a time
(a bounded SELECT after the last id read), and the first entries are handed over before
the later pages are read, so memory holds a page, never the whole trail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection

from bot.core.store import Store


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


def _audit_reads(store: Store) -> list[str]:
    """The SELECTs of audit pages run on ``store`` from now on (the list grows)."""
    seen: list[str] = []

    def record(_conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        text = " ".join(statement.split())
        if text.upper().startswith("SELECT") and "FROM gpuops_audit " in text + " ":
            seen.append(text)

    event.listen(store._engine.sync_engine, "before_cursor_execute", record)
    return seen


async def test_export_reads_the_trail_a_page_at_a_time(store: Store) -> None:
    for i in range(7):
        await store.append_audit(actor="U1", event="requested", project="p1", request_id=f"CR-{i}")
    reads = _audit_reads(store)
    async with aclosing(store.export_audit(page_size=3)) as entries:
        first = await anext(entries)
        assert len(reads) == 1  # one page read so far, not the trail
        rest = [entry async for entry in entries]
    assert [e.id for e in [first, *rest]] == sorted(e.id for e in [first, *rest])
    assert len(rest) == 6
    assert len(reads) == 3  # 3 + 3 + 1
    assert all("LIMIT" in read.upper() for read in reads)
    assert all("gpuops_audit.id >" in read for read in reads[1:])


async def test_verify_walks_the_chain_in_pages(store: Store) -> None:
    for i in range(5):
        await store.append_audit(actor="U1", event="requested", request_id=f"CR-{i}")
    reads = _audit_reads(store)
    count, found = await store.verify_audit(page_size=2)
    assert (count, found) == (5, None)
    assert len(reads) == 3 and all("LIMIT" in read.upper() for read in reads)
