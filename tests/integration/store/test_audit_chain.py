"""The hash-chained audit trail (SPEC §10) on SQLite and PostgreSQL: appends chain, several
stores appending at once never fork the chain, the migration chains older entries, and
verification names the first entry edited, removed, inserted or swapped, and an edited head."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import MetaData, Table, event, insert, text
from sqlalchemy.engine import Connection

import bot.core.store.migrations
import bot.core.store.migrations.audit_chain
from bot.core.store import AuditEntry, Store
from bot.core.store.chain import GENESIS_HASH, ChainBreak, entry_hash
from bot.core.store.tables import audit


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()


async def append_some(store: Store, count: int, *, actor: str = "U04DAVE") -> list[AuditEntry]:
    return [
        await store.append_audit(
            actor=actor,
            event="requested",
            project="e2e-delhi",
            cluster_id="101",
            request_id=f"CR-{index:06d}"[:9],
            outcome="pending",
            detail={"reason": f"incident {index}", "kinds": ("scale",), "gpus": 8.0},
        )
        for index in range(count)
    ]


async def run_sql(store: Store, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), params)


async def verify(store: Store) -> tuple[int, ChainBreak | None]:
    return await store.verify_audit(page_size=3)  # small pages: the walk crosses them


async def test_each_append_continues_the_chain_and_moves_its_head(store: Store) -> None:
    entries = await append_some(store, 5)
    assert entries[0].prev_hash == GENESIS_HASH
    for before, after in itertools.pairwise(entries):
        assert after.prev_hash == before.hash
    for entry in entries:
        assert entry.hash == entry_hash(entry.hashed_fields(), str(entry.prev_hash))
        assert entry.detail["gpus"] == 8 and entry.detail["kinds"] == ["scale"]
    assert await store.list_audit(limit=5) == list(reversed(entries))  # what is stored
    head = await store.chain_head()
    assert (head.entries, head.last_id, head.last_hash) == (5, entries[-1].id, entries[-1].hash)
    assert await verify(store) == (5, None)


async def test_an_empty_trail_is_intact(store: Store) -> None:
    assert await verify(store) == (0, None)


async def test_an_append_is_one_statement_on_postgresql_and_two_on_sqlite(store: Store) -> None:
    """The audit append is on every change's path: the database reads the head and hashes
    the entry in the statement that writes it (PostgreSQL moves the head in it too)."""
    statements: list[str] = []

    def count(_conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.split()[0].upper() not in ("BEGIN", "COMMIT"):
            statements.append(statement.split()[0].upper())

    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    try:
        [entry] = await append_some(store, 1)
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", count)
    expected = ["WITH"] if store.engine.dialect.name == "postgresql" else ["INSERT", "UPDATE"]
    assert statements == expected
    assert entry.hash == entry_hash(entry.hashed_fields(), GENESIS_HASH)


async def test_two_stores_appending_at_once_never_fork_the_chain(database_url: str) -> None:
    """Two replicas (two engines on one database) append concurrently."""
    first, second = await Store.open(database_url), await Store.open(database_url)
    try:
        written = await asyncio.gather(
            *(append_some(s, 1, actor=f"U{i:02d}") for i in range(20) for s in (first, second))
        )
        assert await verify(first) == (40, None)
        entries = [e async for e in second.export_audit()]
        assert len(entries) == 40 == len({e.prev_hash for e in entries})
        assert {e.id for batch in written for e in batch} == {e.id for e in entries}
        assert [e.at for e in entries] == sorted(e.at for e in entries)  # chain order is time order
    finally:
        await first.close()
        await second.close()


async def test_an_edited_entry_is_named(store: Store) -> None:
    entries = await append_some(store, 6)
    await run_sql(
        store, "UPDATE gpuops_audit SET actor = 'U06MALLORY' WHERE id = :id", id=entries[3].id
    )
    count, found = await verify(store)
    assert count == 3 and found is not None
    assert (found.kind, found.entry_id) == ("edited", entries[3].id)
    assert f"entry {entries[3].id} was edited" in found.text


async def test_an_edited_hash_or_link_is_an_edit_too(store: Store) -> None:
    entries = await append_some(store, 4)
    await run_sql(
        store, "UPDATE gpuops_audit SET prev_hash = :h WHERE id = :id", h="f" * 64, id=entries[1].id
    )
    _, found = await verify(store)
    assert found is not None and (found.kind, found.entry_id) == ("edited", entries[1].id)


async def test_a_removed_entry_is_named_by_the_one_after_it(store: Store) -> None:
    entries = await append_some(store, 6)
    await run_sql(store, "DELETE FROM gpuops_audit WHERE id = :id", id=entries[2].id)
    count, found = await verify(store)
    assert count == 2 and found is not None
    assert (found.kind, found.entry_id) == ("removed", entries[3].id)
    assert f"between entry {entries[1].id} and entry {entries[3].id}" in found.text


async def test_removing_the_first_or_the_newest_entries_shows(store: Store) -> None:
    entries = await append_some(store, 5)
    await run_sql(store, "DELETE FROM gpuops_audit WHERE id >= :id", id=entries[3].id)
    count, found = await verify(store)
    assert count == 3 and found is not None and found.kind == "removed"
    assert f"after entry {entries[2].id}" in found.text and "5 entries" in found.text

    await run_sql(store, "DELETE FROM gpuops_audit WHERE id = :id", id=entries[0].id)
    _, first = await verify(store)
    assert first is not None and (first.kind, first.entry_id) == ("removed", entries[1].id)


async def forge(store: Store, prev_hash: str | None, *, chained: bool) -> int:
    """A row written straight into the table, as someone with database access would."""
    fields: dict[str, Any] = {
        "at": datetime.now(UTC),
        "actor": "U01ALICE",
        "event": "approved",
        "project": "e2e-delhi",
        "cluster_id": "101",
        "request_id": "CR-FORGED",
        "outcome": "approved",
        "detail": {},
    }
    hashes = {}
    if chained and prev_hash is not None:
        hashes = {"prev_hash": prev_hash, "hash": entry_hash(fields, prev_hash)}
    async with store.engine.begin() as conn:
        result = await conn.execute(insert(audit).values(**fields, **hashes).returning(audit.c.id))
        return int(result.scalar_one())


async def test_an_inserted_row_without_a_hash_is_named(store: Store) -> None:
    await append_some(store, 3)
    forged = await forge(store, None, chained=False)
    await append_some(store, 2)  # the next appends chain past it, to the head
    count, found = await verify(store)
    assert count == 3 and found is not None
    assert (found.kind, found.entry_id) == ("inserted", forged)


async def test_an_inserted_row_with_a_correct_hash_is_named(store: Store) -> None:
    """Whoever knows the algorithm can hash a forged row; the next entry still skips it."""
    entries = await append_some(store, 3)
    middle = await forge(store, entries[-1].hash, chained=True)
    await append_some(store, 1)
    _, found = await verify(store)
    assert found is not None and (found.kind, found.entry_id) == ("inserted", middle)


async def test_a_row_forged_after_the_head_is_named(store: Store) -> None:
    await append_some(store, 3)
    head = await store.chain_head()
    tail = await forge(store, head.last_hash, chained=True)
    _, found = await verify(store)
    assert found is not None
    assert (found.kind, found.entry_id) == ("inserted", tail)
    assert "the chain's last append was entry" in found.text


async def test_the_migration_chains_entries_written_before_the_chain(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(
            bot.core.store.migrations, "MIGRATIONS", bot.core.store.migrations.MIGRATIONS[:4]
        )
        old = await Store.open(database_url)
        v4_audit = Table(  # the table as version 4 left it: no hashes
            audit.name,
            MetaData(),
            *(c._copy() for c in audit.columns if c.name not in ("prev_hash", "hash")),
        )
        async with old.engine.begin() as conn:
            for index in range(7):
                await conn.execute(
                    insert(v4_audit).values(
                        at=datetime.now(UTC),
                        actor="U04DAVE",
                        event="requested",
                        project="together-prod",
                        detail={"n": index, "reason": "older"},
                    )
                )
        await old.close()
    monkeypatch.setattr(bot.core.store.migrations.audit_chain, "CHAIN_BATCH", 3)
    store = await Store.open(database_url)
    try:
        assert await verify(store) == (7, None)
        added = await append_some(store, 1)
        assert await verify(store) == (8, None)
        oldest = await store.list_audit(limit=8)
        assert oldest[-1].prev_hash == GENESIS_HASH and added[0].prev_hash == oldest[1].hash
    finally:
        await store.close()


async def test_export_reads_in_pages_with_filters(store: Store) -> None:
    entries = await append_some(store, 4)
    await store.append_audit(actor="gpuops", event="health_alert", project="together-prod")
    exported = [e async for e in store.export_audit(page_size=2)]
    assert [e.id for e in exported] == [e.id for e in entries] + [exported[-1].id]
    only = [e async for e in store.export_audit(project="together-prod", page_size=2)]
    assert [e.event for e in only] == ["health_alert"]
    later = [e async for e in store.export_audit(since=entries[2].at)]
    assert [e.id for e in later][:2] == [entries[2].id, entries[3].id]


@pytest.mark.postgres
async def test_chaining_many_entries_may_take_longer_than_an_ordinary_open(
    pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open is bounded (connect + operation timeout); migration 5 rewrites every entry
    and is given more time (``extra_seconds``) when it upgrades an existing database."""
    with monkeypatch.context() as patched:
        patched.setattr(
            bot.core.store.migrations, "MIGRATIONS", bot.core.store.migrations.MIGRATIONS[:4]
        )
        await (await Store.open(pg_database_url)).close()
    chain_existing = bot.core.store.migrations.audit_chain.chain_existing_entries

    def slow_chain(conn: Connection) -> tuple[int, int | None, str]:
        time.sleep(1.5)  # a long table, on the migration's connection
        return chain_existing(conn)

    monkeypatch.setattr(bot.core.store.migrations.audit_chain, "chain_existing_entries", slow_chain)
    store = await Store.open(pg_database_url, connect_timeout=0.5, operation_timeout=0.5)
    try:
        assert await verify(store) == (0, None)
    finally:
        await store.close()


