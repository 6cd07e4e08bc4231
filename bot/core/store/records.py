"""The store's records: request states, change requests, audit entries, leases, outcomes."""

from __future__ import annotations

import enum
import secrets
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.core.store.chain import HASHED_FIELDS


class RequestState(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


TERMINAL_STATES: frozenset[RequestState] = frozenset(
    {
        RequestState.SUCCEEDED,
        RequestState.FAILED,
        RequestState.UNKNOWN,
        RequestState.DENIED,
        RequestState.EXPIRED,
        RequestState.CANCELLED,
    }
)

# The outcomes a provider call can be known to have had (finish_execution's).
KNOWN_OUTCOMES: frozenset[RequestState] = frozenset({RequestState.SUCCEEDED, RequestState.FAILED})


class ChangeRequestRecord(BaseModel):
    """One change request as stored. Returned by get/transition; never mutated in place."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: datetime
    updated_at: datetime
    state: RequestState
    provider: str
    project: str
    cluster_id: str
    cluster_name: str
    action: str
    plan: dict[str, Any]
    kinds: list[str]
    needs_approval: bool
    requester: str
    channel: str
    reason: str | None
    root_ts: str | None
    summary_ts: str | None
    prompt_ts: str | None = None  # the approval prompt (its buttons go once decided)
    mirror_ts: str | None = None  # its first copy in the notify channel (edited as it moves)
    decided_by: str | None
    decision_note: str | None
    break_glass: bool
    result_message: str | None
    expires_at: datetime | None
    version: int
    follow_until: datetime | None = None  # a follow-up of the cluster runs until then
    run_at: datetime | None = None  # a scheduled change is sent then
    revert_of: str | None = None  # the request this one reverts
    prior_values: dict[str, Any] | None = None  # the changed fields' values just before sending
    # Requests needing approval: {"needed", "usergroups", "kinds", "by_rule", "by": [ids]}.
    approvals: dict[str, Any] | None = None
    # The Workflow Builder step that made it; "" when none did; None when not known (opened
    # by a replica older than migration 10, during a rolling upgrade: look it up).
    step_id: str | None = None
    # An agent's proposal (SPEC §15): asked "via" "mcp" by "client" (its name, as the
    # client gave it); "confirm" is "awaiting" until its requester confirms it in Slack.
    via: str | None = None
    client: str | None = None
    confirm: str | None = None

    @property
    def approvers(self) -> list[str]:
        """Who approved so far, in order (distinct people)."""
        return [str(u) for u in (self.approvals or {}).get("by", [])]

    @property
    def uncounted(self) -> list[str]:
        """Approvers whose approval no longer counts (a reloaded policy took their grant or
        group away), as last checked: what the request's messages say."""
        gone = {str(u) for u in (self.approvals or {}).get("uncounted", [])}
        return [u for u in self.approvers if u in gone]

    @property
    def counted(self) -> list[str]:
        """Approvers whose approval counts, as last checked."""
        gone = set(self.uncounted)
        return [u for u in self.approvers if u not in gone]


class OpenBeside(BaseModel):
    """Another request open on a request's cluster, as its opening tells of it."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: RequestState


class AuditEntry(BaseModel):
    """One line of the append-only audit trail."""

    model_config = ConfigDict(frozen=True)

    id: int
    at: datetime
    actor: str
    event: str
    project: str | None
    cluster_id: str | None
    request_id: str | None
    outcome: str | None
    detail: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str | None = None  # the hash chain (bot.core.store.chain)
    hash: str | None = None

    @property
    def short_hash(self) -> str:
        """The first 10 hex digits of the hash, as ``/gpu audit`` shows it."""
        return (self.hash or "")[:10]

    def hashed_fields(self) -> dict[str, object]:
        """The fields the entry's hash covers (bot.core.store.chain.HASHED_FIELDS and at)."""
        return self.model_dump(include={"at", *HASHED_FIELDS})


class AuditRow(BaseModel):
    """An audit entry to append, before the chain gives it its time, id and hashes."""

    model_config = ConfigDict(frozen=True)

    actor: str
    event: str
    project: str | None = None
    cluster_id: str | None = None
    request_id: str | None = None
    outcome: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class ClusterRef(BaseModel):
    """Which cluster a change holds (the one-change-per-cluster lock's key)."""

    model_config = ConfigDict(frozen=True)

    provider: str
    project: str
    cluster_id: str


class Lease(BaseModel):
    """A held lease. ``token`` grows by one each time the lease changes hands (or is taken
    again after it expired), so it fences: a write guarded by an older token is refused."""

    model_config = ConfigDict(frozen=True)

    name: str
    holder: str
    token: int
    expires_at: datetime


class OutcomeRecorded(enum.StrEnum):
    """What ``Store.finish_execution`` did."""

    RECORDED = "recorded"  # the request was executing under this lease; now it has the outcome
    ALREADY_RECORDED = "already_recorded"  # the same outcome was recorded before (a replay)
    CORRECTED_UNKNOWN = "corrected_unknown"  # it had been marked unknown; the truth replaced it
    FENCED = "fenced"  # another holder took the lease, or the request is elsewhere: no write
    MISSING = "missing"  # no such request


class MutableFields(BaseModel):
    """The columns a transition or update_fields may set besides state."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decided_by: str | None = None
    decision_note: str | None = None
    break_glass: bool = False
    result_message: str | None = None
    summary_ts: str | None = None
    root_ts: str | None = None
    prompt_ts: str | None = None
    mirror_ts: str | None = None
    follow_until: datetime | None = None
    prior_values: dict[str, Any] | None = None
    confirm: str | None = None  # "confirmed": an agent's proposal its requester confirmed


# No 0/O, 1/I/L or U: ids are read aloud and typed from screenshots.
REQUEST_ID_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"
REQUEST_ID_PREFIX = "CR-"
_REQUEST_ID_LENGTH = 6


def new_request_id() -> str:
    """A random id such as ``CR-7K2M9Q``."""
    body = "".join(secrets.choice(REQUEST_ID_ALPHABET) for _ in range(_REQUEST_ID_LENGTH))
    return REQUEST_ID_PREFIX + body


def normalize_request_id(request_id: str) -> str:
    """Accept ids as people type them: ``cr-7k2m9q`` → ``CR-7K2M9Q``."""
    return request_id.strip().upper()
