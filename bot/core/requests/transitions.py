"""The only code that writes a change request's state: each use of a transition of the
lifecycle table (bot.core.requests.table), recorded, then told.

Every transition is one compare-and-set transaction in the store together with its audit
entry (``open``: the new row; ``start``: with the lease, the cluster lock and the call
deadline; a finish: with the lock and lease freed; ``interrupt``/``orphan``: with the gone
executor's lease taken and given up, and the cluster freed). None needs more than one on
either backend. Only then is it counted, told and
mirrored (``announce``): a request that moved meanwhile is neither.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.core.notifier import RequestEvent
from bot.core.requests.deps import RequestDeps
from bot.core.requests.table import APPROVALS, START, Transition
from bot.core.requests.view import outcome_headline
from bot.core.store import (
    TERMINAL_STATES,
    AuditRow,
    ChangeRequestRecord,
    ClusterRef,
    Lease,
    OpenBeside,
    OutcomeRecorded,
    RequestState,
    Started,
    StartedHow,
    StoreUnavailable,
)
from bot.logs import log_context
from bot.metrics import APPROVAL_DECISIONS, APPROVALS_PENDING, CHANGE_REQUESTS
from bot.redact import redact

log = logging.getLogger(__name__)

S = RequestState


@dataclass(frozen=True)
class Change:
    """One use of a transition: who, and what it records and tells.

    ``decision`` is the approval-decision label when the request leaves ``pending`` by it;
    a change into a final state is counted in ``gpuops_change_requests_total``."""

    transition: Transition
    actor: str
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
    summary_follows: bool = False  # the result is told with the cluster summary after it

    @classmethod
    def ended_by_gpuops(
        cls, transition: Transition, why: str, *, outcome: str, **fields: Any
    ) -> Change:
        """gpuops ends a request for a reason of its own, kept as its result message."""
        return cls(
            transition,
            "gpuops",
            outcome=outcome,
            text=why,
            fields={"result_message": why, **fields},
            detail={"reason": why},
        )

    def audit_row(self, record: ChangeRequestRecord | None) -> AuditRow:
        """The audit entry it records (text redacted); the store names a new request."""
        return AuditRow(
            actor=self.actor,
            event=self.transition.audit_event,
            project=record.project if record else None,
            cluster_id=record.cluster_id if record else None,
            request_id=record.id if record else None,
            outcome=self.outcome,
            detail={k: redact(v) if isinstance(v, str) else v for k, v in self.detail.items()},
        )


def cluster_of(record: ChangeRequestRecord) -> ClusterRef:
    return ClusterRef(
        provider=record.provider, project=record.project, cluster_id=record.cluster_id
    )


async def open_request(
    deps: RequestDeps, change: Change, beside: Iterable[RequestState], **columns: Any
) -> tuple[ChangeRequestRecord, list[OpenBeside]]:
    """Store a new request and its audit entry (and read the requests ``beside`` it on its
    cluster) in one transaction; showing it is the caller's."""
    if change.transition.from_states:
        raise ValueError(f"{change.transition.name} does not open a request")
    opened = await deps.store.open_request(
        state=change.transition.to, beside=tuple(beside), audit=change.audit_row(None), **columns
    )
    logged(opened[0], change)
    return opened


def logged(record: ChangeRequestRecord, change: Change) -> None:
    """One INFO line for a transition the store has recorded, carrying the request's id,
    who moved it, its channel, project and cluster (SPEC §12's context fields)."""
    t = change.transition
    came = "/".join(sorted(str(state) for state in t.from_states)) or "new"
    with log_context(
        request_id=record.id,
        user=change.actor,
        channel=record.channel,
        project=record.project,
        cluster=record.cluster_id,
    ):
        log.info("request %s: %s (%s -> %s) by %s", record.id, t.name, came, t.to, change.actor)


async def settle(
    deps: RequestDeps,
    record: ChangeRequestRecord,
    change: Change,
    *,
    fence: Lease | None = None,
) -> ChangeRequestRecord | None:
    """Apply ``change`` if the request is still in one of its ``from_states`` (and, with
    ``fence``, that lease is still held), audited in the same transaction; the request as
    changed, or None when it had moved meanwhile (then nothing is counted or told)."""
    done = await apply(deps, record, change, fence=fence)
    if done is None:
        return None
    await announce(deps, record, done, change)
    return done


async def apply(
    deps: RequestDeps,
    record: ChangeRequestRecord,
    change: Change,
    *,
    fence: Lease | None = None,
) -> ChangeRequestRecord | None:
    """``settle`` without telling: the caller announces what the store recorded (a decision
    whose commit answer was lost is read back first, bot.core.requests.readback)."""
    t = change.transition
    return await deps.store.transition(
        record.id,
        from_states=t.from_states,
        to=t.to,
        fence=fence,
        audit=change.audit_row(record),
        **change.fields,
    )


