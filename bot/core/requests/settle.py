"""The one procedure by which a change request changes state.

Compare-and-set in the store, count it, audit it, tell the notifier, and mirror it to the
project's notify channel."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.core.access import Access
from bot.core.notifier import EventKind, Notifier, RequestEvent
from bot.core.policy import Policy
from bot.core.requests.tasks import BackgroundTasks, InFlight
from bot.core.requests.view import outcome_headline
from bot.core.store import (
    TERMINAL_STATES,
    ChangeRequestRecord,
    Lease,
    RequestState,
    Store,
    StoreUnavailable,
)
from bot.metrics import APPROVAL_DECISIONS, APPROVALS_PENDING, CHANGE_REQUESTS

log = logging.getLogger(__name__)


@dataclass
class RequestDeps:
    """What every part of the change workflow shares. ``clock`` may be replaced (tests)."""

    store: Store
    access: Access
    notifier: Notifier
    instance_id: str
    poll_seconds: float
    followup_minutes: float = 30.0
    exec_lease_seconds: float = 30.0
    # How long after it starts a change call may still reach the provider (its retries).
    max_call_seconds: float = 90.0
    # A scheduled change is sent only this long after its time; later, it expires.
    schedule_grace_seconds: float = 600.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    tasks: BackgroundTasks = field(default_factory=BackgroundTasks)
    in_flight: InFlight = field(default_factory=InFlight)

    @property
    def policy(self) -> Policy:
        """The policy in force now (a reload replaces it; every check reads it here)."""
        return self.access.policy


@dataclass(frozen=True)
class Change:
    """One state change: where it may come from, where it goes, and what it records.

    ``decision`` is the approval-decision label when the request leaves ``pending`` by it;
    a change into a final state is counted in ``gpuops_change_requests_total``."""

    kind: EventKind
    actor: str
    from_states: frozenset[RequestState]
    to: RequestState
    audit_event: str
    outcome: str | None = None
    text: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    detail: Mapping[str, Any] = field(default_factory=dict)
    decision: str | None = None
    # The notify channel's headline; a change into a final state is mirrored with
    # outcome_headline when none is given, unless ``unmirrored``: the caller mirrors it
    # itself later (a result), or it was never shown anywhere (withdrawn).
    mirror: str | None = None
    unmirrored: bool = False

    @classmethod
    def ended_by_gpuops(
        cls,
        kind: EventKind,
        from_states: Iterable[RequestState],
        to: RequestState,
        why: str,
        *,
        audit_event: str,
        outcome: str,
        **fields: Any,
    ) -> Change:
        """gpuops ends a request for a reason of its own, kept as its result message."""
        return cls(
            kind,
            "gpuops",
            frozenset(from_states),
            to,
            audit_event,
            outcome=outcome,
            text=why,
            fields={"result_message": why, **fields},
            detail={"reason": why},
        )


async def settle(
    deps: RequestDeps,
    record: ChangeRequestRecord,
    change: Change,
    *,
    fence: Lease | None = None,
) -> ChangeRequestRecord | None:
    """Apply ``change`` if the request is still in one of its ``from_states`` (and, with
    ``fence``, that lease is still held); the request as changed, or None when it had moved
    meanwhile (then nothing is counted or told)."""
    done = await deps.store.transition(
        record.id, from_states=change.from_states, to=change.to, fence=fence, **change.fields
    )
    if done is None:
        return None
    await announce(deps, record, done, change)
    return done


async def announce(
    deps: RequestDeps, record: ChangeRequestRecord, done: ChangeRequestRecord, change: Change
) -> None:
    """Count, audit, tell and mirror a change the store has recorded (``done``)."""
    if change.decision is not None:
        APPROVALS_PENDING.dec()
        APPROVAL_DECISIONS.labels(change.decision).inc()
    if change.to in TERMINAL_STATES:
        CHANGE_REQUESTS.labels(record.provider, str(change.to)).inc()
    try:
        await deps.access.audit(
            change.actor,
            change.audit_event,
            project=record.project,
            cluster_id=record.cluster_id,
            request_id=record.id,
            outcome=change.outcome,
            **change.detail,
        )
    except StoreUnavailable as exc:
        # The state change is recorded; the people involved must still hear of it.
        log.error("could not audit %s of %s: %s", change.audit_event, record.id, exc)
    event = RequestEvent(
        change.kind, change.actor, change.text, left_pending=change.decision is not None
    )
    await deps.notifier.request_changed(done, event)
    headline = change.mirror
    if headline is None and change.to in TERMINAL_STATES and not change.unmirrored:
        headline = outcome_headline(done)  # whatever path ended it, the mirror hears
    if headline is not None:
        await mirror(deps, done, headline)


async def mirror(deps: RequestDeps, record: ChangeRequestRecord, headline: str) -> None:
    """Repeat the request in its project's notify channel (if it has one elsewhere)."""
    project = deps.policy.projects.get(record.project)
    channel = getattr(project, "notify_channel", None)
    if not channel or channel == record.channel:
        return
    if not await deps.notifier.mirror(record, headline, channel):
        await deps.access.audit(
            "gpuops", "mirror_failed", project=record.project, request_id=record.id, channel=channel
        )
