"""``gpuops audit export`` and ``gpuops audit verify`` as real subprocesses, on SQLite and on
PostgreSQL: the export carries every hash (recomputable from the file alone), and verify
exits 1 naming the entry edited, removed or inserted."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import secrets
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text

from bot.core.store import Store, StoreNotReady, StoreUnavailable, migrations
from bot.core.store.chain import GENESIS_HASH, entry_hash
from bot.core.store.tables import audit
from tests.support.process_kit import GPUOPS, Finished, run_gpuops


def audit_env(tmp_path: Path, database_url: str) -> dict[str, str]:
    """Only the database: export and verify need nothing of Slack or the providers."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "GPUOPS_DATABASE_URL": database_url,
    }


async def seeded(database_url: str) -> list[int]:
    """Six entries of two projects; their ids."""
    async with await Store.open(database_url) as store:
        entries = [
            await store.append_audit(
                actor="U04DAVE",
                event="requested" if index % 2 == 0 else "approved",
                project="e2e-delhi" if index < 4 else "together-prod",
                cluster_id="101",
                request_id="CR-PFXSA6",
                outcome="pending",
                detail={"reason": f"NCCL hang, take {index}", "kinds": ["restart"]},
            )
            for index in range(6)
        ]
    return [e.id for e in entries]


async def tamper(database_url: str, statement: str, **params: object) -> None:
    async with await Store.open(database_url) as store, store.engine.begin() as conn:
        await conn.execute(text(statement), params)


async def gpuops_audit(tmp_path: Path, database_url: str, *args: str) -> Finished:
    """``gpuops audit …`` as a subprocess with only the database in its environment."""
    return await run_gpuops(["audit", *args], audit_env(tmp_path, database_url), tmp_path)


async def test_verify_passes_then_names_an_edited_row(tmp_path: Path, database_url: str) -> None:
    ids = await seeded(database_url)
    intact = await gpuops_audit(tmp_path, database_url, "verify")
    assert (intact.code, intact.stdout) == (0, "6 entries, chain intact\n"), intact.stderr

    await tamper(
        database_url, "UPDATE gpuops_audit SET outcome = 'denied' WHERE id = :id", id=ids[2]
    )
    edited = await gpuops_audit(tmp_path, database_url, "verify")
    assert edited.code == 1
    assert f"entry {ids[2]} was edited" in edited.stdout and "2 intact" in edited.stdout


async def test_verify_names_a_deleted_row(tmp_path: Path, database_url: str) -> None:
    ids = await seeded(database_url)
    await tamper(database_url, "DELETE FROM gpuops_audit WHERE id = :id", id=ids[3])
    removed = await gpuops_audit(tmp_path, database_url, "verify")
    assert removed.code == 1
    assert f"removed between entry {ids[2]} and entry {ids[4]}" in removed.stdout


async def test_verify_names_an_inserted_row(tmp_path: Path, database_url: str) -> None:
    await seeded(database_url)
    async with await Store.open(database_url) as store:
        head = await store.chain_head()
        fields = {
            "at": datetime.now(UTC),
            "actor": "U01ALICE",
            "event": "approved",
            "project": "e2e-delhi",
            "cluster_id": "101",
            "request_id": "CR-PFXSA6",
            "outcome": "approved",
            "detail": {},
        }
        digest = entry_hash(fields, head.last_hash)  # a forger who knows the algorithm
        async with store.engine.begin() as conn:
            inserted = await conn.execute(
                audit.insert()
                .values(**fields, prev_hash=head.last_hash, hash=digest)
                .returning(audit.c.id)
            )
            forged = inserted.scalar_one()
    found = await gpuops_audit(tmp_path, database_url, "verify")
    assert found.code == 1 and f"entry {forged} was inserted" in found.stdout


