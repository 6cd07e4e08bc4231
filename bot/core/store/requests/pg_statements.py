"""PostgreSQL's single statements: opening, starting and finishing a change as one
data-modifying ``WITH … RETURNING`` chain each, in which every table is written once and in
one order — the execution lease, the cluster lock, the request row, and the audit chain head
last (``bot.core.store.audit.postgres_append_ctes``), so the head's row lock is taken after
every business row and held only for the append and the commit.

Each CTE is gated on the one before it (it reads that CTE's rows), which fixes the order in
which PostgreSQL runs them, and makes the chain stop where a condition fails: a lease held
by another executor takes no lock, a busy cluster moves no request, a request that moved
appends no entry. The store then finds out why with statements of its own, as on SQLite.
Statements are built once per shape (the columns a caller sets)."""

from __future__ import annotations

import functools

from sqlalchemy import CTE, Insert, Select, Update, bindparam, delete, select, true, update
from sqlalchemy.dialects import postgresql

from bot.core.store.audit import append_params, postgres_append_ctes
from bot.core.store.locks import (
    RELEASED,
    cluster_is,
    postgres_lease_cte,
    postgres_lock_cte,
)
from bot.core.store.records import AuditRow
from bot.core.store.tables import change_requests, cluster_locks, leases

AUDIT_PREFIX = "a_"  # the audit entry's parameters, apart from the business rows'


def audit_params(row: AuditRow) -> dict[str, object]:
    return append_params(row, AUDIT_PREFIX)


def _audited(written: CTE, *after: CTE, lease: CTE | None = None) -> Select[tuple[object, ...]]:
    """``written``'s row (with ``lease``: and its token as ``lease_token``), with the audit
    entry appended after it and ``after``, when ``written`` returned a row."""
    appended, head_moved = postgres_append_ctes((written, *after), AUDIT_PREFIX)
    if lease is None:
        returned = select(written)
    else:
        token = lease.c.token.label("lease_token")
        returned = select(written, token).select_from(written.join(lease, true()))
    return returned.add_cte(*after, appended, head_moved)


@functools.lru_cache(maxsize=128)
def transition_statement(moved: Update) -> Select[tuple[object, ...]]:
    """``moved`` (the request row's compare-and-set) with its audit entry."""
    return _audited(moved.cte("moved"))


@functools.lru_cache(maxsize=16)
def open_statement(columns: tuple[str, ...]) -> Select[tuple[object, ...]]:
    """The request row (parameters ``n_<column>``; nothing when its id is taken) with its
    audit entry."""
    values = {name: bindparam(f"n_{name}", type_=change_requests.c[name].type) for name in columns}
    insert: Insert = (
        postgresql.insert(change_requests)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[change_requests.c.id])
        .returning(change_requests)
    )
    return _audited(insert.cte("opened"))


@functools.lru_cache(maxsize=64)
def start_statement(moved: Update, *, fenced: bool) -> Select[tuple[object, ...]]:
    """The execution lease taken (unless ``fenced``: kept from ``claim_execution``), the
    cluster locked with the call deadline, ``moved`` (the request row's update, to
    ``executing``) once both are this request's, and its audit entry; the row with the
    lease's token as ``lease_token``."""
    lease = None if fenced else postgres_lease_cte()
    locked = postgres_lock_cte(lease)
    gated = moved.where(select(1).select_from(locked).exists()).cte("moved")
    if lease is None:
        return _audited(gated, locked)
    return _audited(gated, lease, locked, lease=lease)


@functools.lru_cache(maxsize=64)
def finish_statement(moved: Update, *, releases: bool) -> Select[tuple[object, ...]]:
    """``moved`` (the request row's update to how it ended), then its cluster freed, its
    lease released (``releases``) and its audit entry."""
    gated = moved.cte("moved")
    after = [postgres_unlock_cte(gated)]
    if releases:
        after.append(postgres_release_cte(gated))
    return _audited(gated, *after)


def postgres_unlock_cte(after: CTE) -> CTE:
    """Free the cluster (``b_*``) from ``b_request_id`` once ``after`` returned a row."""
    return (
        delete(cluster_locks)
        .where(
            *cluster_is(),
            cluster_locks.c.request_id == bindparam("b_request_id"),
            select(1).select_from(after).exists(),
        )
        .returning(cluster_locks.c.request_id)
        .cte("unlocked")
    )


def postgres_release_cte(after: CTE) -> CTE:
    """Give lease ``b_name`` of ``b_holder`` up once ``after`` returned a row."""
    return (
        update(leases)
        .where(
            leases.c.name == bindparam("b_name"),
            leases.c.holder == bindparam("b_holder"),
            select(1).select_from(after).exists(),
        )
        .values(expires_at=RELEASED)
        .returning(leases.c.name)
        .cte("released")
    )
