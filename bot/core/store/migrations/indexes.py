"""Migrations of indexes: one revert per request (12), indexes in read order (14)."""

from __future__ import annotations

import logging

from sqlalchemy import (
    Connection,
    text,
)

log = logging.getLogger(__name__)

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


def v14_ordered_indexes(conn: Connection) -> None:
    for statement in _V14_INDEXES:
        conn.execute(text(statement))


def v15_channel_index(conn: Connection) -> None:
    # A quiet channel's timeline starts from the requests made there, not from every event
    # of its projects in the window (issue 34: that grew with the whole history).
    conn.execute(
        text(
            "CREATE INDEX ix_gpuops_change_requests_channel"
            " ON gpuops_change_requests (channel, project)"
        )
    )


def v12_one_revert(conn: Connection) -> None:
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
