"""The store's current schema, as the migrations in bot.core.store.migrations leave it (tests
check that they agree)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from bot.core.store.migrations import REVERT_HELD, UTCDateTime, autoincrement_id_type, json_type

metadata = MetaData()

change_requests = Table(
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
    Column("prompt_ts", Text()),
    Column("decided_by", Text()),
    Column("decision_note", Text()),
    Column("break_glass", Boolean(), nullable=False),
    Column("result_message", Text()),
    Column("expires_at", UTCDateTime()),
    Column("version", Integer(), nullable=False),
    Column("follow_until", UTCDateTime()),
    Column("run_at", UTCDateTime()),
    Column("revert_of", String(16)),
    Column("prior_values", json_type()),
    Column("approvals", json_type()),
    Column("step_id", Text()),
    # What the last single-statement transition asked of the other tables (SQLite's
    # triggers act on it; bot.core.store.trigger_work).
    Column("last_transition", Text()),
    # revert_of of a revert made since migration 12: one open or done per request.
    Column("revert_slot", String(16)),
    Column("mirror_ts", Text()),  # the first copy in the notify channel
    # An agent's proposal (SPEC §15): "mcp", the client's name, and "awaiting" until its
    # requester confirms it ("confirmed" after); None for a change a person asked for.
    Column("via", Text()),
    Column("client", Text()),
    Column("confirm", Text()),
    Index("ix_gpuops_change_requests_state", "state"),
    Index("ix_gpuops_change_requests_project", "project"),
    Index("ix_gpuops_change_requests_expires_at", "expires_at"),
    Index("ix_gpuops_change_requests_follow_until", "follow_until"),
    Index("ix_gpuops_change_requests_run_at", "run_at"),
    Index("ix_gpuops_change_requests_cluster", "project", "cluster_id", "state"),
    Index("ix_gpuops_change_requests_requester", "requester", "updated_at", "id"),
    Index("ix_gpuops_change_requests_requester_run_at", "requester", "run_at"),
    Index("ix_gpuops_change_requests_state_created", "state", "created_at", "id"),
    Index("ix_gpuops_change_requests_channel", "channel", "project"),
    Index(
        "ux_gpuops_change_requests_revert_slot",
        "revert_slot",
        unique=True,
        sqlite_where=REVERT_HELD,
        postgresql_where=REVERT_HELD,
    ),
)

audit = Table(
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
    Column("prev_hash", Text()),
    Column("hash", Text()),
    Index("ix_gpuops_audit_project", "project"),
    Index("ix_gpuops_audit_request_id", "request_id"),
    Index("ix_gpuops_audit_at", "at", "id"),
    Index("ix_gpuops_audit_project_at", "project", "at", "id"),
)

# The head of the audit trail's hash chain: one row, updated by every append in the same
# transaction (bot.core.store.audit says why).
audit_chain = Table(
    "gpuops_audit_chain",
    metadata,
    Column("name", Text(), primary_key=True),
    Column("entries", BigInteger(), nullable=False),
    Column("last_id", BigInteger()),
    Column("last_hash", Text(), nullable=False),
)

deliveries = Table(
    "gpuops_deliveries",
    metadata,
    Column("key", Text(), primary_key=True),
    Column("seen_at", UTCDateTime(), nullable=False),
    Index("ix_gpuops_deliveries_seen_at", "seen_at"),
)

cluster_locks = Table(
    "gpuops_cluster_locks",
    metadata,
    Column("provider", Text(), nullable=False),
    Column("project", Text(), nullable=False),
    Column("cluster_id", Text(), nullable=False),
    Column("request_id", String(16), nullable=False),
    Column("locked_at", UTCDateTime(), nullable=False),
    # The execution lease of the holder, and until when a provider call it started may
    # still reach the provider: the lock is taken over only once both have passed.
    Column("lease_name", Text()),
    Column("calls_until", UTCDateTime()),
    PrimaryKeyConstraint("provider", "project", "cluster_id", name="pk_gpuops_cluster_locks"),
)

leases = Table(
    "gpuops_leases",
    metadata,
    Column("name", Text(), primary_key=True),
    Column("holder", Text(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    Column("token", BigInteger(), nullable=False, server_default="0"),
)

# One Workflow Builder step (a function execution): claimed once, linked to the request it
# made in the same transaction as the request, completed once (SPEC §11).
workflow_steps = Table(
    "gpuops_workflow_steps",
    metadata,
    Column("execution_id", Text(), primary_key=True),
    Column("requester", Text(), nullable=False),
    Column("channel", Text(), nullable=False),
    Column("request_id", String(16)),
    Column("state", String(16), nullable=False),  # running, completing, completed
    Column("outcome", String(16)),  # success or error, once completing
    Column("payload", json_type()),  # the outputs, or {"error": text}
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_gpuops_workflow_steps_request_id", "request_id"),
    Index("ix_gpuops_workflow_steps_state", "state"),
)

# A person's token for agents (SPEC §15): only its hash is kept; the rate window counts the
# calls made with it since window_start, across replicas.
tokens = Table(
    "gpuops_tokens",
    metadata,
    Column("hash", String(64), primary_key=True),
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
    Index("ix_gpuops_tokens_user_created", "user_id", "created_at", "name"),  # Home, newest first
)

# On-call approvers (SPEC §16): the DM copies of a prompt, and the escalations made.
approval_copies = Table(
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
escalations = Table(
    "gpuops_escalations",
    metadata,
    Column("request_id", String(16), nullable=False),
    Column("level", Integer(), nullable=False),
    Column("claimed_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("request_id", "level", name="pk_gpuops_escalations"),
)

# A change request sent in steps (SPEC §14): the plan's state and each step's; every move
# writes them in one transaction with its audit entry (bot.core.lifecycle.plans).
staged_plans = Table(
    "gpuops_staged_plans",
    metadata,
    Column("request_id", String(16), primary_key=True),
    Column("project", Text(), nullable=False),
    Column("cluster_id", Text(), nullable=False),
    Column("requester", Text(), nullable=False),
    Column("channel", Text(), nullable=False),
    Column("state", String(16), nullable=False),  # running, paused, stopped, aborted, …
    Column("step", Integer(), nullable=False),  # the step under way or next, from 1
    Column("steps", Integer(), nullable=False),
    Column("cause", String(16)),  # why it stopped
    Column("cause_text", Text()),
    Column("revert_id", String(16)),  # the request that reverts it to its start
    Column("version", Integer(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_gpuops_staged_plans_state", "state", "updated_at"),
)

staged_steps = Table(
    "gpuops_staged_steps",
    metadata,
    Column("request_id", String(16), nullable=False),
    Column("idx", Integer(), nullable=False),
    Column("state", String(16), nullable=False),
    Column("size_before", Integer(), nullable=False),
    Column("size_after", Integer(), nullable=False),
    Column("inputs", json_type(), nullable=False),
    Column("calls_until", UTCDateTime()),  # a sent call may still arrive until then
    Column("deadline", UTCDateTime()),  # following: steady by then; soaking: held until then
    Column("result", Text()),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("request_id", "idx", name="pk_gpuops_staged_steps"),
)

__all__ = [
    "approval_copies",
    "audit",
    "audit_chain",
    "change_requests",
    "cluster_locks",
    "deliveries",
    "escalations",
    "leases",
    "metadata",
    "staged_plans",
    "staged_steps",
    "tokens",
    "workflow_steps",
]
