"""Migrations that add or drop columns on existing tables (2, 4, 7, 8, 9, 10, 13)."""

from __future__ import annotations

from sqlalchemy import (
    Connection,
    text,
)


def v2_approval_prompt_ts(conn: Connection) -> None:
    # The approval prompt's message ts, so a decision can replace its buttons.
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN prompt_ts TEXT"))


def v4_lease_fencing(conn: Connection) -> None:
    # Fencing tokens on leases; the holder's lease and call deadline on cluster locks.
    timestamp = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "DATETIME"
    conn.execute(text("ALTER TABLE gpuops_leases ADD COLUMN token BIGINT NOT NULL DEFAULT 0"))
    conn.execute(text("ALTER TABLE gpuops_cluster_locks ADD COLUMN lease_name TEXT"))
    conn.execute(text(f"ALTER TABLE gpuops_cluster_locks ADD COLUMN calls_until {timestamp}"))


def v7_time(conn: Connection) -> None:
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


def v8_request_approvals(conn: Connection) -> None:
    # Who approved a request that needs several approvers, and what it needed (SPEC §8).
    kind = "JSONB" if conn.dialect.name == "postgresql" else "JSON"
    conn.execute(text(f"ALTER TABLE gpuops_change_requests ADD COLUMN approvals {kind}"))


def v9_no_step_token(conn: Connection) -> None:
    # A waiting step kept Slack's function token in clear; steps are completed with the
    # bot token now (SPEC §1.3: no secret stored). Blank the values, then drop the column.
    conn.execute(text("UPDATE gpuops_workflow_steps SET token = ''"))
    conn.execute(text("ALTER TABLE gpuops_workflow_steps DROP COLUMN token"))


def v10_request_step(conn: Connection) -> None:
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


def v13_mirror_ts(conn: Connection) -> None:
    # The first copy of a request in its notify channel is edited to each later state, as
    # the thread's root is (it told a stale story: "pending approval" after it had failed).
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN mirror_ts TEXT"))