async def test_export_jsonl_carries_hashes_anyone_can_recompute(
    tmp_path: Path, database_url: str
) -> None:
    await seeded(database_url)
    done = await gpuops_audit(tmp_path, database_url, "export")
    assert done.code == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 6 and rows[0]["prev_hash"] == GENESIS_HASH
    for before, row in zip([None, *rows], rows, strict=False):
        assert before is None or row["prev_hash"] == before["hash"]
        fields = {**row, "at": datetime.fromisoformat(row["at"])}
        assert entry_hash(fields, row["prev_hash"]) == row["hash"]
    only = await gpuops_audit(tmp_path, database_url, "export", "--project", "together-prod")
    assert [json.loads(line)["project"] for line in only.stdout.splitlines()] == [
        "together-prod",
        "together-prod",
    ]


async def test_export_csv_and_since(tmp_path: Path, database_url: str) -> None:
    await seeded(database_url)
    done = await gpuops_audit(tmp_path, database_url, "export", "--format", "csv", "--since", "1h")
    assert done.code == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 6
    assert json.loads(rows[0]["detail"]) == {"kinds": ["restart"], "reason": "NCCL hang, take 0"}
    assert rows[0]["hash"] == rows[1]["prev_hash"] and len(rows[5]["hash"]) == 64
    future = await gpuops_audit(tmp_path, database_url, "export", "--since", "2099-01-01T00:00:00Z")
    assert future.code == 2 and "in the future" in future.stderr and future.stdout == ""
    later = await gpuops_audit(
        tmp_path, database_url, "export", "--since", datetime.now(UTC).isoformat()
    )
    assert (later.code, later.stdout) == (0, "")


async def test_verify_words_a_reorder_and_an_edited_head_as_what_they_are(
    tmp_path: Path, database_url: str
) -> None:
    ids = await seeded(database_url)
    columns = [c for c in audit.columns if c.name != "id"]
    async with await Store.open(database_url) as store, store.engine.begin() as conn:
        rows = {
            r["id"]: dict(r)
            for r in (await conn.execute(audit.select().where(audit.c.id.in_(ids[1:3])))).mappings()
        }
        for target, source in ((ids[1], ids[2]), (ids[2], ids[1])):
            values = {c.name: rows[source][c.name] for c in columns}
            await conn.execute(audit.update().where(audit.c.id == target).values(**values))
    swapped = await gpuops_audit(tmp_path, database_url, "verify")
    assert swapped.code == 1, swapped.stderr
    assert f"entries {ids[1]} and {ids[2]} were swapped" in swapped.stdout
    assert "inserted" not in swapped.stdout

    async with await Store.open(database_url) as store, store.engine.begin() as conn:
        for target, source in ((ids[1], ids[1]), (ids[2], ids[2])):  # back in place
            values = {c.name: rows[source][c.name] for c in columns}
            await conn.execute(audit.update().where(audit.c.id == target).values(**values))
    await tamper(database_url, "UPDATE gpuops_audit_chain SET last_hash = :h", h="e" * 64)
    head = await gpuops_audit(tmp_path, database_url, "verify")
    assert head.code == 1, head.stderr
    newest = f"entry {ids[5]}, the newest, was edited and hashed again, or the chain head was"
    assert newest in head.stdout and "6 intact" in head.stdout
    assert "removed" not in head.stdout and "the trail has" not in head.stdout


async def tables_in(database_url: str) -> list[str]:
    """The tables a database holds, read without the store (which would create them)."""
    if database_url.startswith("sqlite"):
        path = database_url.removeprefix("sqlite:///")
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
    return await _pg_tables(database_url)


async def _pg_tables(database_url: str) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    finally:
        await conn.close()
    return [row["tablename"] for row in rows]


