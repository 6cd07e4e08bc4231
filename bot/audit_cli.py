"""``gpuops audit export`` and ``gpuops audit verify`` (SPEC §2, §10): the audit trail with
its hashes on stdout, and the check of its hash chain."""

from __future__ import annotations

import csv
import json
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Literal, TextIO

from bot.config import Settings
from bot.core.since import parse_since
from bot.core.store import AuditEntry, Store
from bot.core.store.chain import stamp

ExportFormat = Literal["jsonl", "csv"]
COLUMNS = (
    "id",
    "at",
    "actor",
    "event",
    "project",
    "cluster_id",
    "request_id",
    "outcome",
    "detail",
    "prev_hash",
    "hash",
)


def exported(entry: AuditEntry) -> dict[str, object]:
    """One entry as written out: ``at`` in the chain's canonical form, so that a reader can
    recompute every hash from the file (bot.core.store.chain)."""
    row = entry.model_dump(include=set(COLUMNS))
    row["at"] = stamp(entry.at)
    return {name: row[name] for name in COLUMNS}


async def _open(settings: Settings) -> Store:
    """The store, read-only: an audit command never creates, migrates or writes it."""
    return await Store.open_read_only(
        settings.gpuops_database_url,
        connect_timeout=settings.gpuops_db_connect_timeout,
        operation_timeout=settings.gpuops_db_operation_timeout,
    )


async def run_export(
    settings: Settings,
    out: TextIO,
    *,
    since: str | None = None,
    project: str | None = None,
    fmt: ExportFormat = "jsonl",
) -> int:
    """Write the entries (oldest first) to ``out`` as they are read; returns 0."""
    start = parse_since(since, datetime.now(UTC)) if since else None
    store = await _open(settings)
    try:
        writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
        if writer is not None:
            writer.writerow(COLUMNS)
        # Closed here when a write fails (a reader gone): its snapshot ends before the store.
        async with aclosing(store.export_audit(since=start, project=project)) as entries:
            async for entry in entries:
                row = exported(entry)
                if writer is None:
                    out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
                else:
                    row["detail"] = json.dumps(row["detail"], ensure_ascii=False, sort_keys=True)
                    writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    finally:
        await store.close()
    return 0


async def run_verify(settings: Settings, out: TextIO) -> int:
    """Walk the chain: 0 and "N entries, chain intact", or 1 and the first break."""
    store = await _open(settings)
    try:
        count, found = await store.verify_audit()
    finally:
        await store.close()
    if found is None:
        print(f"{count} entries, chain intact", file=out)
        return 0
    print(f"chain broken after {count} intact entries: {found.text}", file=out)
    return 1
