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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.types import TypeDecorator, TypeEngine

from bot.core.store.chain import CHAIN_NAME, GENESIS_HASH, HASHED_FIELDS, entry_hash

log = logging.getLogger(__name__)

SCHEMA_VERSION_TABLE = "gpuops_schema_version"

# Execution option read by the store's SQLite "begin" hook: which BEGIN statement to emit.
SQLITE_BEGIN_OPTION = "gpuops_sqlite_begin"
SQLITE_BEGIN_STATEMENTS = {"deferred": "BEGIN", "immediate": "BEGIN IMMEDIATE"}

# Key of the PostgreSQL advisory lock that serialises migrations (any fixed 64-bit number).
_PG_MIGRATION_LOCK_KEY = 0x6770_756F_7073_0001


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that goes in and comes out as a tz-aware UTC datetime on every backend.

    PostgreSQL stores ``timestamptz``. SQLite has no time zones, so the value is stored as
    naive UTC text in a fixed format (which also keeps text comparison chronological).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; use a tz-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def json_type() -> TypeEngine[Any]:
    """JSON column type: JSONB on PostgreSQL, JSON text elsewhere."""
    return JSON().with_variant(JSONB(), "postgresql")


def autoincrement_id_type() -> TypeEngine[int]:
    """BIGINT identity on PostgreSQL; SQLite only auto-increments an INTEGER primary key."""
    return BigInteger().with_variant(Integer(), "sqlite")


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]
    # How much longer than an ordinary open the migration may take (rewriting rows).
    extra_seconds: float = 0.0


def _v1_initial_tables(conn: Connection) -> None:
    states = (
        "pending",
        "approved",
        "executing",
        "succeeded",
        "failed",
        "unknown",
        "denied",
        "expired",
        "cancelled",
    )
    state_list = ", ".join(f"'{state}'" for state in states)
    metadata = MetaData()
    Table(
        "gpuops_change_requests",
        metadata,
        Column("id", String(16), primary_key=True),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
        Column("state", String(16), nullable=False),
        Column("provider", Text(), nullable=False),
        Column("project", Text(), nullable=False),
        Column("cluster_id", Text(), nullable=False),
        Column("cluster_name", Text(), nullable=False),
        Column("action", Text(), nullable=False),
        Column("plan", json_type(), nullable=False),
        Column("kinds", json_type(), nullable=False),
        Column("needs_approval", Boolean(), nullable=False),
        Column("requester", Text(), nullable=False),
        Column("channel", Text(), nullable=False),
        Column("reason", Text()),
        Column("root_ts", Text()),
        Column("summary_ts", Text()),
        Column("decided_by", Text()),
        Column("decision_note", Text()),
        Column("break_glass", Boolean(), nullable=False),
        Column("result_message", Text()),
        Column("expires_at", UTCDateTime()),
        Column("version", Integer(), nullable=False),
        CheckConstraint(f"state IN ({state_list})", name="ck_gpuops_change_requests_state"),
        Index("ix_gpuops_change_requests_state", "state"),
        Index("ix_gpuops_change_requests_project", "project"),
        Index("ix_gpuops_change_requests_expires_at", "expires_at"),
    )
    Table(
        "gpuops_audit",
        metadata,
        Column("id", autoincrement_id_type(), primary_key=True, autoincrement=True),
        Column("at", UTCDateTime(), nullable=False),
        Column("actor", Text(), nullable=False),
        Column("event", Text(), nullable=False),
        Column("project", Text()),
        Column("cluster_id", Text()),
        Column("request_id", String(16)),
        Column("outcome", Text()),
        Column("detail", json_type(), nullable=False),
        Index("ix_gpuops_audit_project", "project"),
        Index("ix_gpuops_audit_request_id", "request_id"),
    )
    Table(
        "gpuops_deliveries",
        metadata,
        Column("key", Text(), primary_key=True),
        Column("seen_at", UTCDateTime(), nullable=False),
        Index("ix_gpuops_deliveries_seen_at", "seen_at"),
    )
    Table(
        "gpuops_cluster_locks",
        metadata,
        Column("provider", Text(), nullable=False),
        Column("project", Text(), nullable=False),
        Column("cluster_id", Text(), nullable=False),
        Column("request_id", String(16), nullable=False),
        Column("locked_at", UTCDateTime(), nullable=False),
        PrimaryKeyConstraint("provider", "project", "cluster_id", name="pk_gpuops_cluster_locks"),
    )
    Table(
        "gpuops_leases",
        metadata,
        Column("name", Text(), primary_key=True),
        Column("holder", Text(), nullable=False),
        Column("expires_at", UTCDateTime(), nullable=False),
    )
    metadata.create_all(conn)


