"""What a single-statement transition asks of SQLite's triggers (migration 11).

SQLite has no data-modifying ``WITH``, so a transition that writes several tables would be
a statement per table. Instead the request row carries the rest as JSON in its
``last_transition`` column, and the triggers do it within the same statement: take the
execution lease and lock the cluster (``lease``, ``lock``), free the cluster and release
the lease (``unlock``, ``release``), and append the audit entry (``audit``).

The entry's hash is computed here, over the chain head as this store last left it (its
"hint"). The trigger appends the entry only if the head still has that hash, and otherwise
aborts the statement with ``HEAD_MOVED`` (another process appended, or a transaction that
moved the hint rolled back): the store then reads the head and runs the statement again.
So no function of gpuops's own runs inside a trigger, and any SQLite client can still
edit the tables by hand."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.core.store.chain import canonical_pieces, sha256_hex, stamp, stored_detail
from bot.core.store.records import AuditRow

HEAD_MOVED = "gpuops: the audit chain head moved"


def sqlite_time(value: datetime) -> str:
    """``value`` as the store keeps a time in SQLite: naive UTC text with microseconds
    (so that the triggers' text comparisons are chronological)."""
    if value.tzinfo is None:
        raise ValueError("a stored time must be tz-aware")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


class AuditWork(AuditRow):
    """The audit entry to append, hashed over ``prev_hash`` (its time is the row's
    ``updated_at``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prev_hash: str
    hash: str


class LeaseWork(BaseModel):
    """Take the execution lease ``name`` for ``holder`` until ``until``, unless another
    holder's is live."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    holder: str
    until: str


class LockWork(BaseModel):
    """Lock the request's cluster under ``lease_name``; calls may arrive until
    ``calls_until``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lease_name: str
    calls_until: str


class ReleaseWork(BaseModel):
    """Give the lease up: its row stays, expired at ``released``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    holder: str
    released: str


class TriggerWork(BaseModel):
    """Everything one statement's triggers do; the nonce makes each one new, so that the
    triggers (which fire when ``last_transition`` changes) fire once per statement."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nonce: str = Field(default_factory=lambda: secrets.token_hex(8))
    audit: AuditWork | None = None
    lease: LeaseWork | None = None
    lock: LockWork | None = None
    unlock: bool = False
    release: ReleaseWork | None = None

    def as_column(self) -> str:
        return self.model_dump_json()


def audit_work(row: AuditRow, at: datetime, prev_hash: str) -> AuditWork:
    """``row`` appended at ``at`` after the entry whose hash is ``prev_hash``: the hash
    ``gpuops audit verify`` recomputes."""
    fields: dict[str, Any] = row.model_dump()
    fields["detail"] = stored_detail(row.detail)
    digest = sha256_hex(canonical_pieces(fields).joined(stamp(at), prev_hash))
    return AuditWork(**fields, prev_hash=prev_hash, hash=digest)
