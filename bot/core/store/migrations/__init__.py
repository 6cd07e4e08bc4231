"""Versioned schema migrations for the state store, run by ``Store.open``.

Each migration has a version, a description and a function that changes the schema on a
synchronous SQLAlchemy connection. Applied versions are recorded in
``gpuops_schema_version``. The table definitions inside a migration are a frozen snapshot
of that version's schema: a later change to the store's tables gets a new migration, never
an edit to an old one.

Concurrency: on PostgreSQL all pending migrations run in one transaction that first takes a
transaction-scoped advisory lock, so replicas starting together migrate once, in turn. On
SQLite the transaction starts with ``BEGIN IMMEDIATE``, which takes the database's write
lock up front (other openers wait on the busy timeout).

The migrations themselves live by kind: ``tables`` (new tables), ``columns``, ``audit_chain``
(migration 5), ``triggers`` (migration 11, SQLite) and ``indexes``; this module lists them
in order and applies what a database lacks.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import Column, Connection, Integer, MetaData, Table, Text, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.store.migrations.audit_chain import v5_audit_chain
from bot.core.store.migrations.columns import (
    v2_approval_prompt_ts,
    v4_lease_fencing,
    v7_time,
    v8_request_approvals,
    v9_no_step_token,
    v10_request_step,
    v13_mirror_ts,
)
from bot.core.store.migrations.indexes import REVERT_HELD as REVERT_HELD
from bot.core.store.migrations.indexes import REVERT_HELD_STATES as REVERT_HELD_STATES
from bot.core.store.migrations.indexes import (
    v12_one_revert,
    v14_ordered_indexes,
    v15_channel_index,
)
from bot.core.store.migrations.tables import (
    v1_initial_tables,
    v3_watch_tables,
    v6_workflow_steps,
    v16_agent_tokens,
    v17_oncall_tables,
    v18_staged_plans,
    v19_usage_ledger,
)
from bot.core.store.migrations.triggers import v11_single_statement_transitions
from bot.core.store.migrations.types import Migration as Migration
from bot.core.store.migrations.types import UTCDateTime as UTCDateTime
from bot.core.store.migrations.types import autoincrement_id_type as autoincrement_id_type
from bot.core.store.migrations.types import json_type as json_type

log = logging.getLogger(__name__)

SCHEMA_VERSION_TABLE = "gpuops_schema_version"

# Execution option read by the store's SQLite "begin" hook: which BEGIN statement to emit.
SQLITE_BEGIN_OPTION = "gpuops_sqlite_begin"
SQLITE_BEGIN_STATEMENTS = {"deferred": "BEGIN", "immediate": "BEGIN IMMEDIATE"}

# Key of the PostgreSQL advisory lock that serialises migrations (any fixed 64-bit number).
_PG_MIGRATION_LOCK_KEY = 0x6770_756F_7073_0001


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "change requests, audit, deliveries, cluster locks, leases", v1_initial_tables),
    Migration(2, "change requests: approval prompt ts", v2_approval_prompt_ts),
    Migration(3, "watch: alert keys, posted remediations, memory", v3_watch_tables),
    Migration(4, "lease fencing tokens, lock call deadlines", v4_lease_fencing),
    # Chaining hashes every entry: ~3,000 a second on a busy 2-core machine (PostgreSQL).
    Migration(
        5, "audit hash chain, chain head, audit time index", v5_audit_chain, extra_seconds=600
    ),
    Migration(6, "workflow steps (function executions)", v6_workflow_steps),
    Migration(7, "change requests: follow-up, schedule, revert", v7_time),
    Migration(8, "change requests: approvals so far", v8_request_approvals),
    Migration(9, "workflow steps: no step token kept", v9_no_step_token),
    Migration(10, "change requests: the step that made one, index by cluster", v10_request_step),
    Migration(
        11, "change requests: one statement per transition", v11_single_statement_transitions
    ),
    Migration(12, "change requests: one revert per request", v12_one_revert),
    Migration(13, "change requests: the notify channel's copy ts", v13_mirror_ts),
    Migration(14, "indexes in read order: timeline, Home, schedule", v14_ordered_indexes),
    Migration(15, "change requests: index by channel", v15_channel_index),
    Migration(16, "agent tokens; change requests: via, client, confirm", v16_agent_tokens),
    Migration(17, "on-call approvers: DM copies of prompts, escalations", v17_oncall_tables),
    Migration(18, "staged plans and their steps", v18_staged_plans),
    Migration(19, "usage ledger: cursors and 15-minute buckets", v19_usage_ledger),
)

LATEST_VERSION = MIGRATIONS[-1].version

_version_table = Table(
    SCHEMA_VERSION_TABLE,
    MetaData(),
    Column("version", Integer(), primary_key=True, autoincrement=False),
    Column("description", Text(), nullable=False),
    Column("applied_at", UTCDateTime(), nullable=False),
)


def _check_migration_order(migrations: tuple[Migration, ...]) -> None:
    versions = [migration.version for migration in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"migration versions must be 1, 2, 3, … in order; got {versions}")


def applied_versions(conn: Connection) -> list[int]:
    """The schema versions recorded in the database, in order (empty for a fresh one)."""
    if not conn.dialect.has_table(conn, SCHEMA_VERSION_TABLE):
        return []
    rows = conn.execute(select(_version_table.c.version).order_by(_version_table.c.version))
    return list(rows.scalars())


def missing_versions(conn: Connection) -> list[int]:
    """The versions up to LATEST_VERSION this database has not applied (all of them for a
    database without the schema), without creating or changing anything."""
    done = set(applied_versions(conn))
    return [m.version for m in MIGRATIONS if m.version not in done]


def _apply_pending(conn: Connection) -> tuple[int, ...]:
    _version_table.create(conn, checkfirst=True)
    done = set(applied_versions(conn))
    unknown = sorted(version for version in done if version > LATEST_VERSION)
    if unknown:
        # A newer release migrated this database; an older replica may still run on it.
        log.warning("database has schema versions %s newer than this release knows", unknown)
    applied: list[int] = []
    for migration in MIGRATIONS:
        if migration.version in done:
            continue
        migration.apply(conn)
        conn.execute(
            insert(_version_table).values(
                version=migration.version,
                description=migration.description,
                applied_at=datetime.now(UTC),
            )
        )
        applied.append(migration.version)
    if applied:
        log.info("store schema migrated to version %d (applied %s)", applied[-1], applied)
    return tuple(applied)


async def pending_extra_seconds(engine: AsyncEngine) -> float:
    """The extra time the migrations not yet applied may take (0 for a fresh database,
    where there are no rows to rewrite)."""
    async with engine.connect() as conn:
        done = set(await conn.run_sync(applied_versions))
    if not done:
        return 0.0
    return sum(m.extra_seconds for m in MIGRATIONS if m.version not in done)


async def migrate(engine: AsyncEngine, *, create_schema: str | None = None) -> tuple[int, ...]:
    """Apply every pending migration; returns the versions this call applied.

    ``create_schema`` (PostgreSQL): the already-quoted name of a schema to create, if missing,
    under the same lock before migrating into it.
    """
    _check_migration_order(MIGRATIONS)
    if engine.dialect.name == "postgresql":
        async with engine.begin() as conn:
            await conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK_KEY}
            )
            if create_schema is not None:
                await conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {create_schema}"))
            return await conn.run_sync(_apply_pending)
    immediate = engine.execution_options(**{SQLITE_BEGIN_OPTION: "immediate"})
    async with immediate.begin() as conn:
        return await conn.run_sync(_apply_pending)