def _v2_approval_prompt_ts(conn: Connection) -> None:
    # The approval prompt's message ts, so a decision can replace its buttons.
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN prompt_ts TEXT"))


def _v3_watch_tables(conn: Connection) -> None:
    # The watcher (SPEC §7): alert keys posted, the remediations gpuops posted, and what it
    # remembers between polls (cluster health per project).
    metadata = MetaData()
    Table(
        "gpuops_watch_alerts",
        metadata,
        Column("key", Text(), primary_key=True),
        Column("channel", Text(), nullable=False),
        Column("ts", Text()),
        Column("posted_at", UTCDateTime(), nullable=False),
    )
    Table(
        "gpuops_remediations",
        metadata,
        Column("id", String(16), primary_key=True),
        Column("project", Text(), nullable=False),
        Column("cluster_id", Text(), nullable=False),
        Column("cluster_name", Text(), nullable=False),
        Column("instance_id", Text(), nullable=False),
        Column("remediation_id", Text(), nullable=False),
        Column("node", Text(), nullable=False),
        Column("channel", Text(), nullable=False),
        Column("ts", Text()),
        Column("decision", String(16), nullable=False),
        Column("provider_state", Text(), nullable=False),
        Column("decided_by", Text()),
        Column("comment", Text()),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
        Column("version", Integer(), nullable=False),
        UniqueConstraint("project", "remediation_id", name="uq_gpuops_remediations_provider_id"),
        Index("ix_gpuops_remediations_project", "project"),
    )
    Table(
        "gpuops_watch_memory",
        metadata,
        Column("name", Text(), primary_key=True),
        Column("data", json_type(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
    )
    metadata.create_all(conn)


def _v4_lease_fencing(conn: Connection) -> None:
    # Fencing tokens on leases; the holder's lease and call deadline on cluster locks.
    timestamp = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "DATETIME"
    conn.execute(text("ALTER TABLE gpuops_leases ADD COLUMN token BIGINT NOT NULL DEFAULT 0"))
    conn.execute(text("ALTER TABLE gpuops_cluster_locks ADD COLUMN lease_name TEXT"))
    conn.execute(text(f"ALTER TABLE gpuops_cluster_locks ADD COLUMN calls_until {timestamp}"))


_CHAIN_BATCH = 1000


def _v5_audit_chain(conn: Connection) -> None:
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
    entries, last_id, last_hash = _chain_existing_entries(conn)
    conn.execute(
        insert(chain).values(name=CHAIN_NAME, entries=entries, last_id=last_id, last_hash=last_hash)
    )


def _chain_existing_entries(conn: Connection) -> tuple[int, int | None, str]:
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
        page = select(audit).order_by(audit.c.id).limit(_CHAIN_BATCH)
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


def _v6_workflow_steps(conn: Connection) -> None:
    # Workflow Builder steps (SPEC §11): one row per function execution, claimed once, with
    # the request it made and how its completion stands (so it completes after a restart).
    metadata = MetaData()
    Table(
        "gpuops_workflow_steps",
        metadata,
        Column("execution_id", Text(), primary_key=True),
        Column("token", Text(), nullable=False),
        Column("requester", Text(), nullable=False),
        Column("channel", Text(), nullable=False),
        Column("request_id", String(16)),
        Column("state", String(16), nullable=False),
        Column("outcome", String(16)),
        Column("payload", json_type()),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
        Index("ix_gpuops_workflow_steps_request_id", "request_id"),
        Index("ix_gpuops_workflow_steps_state", "state"),
    )
    metadata.create_all(conn)


def _v7_time(conn: Connection) -> None:
    # Follow-ups that outlive a process, scheduled changes, reverts and their old values.
    postgres = conn.dialect.name == "postgresql"
    timestamp = "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    table = "gpuops_change_requests"
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN follow_until {timestamp}"))
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN run_at {timestamp}"))
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN revert_of VARCHAR(16)"))
    conn.execute(
        text(f"ALTER TABLE {table} ADD COLUMN prior_values {'JSONB' if postgres else 'JSON'}")
    )
    conn.execute(
        text(f"CREATE INDEX ix_gpuops_change_requests_follow_until ON {table} (follow_until)")
    )
    conn.execute(text(f"CREATE INDEX ix_gpuops_change_requests_run_at ON {table} (run_at)"))


def _v8_request_approvals(conn: Connection) -> None:
    # Who approved a request that needs several approvers, and what it needed (SPEC §8).
    kind = "JSONB" if conn.dialect.name == "postgresql" else "JSON"
    conn.execute(text(f"ALTER TABLE gpuops_change_requests ADD COLUMN approvals {kind}"))


def _v9_no_step_token(conn: Connection) -> None:
    # A waiting step kept Slack's function token in clear; steps are completed with the
    # bot token now (SPEC §1.3: no secret stored). Blank the values, then drop the column.
    conn.execute(text("UPDATE gpuops_workflow_steps SET token = ''"))
    conn.execute(text("ALTER TABLE gpuops_workflow_steps DROP COLUMN token"))


def _v10_request_step(conn: Connection) -> None:
    # A request knows the step that made it ("" for none): ending it needs no look-up of
    # steps when none did. Rows an older replica writes during a rolling upgrade have NULL
    # ("not known") and are looked up as before.
    # Opening one asks for the others open on its cluster: found by index, not by scanning
    # the project's every request (a busy project has thousands).
    conn.execute(
        text(
            "CREATE INDEX ix_gpuops_change_requests_cluster"
            " ON gpuops_change_requests (project, cluster_id, state)"
        )
    )
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN step_id TEXT"))
    conn.execute(
        text(
            "UPDATE gpuops_change_requests SET step_id = COALESCE((SELECT s.execution_id"
            " FROM gpuops_workflow_steps s WHERE s.request_id = gpuops_change_requests.id), '')"
        )
    )


_V11_AUDIT_APPEND = """
  SELECT RAISE(ABORT, 'gpuops: the audit chain head moved')
   WHERE json_extract(NEW.last_transition, '$.audit') IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM gpuops_audit_chain WHERE name = 'audit'
       AND last_hash = json_extract(NEW.last_transition, '$.audit.prev_hash'));
  INSERT INTO gpuops_audit
    (at, actor, event, project, cluster_id, request_id, outcome, detail, prev_hash, hash)
  SELECT NEW.updated_at,
    json_extract(NEW.last_transition, '$.audit.actor'),
    json_extract(NEW.last_transition, '$.audit.event'),
    json_extract(NEW.last_transition, '$.audit.project'),
    json_extract(NEW.last_transition, '$.audit.cluster_id'),
    json_extract(NEW.last_transition, '$.audit.request_id'),
    json_extract(NEW.last_transition, '$.audit.outcome'),
    json_extract(NEW.last_transition, '$.audit.detail'),
    json_extract(NEW.last_transition, '$.audit.prev_hash'),
    json_extract(NEW.last_transition, '$.audit.hash')
   WHERE json_extract(NEW.last_transition, '$.audit') IS NOT NULL;
  UPDATE gpuops_audit_chain
     SET entries = entries + 1, last_id = last_insert_rowid(),
         last_hash = json_extract(NEW.last_transition, '$.audit.hash')
   WHERE name = 'audit' AND json_extract(NEW.last_transition, '$.audit') IS NOT NULL;
"""

_V11_SQLITE_TRIGGERS = (
    # A request opened with its audit entry in one INSERT.
    "".join(
        (
            "CREATE TRIGGER gpuops_request_opened AFTER INSERT ON gpuops_change_requests",
            " WHEN NEW.last_transition IS NOT NULL BEGIN",
            _V11_AUDIT_APPEND,
            "END",
        )
    ),
    # An execution's start: its lease taken (unless already held), its cluster locked with
    # the call deadline; the row is left as it was (RAISE(IGNORE)) unless both are this
    # request's now. What was taken stays, as in the store's own statements (BUSY keeps
    # the lease), and the store then finds out why with statements of its own.
    """CREATE TRIGGER gpuops_request_starting BEFORE UPDATE ON gpuops_change_requests
 WHEN NEW.last_transition IS NOT OLD.last_transition
  AND json_extract(NEW.last_transition, '$.lock') IS NOT NULL BEGIN
  INSERT INTO gpuops_leases (name, holder, expires_at, token)
  SELECT json_extract(NEW.last_transition, '$.lease.name'),
         json_extract(NEW.last_transition, '$.lease.holder'),
         json_extract(NEW.last_transition, '$.lease.until'), 1
   WHERE json_extract(NEW.last_transition, '$.lease') IS NOT NULL
  ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    expires_at = excluded.expires_at,
    token = CASE WHEN gpuops_leases.holder = excluded.holder
                  AND gpuops_leases.expires_at > NEW.updated_at
            THEN gpuops_leases.token ELSE gpuops_leases.token + 1 END
   WHERE gpuops_leases.holder = excluded.holder OR gpuops_leases.expires_at <= NEW.updated_at;
  SELECT RAISE(IGNORE)
   WHERE json_extract(NEW.last_transition, '$.lease') IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM gpuops_leases
       WHERE name = json_extract(NEW.last_transition, '$.lease.name')
         AND holder = json_extract(NEW.last_transition, '$.lease.holder')
         AND expires_at > NEW.updated_at);
  INSERT INTO gpuops_cluster_locks
    (provider, project, cluster_id, request_id, locked_at, lease_name, calls_until)
  SELECT NEW.provider, NEW.project, NEW.cluster_id, NEW.id, NEW.updated_at,
         json_extract(NEW.last_transition, '$.lock.lease_name'),
         json_extract(NEW.last_transition, '$.lock.calls_until')
   WHERE true
  ON CONFLICT (provider, project, cluster_id) DO UPDATE SET
    request_id = excluded.request_id,
    locked_at = CASE WHEN gpuops_cluster_locks.request_id = excluded.request_id
                THEN gpuops_cluster_locks.locked_at ELSE excluded.locked_at END,
    lease_name = excluded.lease_name,
    calls_until = excluded.calls_until
   WHERE gpuops_cluster_locks.request_id = excluded.request_id
      OR (gpuops_cluster_locks.lease_name IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM gpuops_leases live
            WHERE live.name = gpuops_cluster_locks.lease_name
              AND live.expires_at > NEW.updated_at)
          AND (gpuops_cluster_locks.calls_until IS NULL
               OR gpuops_cluster_locks.calls_until <= NEW.updated_at));
  SELECT RAISE(IGNORE)
   WHERE NOT EXISTS (SELECT 1 FROM gpuops_cluster_locks
     WHERE provider = NEW.provider AND project = NEW.project
       AND cluster_id = NEW.cluster_id AND request_id = NEW.id);
END""",
    # Every single-statement move: the cluster freed, the lease released, the audit entry.
    "".join(
        (
            """CREATE TRIGGER gpuops_request_moved AFTER UPDATE ON gpuops_change_requests
 WHEN NEW.last_transition IS NOT OLD.last_transition BEGIN
  DELETE FROM gpuops_cluster_locks
   WHERE json_extract(NEW.last_transition, '$.unlock')
     AND provider = NEW.provider AND project = NEW.project
     AND cluster_id = NEW.cluster_id AND request_id = NEW.id;
  UPDATE gpuops_leases
     SET expires_at = json_extract(NEW.last_transition, '$.release.released')
   WHERE json_extract(NEW.last_transition, '$.release') IS NOT NULL
     AND name = json_extract(NEW.last_transition, '$.release.name')
     AND holder = json_extract(NEW.last_transition, '$.release.holder');
""",
            _V11_AUDIT_APPEND,
            "END",
        )
    ),
)


def _v11_single_statement_transitions(conn: Connection) -> None:
    # What a transition asks of the other tables, carried by the request row it writes
    # (bot.core.store.trigger_work), so that on SQLite, which has no data-modifying WITH,
    # opening, starting and finishing a change are one statement each. The triggers fire
    # only when a statement sets last_transition: an older replica's writes, which never
    # do, write those tables themselves as before. They call no function of gpuops's own,
    # so the table can still be edited by hand with any SQLite client. PostgreSQL has the
    # column and no triggers: the store writes each table itself there.
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN last_transition TEXT"))
    if conn.dialect.name == "sqlite":
        for trigger in _V11_SQLITE_TRIGGERS:
            conn.execute(text(trigger))


# The states in which a revert holds its request's one revert slot (migration 12): under
# way or done. A revert denied, expired, cancelled or failed frees it for another.
REVERT_HELD_STATES = ("pending", "approved", "executing", "succeeded", "unknown")
REVERT_HELD = text("state IN (" + ", ".join(f"'{s}'" for s in REVERT_HELD_STATES) + ")")


_V12_HELD = "state IN ('pending', 'approved', 'executing', 'succeeded', 'unknown')"
# Reverts under way or done with an older one of the same request under way or done.
_V12_DOUBLED = text(
    "SELECT r.id, r.revert_of FROM gpuops_change_requests r"
    " WHERE r.revert_of IS NOT NULL AND r.state IN (:s0, :s1, :s2, :s3, :s4) AND EXISTS ("
    " SELECT 1 FROM gpuops_change_requests o WHERE o.revert_of = r.revert_of"
    " AND o.state IN (:s0, :s1, :s2, :s3, :s4) AND (o.created_at < r.created_at"
    " OR (o.created_at = r.created_at AND o.id < r.id)))"
)


def _v13_mirror_ts(conn: Connection) -> None:
    # The first copy of a request in its notify channel is edited to each later state, as
    # the thread's root is (it told a stale story: "pending approval" after it had failed).
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN mirror_ts TEXT"))


# Each serves a read's filter and its ORDER BY together, so a page walks the index in order
# and stops at its limit instead of sorting everything that matches (issue 34).
_V14_INDEXES = (
    "CREATE INDEX ix_gpuops_audit_project_at ON gpuops_audit (project, at, id)",
    "CREATE INDEX ix_gpuops_change_requests_requester"
    " ON gpuops_change_requests (requester, updated_at, id)",
    "CREATE INDEX ix_gpuops_change_requests_requester_run_at"
    " ON gpuops_change_requests (requester, run_at)",
    "CREATE INDEX ix_gpuops_change_requests_state_created"
    " ON gpuops_change_requests (state, created_at, id)",
)


def _v14_ordered_indexes(conn: Connection) -> None:
    for statement in _V14_INDEXES:
        conn.execute(text(statement))


def _v12_one_revert(conn: Connection) -> None:
    # Two replicas pressed Revert at once and each opened one: a request's revert slot,
    # unique among its reverts under way or done, is taken in the transaction that opens
    # one. Of reverts doubled before, the oldest holds it; the others are logged.
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN revert_slot VARCHAR(16)"))
    held = dict(zip(("s0", "s1", "s2", "s3", "s4"), REVERT_HELD_STATES, strict=True))
    doubled = conn.execute(_V12_DOUBLED, held).all()
    conn.execute(
        text(
            "UPDATE gpuops_change_requests SET revert_slot = revert_of WHERE revert_of IS NOT NULL"
        )
    )
    for row in doubled:
        conn.execute(
            text("UPDATE gpuops_change_requests SET revert_slot = NULL WHERE id = :id"),
            {"id": row.id},
        )
        log.warning("request %s is a second revert of %s: cancel it", row.id, row.revert_of)
    conn.execute(
        text(
            "CREATE UNIQUE INDEX ux_gpuops_change_requests_revert_slot"
            f" ON gpuops_change_requests (revert_slot) WHERE {_V12_HELD}"
        )
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "change requests, audit, deliveries, cluster locks, leases", _v1_initial_tables),
    Migration(2, "change requests: approval prompt ts", _v2_approval_prompt_ts),
    Migration(3, "watch: alert keys, posted remediations, memory", _v3_watch_tables),
    Migration(4, "lease fencing tokens, lock call deadlines", _v4_lease_fencing),
    # Chaining hashes every entry: ~3,000 a second on a busy 2-core machine (PostgreSQL).
    Migration(
        5, "audit hash chain, chain head, audit time index", _v5_audit_chain, extra_seconds=600
    ),
    Migration(6, "workflow steps (function executions)", _v6_workflow_steps),
    Migration(7, "change requests: follow-up, schedule, revert", _v7_time),
    Migration(8, "change requests: approvals so far", _v8_request_approvals),
    Migration(9, "workflow steps: no step token kept", _v9_no_step_token),
    Migration(10, "change requests: the step that made one, index by cluster", _v10_request_step),
    Migration(
        11, "change requests: one statement per transition", _v11_single_statement_transitions
    ),
    Migration(12, "change requests: one revert per request", _v12_one_revert),
    Migration(13, "change requests: the notify channel's copy ts", _v13_mirror_ts),
    Migration(14, "indexes in read order: timeline, Home, schedule", _v14_ordered_indexes),
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
