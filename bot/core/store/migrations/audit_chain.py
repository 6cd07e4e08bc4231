"""Migration 5: the audit trail's hash chain, with the entries written before it chained."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    MetaData,
    Table,
    Text,
    bindparam,
    insert,
    select,
    text,
    update,
)

from bot.core.store.chain import CHAIN_NAME, GENESIS_HASH, HASHED_FIELDS, entry_hash
from bot.core.store.migrations.types import UTCDateTime, autoincrement_id_type, json_type

CHAIN_BATCH = 1000


def v5_audit_chain(conn: Connection) -> None:
    # SPEC §10: prev_hash and hash on each entry, the chain head, an index for reading a
    # time window (the timeline), and the entries written before the chain, chained.
    conn.execute(text("ALTER TABLE gpuops_audit ADD COLUMN prev_hash TEXT"))
    conn.execute(text("ALTER TABLE gpuops_audit ADD COLUMN hash TEXT"))
    conn.execute(text("CREATE INDEX ix_gpuops_audit_at ON gpuops_audit (at, id)"))
    metadata = MetaData()
    chain = Table(
        "gpuops_audit_chain",
        metadata,
        Column("name", Text(), primary_key=True),
        Column("entries", BigInteger(), nullable=False),
        Column("last_id", BigInteger()),
        Column("last_hash", Text(), nullable=False),
    )
    metadata.create_all(conn)
    entries, last_id, last_hash = chain_existing_entries(conn)
    conn.execute(
        insert(chain).values(name=CHAIN_NAME, entries=entries, last_id=last_id, last_hash=last_hash)
    )


def chain_existing_entries(conn: Connection) -> tuple[int, int | None, str]:
    """Hash the entries already there, oldest first, in batches; the head they make."""
    audit = Table(
        "gpuops_audit",
        MetaData(),
        Column("id", autoincrement_id_type(), primary_key=True),
        Column("at", UTCDateTime(), nullable=False),
        *(Column(name, Text()) for name in HASHED_FIELDS if name != "detail"),
        Column("detail", json_type(), nullable=False),
        Column("prev_hash", Text()),
        Column("hash", Text()),
    )
    set_hash = (
        update(audit)
        .where(audit.c.id == bindparam("row_id"))
        .values(prev_hash=bindparam("new_prev"), hash=bindparam("new_hash"))
    )
    count, last_id, last_hash = 0, None, GENESIS_HASH
    while True:
        page = select(audit).order_by(audit.c.id).limit(CHAIN_BATCH)
        if last_id is not None:
            page = page.where(audit.c.id > last_id)
        rows = conn.execute(page).mappings().all()
        if not rows:
            return count, last_id, last_hash
        updates = []
        for row in rows:
            digest = entry_hash(dict(row), last_hash)
            updates.append({"row_id": row["id"], "new_prev": last_hash, "new_hash": digest})
            count, last_id, last_hash = count + 1, row["id"], digest
        conn.execute(set_hash, updates)
