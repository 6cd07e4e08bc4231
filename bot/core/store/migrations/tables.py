"""Migrations that create tables: the initial schema (1), the watcher's (3), Workflow
Builder steps (6), agents' tokens (16), on-call tables (17), staged plans and their steps
(18), the usage ledger (19)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from bot.core.store.migrations.types import UTCDateTime, autoincrement_id_type, json_type


def v1_initial_tables(conn: Connection) -> None:
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


def v3_watch_tables(conn: Connection) -> None:
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


def v6_workflow_steps(conn: Connection) -> None:
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


def v16_agent_tokens(conn: Connection) -> None:
    # Agents (SPEC §15): personal tokens, kept as hashes only, with each token's rate
    # window; and on a change request, who asked through what and whether its requester
    # has confirmed it yet (an agent's proposal waits for that click).
    metadata = MetaData()
    Table(
        "gpuops_tokens",
        metadata,
        Column("hash", String(64), primary_key=True),  # sha256 of the token, hex
        Column("user_id", Text(), nullable=False),
        Column("name", Text(), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("expires_at", UTCDateTime(), nullable=False),
        Column("revoked_at", UTCDateTime()),
        Column("revoked_by", Text()),
        Column("last_used_at", UTCDateTime()),
        Column("last_client", Text()),
        Column("window_start", UTCDateTime()),
        Column("window_calls", Integer(), nullable=False, server_default="0"),
        Index("ux_gpuops_tokens_user_name", "user_id", "name", unique=True),
        Index("ix_gpuops_tokens_user_created", "user_id", "created_at", "name"),
    )
    metadata.create_all(conn)
    table = "gpuops_change_requests"
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN via TEXT"))
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN client TEXT"))
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN confirm TEXT"))


def v17_oncall_tables(conn: Connection) -> None:
    # On-call approvers (SPEC §16): each DM copy of a request's approval prompt (claimed
    # once per person, then its message noted, so that a decision edits every copy), and
    # each escalation to a further level, claimed once across replicas.
    metadata = MetaData()
    Table(
        "gpuops_approval_copies",
        metadata,
        Column("request_id", String(16), nullable=False),
        Column("user_id", Text(), nullable=False),
        Column("level", Integer(), nullable=False),
        Column("channel", Text()),
        Column("ts", Text()),
        Column("claimed_at", UTCDateTime(), nullable=False),
        PrimaryKeyConstraint("request_id", "user_id", name="pk_gpuops_approval_copies"),
    )
    Table(
        "gpuops_escalations",
        metadata,
        Column("request_id", String(16), nullable=False),
        Column("level", Integer(), nullable=False),
        Column("claimed_at", UTCDateTime(), nullable=False),
        PrimaryKeyConstraint("request_id", "level", name="pk_gpuops_escalations"),
    )
    metadata.create_all(conn)


def v18_staged_plans(conn: Connection) -> None:
    # Staged scale (SPEC §14): one plan per change request sent in steps, and each step's
    # state; every move writes both in one transaction (bot.core.lifecycle.plans).
    metadata = MetaData()
    Table(
        "gpuops_staged_plans",
        metadata,
        Column("request_id", String(16), primary_key=True),
        Column("project", Text(), nullable=False),
        Column("cluster_id", Text(), nullable=False),
        Column("requester", Text(), nullable=False),
        Column("channel", Text(), nullable=False),
        Column("state", String(16), nullable=False),
        Column("step", Integer(), nullable=False),
        Column("steps", Integer(), nullable=False),
        Column("cause", String(16)),
        Column("cause_text", Text()),
        Column("revert_id", String(16)),
        Column("version", Integer(), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False),
        Column("updated_at", UTCDateTime(), nullable=False),
        Index("ix_gpuops_staged_plans_state", "state", "updated_at"),
    )
    Table(
        "gpuops_staged_steps",
        metadata,
        Column("request_id", String(16), nullable=False),
        Column("idx", Integer(), nullable=False),
        Column("state", String(16), nullable=False),
        Column("size_before", Integer(), nullable=False),
        Column("size_after", Integer(), nullable=False),
        Column("inputs", json_type(), nullable=False),
        Column("calls_until", UTCDateTime()),
        Column("deadline", UTCDateTime()),
        Column("result", Text()),
        Column("updated_at", UTCDateTime(), nullable=False),
        PrimaryKeyConstraint("request_id", "idx", name="pk_gpuops_staged_steps"),
    )
    metadata.create_all(conn)


def v19_usage_ledger(conn: Connection) -> None:
    # The usage ledger (SPEC §13): per watched cluster, how far it is accrued and at what
    # size and price (the cursor a compare-and-set moves: one accrual per interval), and
    # what each 15-minute bucket of its time cost.
    metadata = MetaData()
    Table(
        "gpuops_usage_cursors",
        metadata,
        Column("project", Text(), nullable=False),
        Column("cluster_id", Text(), nullable=False),
        Column("provider", Text(), nullable=False),
        Column("cluster_name", Text(), nullable=False),
        Column("since", UTCDateTime(), nullable=False),
        Column("until", UTCDateTime(), nullable=False),
        Column("gpus", Integer()),
        Column("nodes", Integer()),
        Column("gpu_type", Text()),
        Column("rate_micros", BigInteger()),
        Column("currency", Text()),
        Column("price_as_of", Text()),
        PrimaryKeyConstraint("project", "cluster_id", name="pk_gpuops_usage_cursors"),
    )
    Table(
        "gpuops_usage",
        metadata,
        Column("project", Text(), nullable=False),
        Column("cluster_id", Text(), nullable=False),
        Column("bucket_start", UTCDateTime(), nullable=False),
        Column("cluster_name", Text(), nullable=False),
        Column("currency", Text()),
        Column("covered_ms", BigInteger(), nullable=False),
        Column("gpu_ms", BigInteger(), nullable=False),
        Column("cost_micros", BigInteger(), nullable=False),
        Column("unpriced_ms", BigInteger(), nullable=False),
        Column("estimated_ms", BigInteger(), nullable=False),
        Column("estimated_cost_micros", BigInteger(), nullable=False),
        PrimaryKeyConstraint("project", "cluster_id", "bucket_start", name="pk_gpuops_usage"),
        Index("ix_gpuops_usage_project_bucket", "project", "bucket_start"),
    )
    metadata.create_all(conn)