_MOVED = ("at", "actor", "event", "project", "cluster_id", "request_id", "outcome", "detail")


async def swap(store: Store, first: int, second: int) -> None:
    """Two rows' contents, hashes and links exchanged: the entries in the other order."""
    columns = [*_MOVED, "prev_hash", "hash"]
    async with store.engine.begin() as conn:
        rows = {
            row["id"]: dict(row)
            for row in (
                await conn.execute(audit.select().where(audit.c.id.in_([first, second])))
            ).mappings()
        }
        for target, source in ((first, second), (second, first)):
            values = {name: rows[source][name] for name in columns}
            await conn.execute(audit.update().where(audit.c.id == target).values(**values))


async def rehash_newest(store: Store, entry: AuditEntry) -> None:
    """The newest entry edited and hashed again, as whoever knows the algorithm can."""
    fields = {**entry.hashed_fields(), "actor": "U06MALLORY"}
    assert entry.prev_hash is not None
    new_hash = entry_hash(fields, entry.prev_hash)
    await run_sql(
        store,
        "UPDATE gpuops_audit SET actor = 'U06MALLORY', hash = :h WHERE id = :id",
        h=new_hash,
        id=entry.id,
    )


async def test_two_entries_swapped_are_named_as_reordered(store: Store) -> None:
    entries = await append_some(store, 6)
    await swap(store, entries[2].id, entries[3].id)
    count, found = await verify(store)
    assert count == 2 and found is not None
    assert (found.kind, found.entry_id) == ("reordered", entries[2].id)
    assert f"entries {entries[2].id} and {entries[3].id} were swapped" in found.text
    assert "inserted" not in found.text and "removed" not in found.text