async def count_approval(
    deps: RequestDeps,
    record: ChangeRequestRecord,
    change: Change,
    requirement: Mapping[str, Any],
) -> ChangeRequestRecord | None:
    """One approval by ``change.actor`` as one transaction: the approver added (with what
    approving now takes, ``requirement``), the state set when it completes the rule
    (``approve``/``break-glass``; else it stays ``pending``) and the audit entry,
    compare-and-set on ``record``'s version; None when the request moved meanwhile.
    Telling it is the caller's (``announce``), once it knows what the store took."""
    if change.transition not in APPROVALS:
        raise ValueError(f"{change.transition.name} is not an approval")
    return await deps.store.decide_approval(
        record,
        change.actor,
        requirement,
        to=change.transition.to,
        audit=change.audit_row(record),
        **change.fields,
    )


async def start(
    deps: RequestDeps,
    record: ChangeRequestRecord,
    change: Change,
    *,
    lease_name: str,
    fence: Lease | None = None,
) -> Started:
    """The ``start`` transition: lease (or ``fence``, claimed before), cluster lock with the
    call deadline, ``executing`` and its audit entry in one transaction; told when it
    started."""
    if change.transition is not START:
        raise ValueError("start() applies the start transition only")
    started = await deps.store.start_execution(
        record.id,
        lease_name=lease_name,
        holder=deps.instance_id,
        ttl_seconds=deps.exec_lease_seconds,
        cluster=cluster_of(record),
        max_call_seconds=deps.max_call_seconds,
        audit=change.audit_row(record),
        fence=fence,
        **change.fields,
    )
    if started.how is StartedHow.STARTED and started.record is not None:
        await announce(deps, record, started.record, change)
    return started


async def end_interrupted(
    deps: RequestDeps, record: ChangeRequestRecord, change: Change, *, lease_name: str
) -> ChangeRequestRecord | None:
    """``interrupt`` or ``orphan``: the lease taken from a gone executor, the state, its
    audit entry, the lease given up and the cluster freed (once no call can arrive), in one
    transaction; told when it moved."""
    t = change.transition
    done = await deps.store.end_interrupted(
        record.id,
        lease_name=lease_name,
        holder=deps.instance_id,
        ttl_seconds=deps.exec_lease_seconds,
        from_states=t.from_states,
        to=t.to,
        cluster=cluster_of(record),
        audit=change.audit_row(record),
        **change.fields,
    )
    if done is not None:
        await announce(deps, record, done, change)
    return done


async def finish(
    deps: RequestDeps, record: ChangeRequestRecord, fence: Lease | None, change: Change
) -> tuple[OutcomeRecorded, ChangeRequestRecord | None]:
    """A finish (or ``not-sent``): the outcome under ``fence``, its audit entry, the cluster
    and the lease freed, in one transaction. Telling it is the caller's (its words depend
    on what was recorded)."""
    t = change.transition
    how, done = await deps.store.finish_execution(
        record.id,
        fence,
        to=t.to,
        result_message=change.fields.get("result_message"),
        cluster=cluster_of(record),
        audit=change.audit_row(record),
        from_states=t.from_states if fence is not None else t.from_states - {S.EXECUTING},
    )
    return how, done


async def announce(
    deps: RequestDeps, record: ChangeRequestRecord, done: ChangeRequestRecord, change: Change
) -> None:
    """Log, count, tell and mirror a change the store has recorded (``done``)."""
    logged(done, change)
    t = change.transition
    if change.decision is not None:
        APPROVALS_PENDING.dec()
        APPROVAL_DECISIONS.labels(change.decision).inc()
    if t.to in TERMINAL_STATES and t.to not in t.from_states:
        CHANGE_REQUESTS.labels(record.provider, str(t.to)).inc()
    if t.told is not None:
        event = RequestEvent(
            t.told,
            change.actor,
            change.text,
            left_pending=change.decision is not None,
            summary_follows=change.summary_follows,
        )
        await deps.notifier.request_changed(done, event)
    headline = change.mirror
    if headline is None and t.to in TERMINAL_STATES and not change.unmirrored:
        headline = outcome_headline(done)  # whatever path ended it, the mirror hears
    if headline is not None:
        await mirror(deps, done, headline)


async def mirror(
    deps: RequestDeps, record: ChangeRequestRecord, headline: str, *, its_copy: bool = False
) -> None:
    """Repeat the request in its project's notify channel (if it has one elsewhere);
    ``its_copy``: this is the request's own copy ("Change requested"), kept and edited to
    each later state."""
    project = deps.policy.projects.get(record.project)
    channel = getattr(project, "notify_channel", None)
    if not channel or channel == record.channel:
        return
    if record.mirror_ts:
        # The first copy tells the story so far as the thread's root does, never a stale
        # "pending approval" above a later "failed".
        await deps.notifier.mirror_edit(record, channel, record.mirror_ts)
    posted = await deps.notifier.mirror(record, headline, channel)
    if posted is None:
        await deps.access.audit(
            "gpuops", "mirror_failed", project=record.project, request_id=record.id, channel=channel
        )
    elif its_copy and not record.mirror_ts and record.state not in TERMINAL_STATES:
        await _note_mirror(deps, record, posted)  # a request that ended has no later states


async def _note_mirror(deps: RequestDeps, record: ChangeRequestRecord, ts: str) -> None:
    """Keep where the first copy went (its later edits need it); a store that cannot take it
    now only costs those edits."""
    try:
        await deps.store.update_fields(record.id, mirror_ts=ts)
    except StoreUnavailable as exc:
        log.warning("request %s: where its copy went was not stored: %s", record.id, exc)