def missing_database(database_url: str, tmp_path: Path) -> tuple[str, str]:
    """A URL (with a password, for PostgreSQL) naming a database that does not exist, and
    the name the message must give."""
    if database_url.startswith("sqlite"):
        path = tmp_path / "absent" / "gpuops.db"
        return f"sqlite:///{path}", f"sqlite:///{path}"
    name = f"gpuops_t_absent_{secrets.token_hex(4)}"
    return (
        f"postgresql://postgres:{SECRET}@127.0.0.1:5432/{name}",
        f"postgresql://postgres@127.0.0.1:5432/{name}",
    )


SECRET = "pw-never-shown-9f2c"


@pytest.mark.parametrize("verb", ["verify", "export"])
async def test_a_missing_database_is_named_and_not_created(
    tmp_path: Path, database_url: str, verb: str
) -> None:
    url, named = missing_database(database_url, tmp_path)
    done = await gpuops_audit(tmp_path, url, verb)
    assert done.code == 1 and done.stdout == ""
    assert f"the state store {named} does not exist" in done.stderr, done.stderr
    assert SECRET not in done.stderr
    assert not (tmp_path / "absent").exists()


async def test_the_default_database_is_not_created(tmp_path: Path) -> None:
    env = audit_env(tmp_path, "")
    del env["GPUOPS_DATABASE_URL"]
    done = await run_gpuops(["audit", "verify"], env, tmp_path)
    assert done.code == 1 and "sqlite:///gpuops.db does not exist" in done.stderr, done.stderr
    assert not (tmp_path / "gpuops.db").exists()


@pytest.mark.parametrize("verb", ["verify", "export"])
async def test_a_database_without_the_schema_is_named_and_left_empty(
    tmp_path: Path, database_url: str, verb: str
) -> None:
    if database_url.startswith("sqlite"):
        with closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as conn:
            conn.execute("CREATE TABLE unrelated (a INTEGER)")
    done = await gpuops_audit(tmp_path, database_url, verb)
    assert done.code == 1 and done.stdout == ""
    assert "holds no gpuops schema" in done.stderr, done.stderr
    assert await tables_in(database_url) in ([], ["unrelated"])


async def test_an_older_schema_is_named_and_not_migrated(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-1])
        old = await Store.open(database_url)
        await old.close()
    for verb in ("verify", "export"):
        done = await gpuops_audit(tmp_path, database_url, verb)
        assert done.code == 1 and done.stdout == ""
        assert "has an older schema" in done.stderr, done.stderr
        assert f"[{migrations.LATEST_VERSION}]" in done.stderr
    with pytest.raises(StoreNotReady, match="older schema"):  # still not migrated
        await Store.open_read_only(database_url)


async def test_export_into_a_reader_that_leaves_ends_quietly(
    tmp_path: Path, database_url: str
) -> None:
    async with await Store.open(database_url) as store:
        for index in range(120):  # ~250 kB: more than a pipe holds, so the write meets EPIPE
            await store.append_audit(
                actor="U04DAVE",
                event="requested",
                project="e2e-delhi",
                cluster_id="101",
                request_id="CR-PFXSA6",
                outcome="pending",
                detail={"reason": f"{index} " + "x" * 2000},
            )
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-o",
        "pipefail",
        "-c",
        '"$0" audit export | head -n 1',
        GPUOPS,
        env=audit_env(tmp_path, database_url),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert err.decode() == ""
    assert json.loads(out)["detail"]["reason"].startswith("0 ")
    assert process.returncode == 141  # as a program ended by SIGPIPE


async def test_the_audit_commands_store_refuses_every_write(database_url: str) -> None:
    await seeded(database_url)
    async with await Store.open_read_only(database_url) as store:
        assert (await store.verify_audit())[0] == 6
        with pytest.raises(StoreUnavailable) as refused:
            await store.append_audit(
                actor="U04DAVE",
                event="requested",
                project="e2e-delhi",
                cluster_id="101",
                request_id="CR-PFXSA6",
                outcome="pending",
                detail={},
            )
    assert refused.value.read_only
    async with await Store.open(database_url) as store:
        assert (await store.chain_head()).entries == 6