async def test_the_newest_entry_edited_and_hashed_again_is_an_edit_not_a_removal(
    store: Store,
) -> None:
    entries = await append_some(store, 5)
    await rehash_newest(store, entries[-1])
    count, found = await verify(store)
    assert count == 5 and found is not None
    assert (found.kind, found.entry_id) == ("edited", entries[-1].id)
    assert f"entry {entries[-1].id}, the newest, was edited and hashed again" in found.text
    assert "removed" not in found.text


async def test_an_edited_chain_head_is_named_as_such(store: Store) -> None:
    entries = await append_some(store, 4)
    await run_sql(store, "UPDATE gpuops_audit_chain SET last_hash = :h", h="e" * 64)
    _, found = await verify(store)
    assert found is not None and (found.kind, found.entry_id) == ("edited", entries[-1].id)
    assert "or the chain head was edited" in found.text and "removed" not in found.text

    await run_sql(store, "UPDATE gpuops_audit_chain SET last_hash = :h", h=entries[-1].hash)
    await run_sql(store, "UPDATE gpuops_audit_chain SET entries = 9")
    count, counted = await verify(store)
    assert count == 4 and counted is not None
    assert (counted.kind, counted.entry_id) == ("edited", None)
    assert counted.text.startswith("the chain head was edited: ") and "9 entries" in counted.text
