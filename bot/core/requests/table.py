"""The life of a change request as one table (SPEC §3-§5).

Each ``Transition`` names where a request may come from, where it goes, the audit event it
records and what people are told (the notifier's ``RequestEvent`` kind). ``TRANSITIONS`` is
the whole lifecycle; the README draws it (``mermaid()``), and a test checks the drawing,
that every state is reached, that every open state has a way out and that ended ones have
none but the correction of ``unknown``. bot.core.requests.transitions is the only code that
applies them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.core.notifier import EventKind
from bot.core.store import TERMINAL_STATES, RequestState

S = RequestState


@dataclass(frozen=True)
class Transition:
    """One named step of the lifecycle. ``from_states`` empty: it opens a new request;
    ``told`` None: the request itself is shown (``Notifier.request_opened``)."""

    name: str
    from_states: frozenset[RequestState]
    to: RequestState
    audit_event: str
    told: EventKind | None
    doc: str


def _t(
    name: str,
    from_states: Iterable[RequestState],
    to: RequestState,
    audit_event: str,
    told: EventKind | None,
    doc: str,
) -> Transition:
    return Transition(name, frozenset(from_states), to, audit_event, told, doc)


OPEN = _t("open", (), S.PENDING, "requested", None, "stored and shown; approvers are asked")
OPEN_APPROVED = _t(
    "open-approved", (), S.APPROVED, "requested", None, "needs no approval: sent now or at its time"
)
APPROVE_PARTIAL = _t(
    "approve-partial",
    {S.PENDING},
    S.PENDING,
    "approval_added",
    "approval_added",
    "one approval of several an N-approver rule needs",
)
BREAK_GLASS_PARTIAL = _t(
    "break-glass-partial",
    {S.PENDING},
    S.PENDING,
    "break_glass",
    "approval_added",
    "an admin's own approval, with a reason, counted as one of several needed",
)
APPROVE = _t("approve", {S.PENDING}, S.APPROVED, "approved", "approved", "the last approval needed")
BREAK_GLASS = _t(
    "break-glass",
    {S.PENDING},
    S.APPROVED,
    "approved",
    "break_glass",
    "an admin's own, with a reason",
)
DENY = _t("deny", {S.PENDING}, S.DENIED, "denied", "denied", "an approver says no (and why)")
CANCEL = _t("cancel", {S.PENDING}, S.CANCELLED, "cancelled", "cancelled", "requester or admin")
CANCEL_SCHEDULED = _t(
    "cancel-scheduled",
    {S.APPROVED},
    S.CANCELLED,
    "cancelled",
    "cancelled",
    "an approved change waiting for its time",
)
WITHDRAW = _t(
    "withdraw",
    {S.PENDING, S.APPROVED},
    S.CANCELLED,
    "withdrawn",
    "withdrawn",
    "gpuops could not show it (or its prompt)",
)
EXPIRE = _t("expire", {S.PENDING}, S.EXPIRED, "expired", "expired", "nobody decided in time")
EXPIRE_MISSED = _t(
    "expire-missed",
    {S.APPROVED},
    S.EXPIRED,
    "expired",
    "expired",
    "a scheduled change gpuops could not send within the grace",
)
REFUSE_STALE = _t(
    "refuse-stale",
    {S.PENDING},
    S.FAILED,
    "refused",
    "refused",
    "the re-check at approval failed (stale preview, revoked requester, guardrail)",
)
START = _t(
    "start",
    {S.APPROVED},
    S.EXECUTING,
    "executing",
    "executing",
    "lease, lock and call deadline taken",
)
REFUSE_BUSY = _t(
    "refuse-busy", {S.APPROVED}, S.FAILED, "refused", "refused", "another change holds the cluster"
)
REFUSE_GUARDRAIL = _t(
    "refuse-guardrail",
    {S.APPROVED},
    S.FAILED,
    "refused",
    "refused",
    "a check just before sending failed (freeze, guardrail, grant, stale): nothing sent",
)
NOT_SENT = _t(
    "not-sent",
    {S.APPROVED, S.EXECUTING},
    S.FAILED,
    "result",
    "finished",
    "the store failed before the call: nothing sent",
)
FINISH_SUCCEEDED = _t(
    "finish-succeeded", {S.EXECUTING}, S.SUCCEEDED, "result", "finished", "the provider did it"
)
FINISH_FAILED = _t(
    "finish-failed", {S.EXECUTING}, S.FAILED, "result", "finished", "the provider refused it"
)
FINISH_UNKNOWN = _t(
    "finish-unknown", {S.EXECUTING}, S.UNKNOWN, "result", "finished", "it may have been applied"
)
CORRECT_SUCCEEDED = _t(
    "correct-succeeded",
    {S.UNKNOWN},
    S.SUCCEEDED,
    "result",
    "finished",
    "the answer kept through an outage replaces 'unknown'",
)
CORRECT_FAILED = _t(
    "correct-failed",
    {S.UNKNOWN},
    S.FAILED,
    "result",
    "finished",
    "the answer kept through an outage replaces 'unknown'",
)
INTERRUPT = _t(
    "interrupt",
    {S.EXECUTING},
    S.UNKNOWN,
    "result",
    "interrupted",
    "its executor is gone: never re-run",
)
ORPHAN = _t(
    "orphan", {S.APPROVED}, S.FAILED, "result", "interrupted", "its sender died before sending"
)

TRANSITIONS: tuple[Transition, ...] = (
    OPEN,
    OPEN_APPROVED,
    APPROVE_PARTIAL,
    BREAK_GLASS_PARTIAL,
    APPROVE,
    BREAK_GLASS,
    DENY,
    CANCEL,
    CANCEL_SCHEDULED,
    WITHDRAW,
    EXPIRE,
    EXPIRE_MISSED,
    REFUSE_STALE,
    START,
    REFUSE_BUSY,
    REFUSE_GUARDRAIL,
    NOT_SENT,
    FINISH_SUCCEEDED,
    FINISH_FAILED,
    FINISH_UNKNOWN,
    CORRECT_SUCCEEDED,
    CORRECT_FAILED,
    INTERRUPT,
    ORPHAN,
)
_FINISHED = {S.SUCCEEDED: FINISH_SUCCEEDED, S.FAILED: FINISH_FAILED, S.UNKNOWN: FINISH_UNKNOWN}
_CORRECTED = {S.SUCCEEDED: CORRECT_SUCCEEDED, S.FAILED: CORRECT_FAILED}


def finished(to: RequestState) -> Transition:
    """The finish that ends a sent change in ``to``."""
    return _FINISHED[to]


def corrected(to: RequestState) -> Transition:
    """The correction of an ``unknown`` by the provider's real answer ``to``."""
    return _CORRECTED[to]


def mermaid() -> str:
    """The table as a ``stateDiagram-v2`` (the README's drawing)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for t in TRANSITIONS:
        for source in sorted(str(state) for state in t.from_states) or ["[*]"]:
            edges.setdefault((source, str(t.to)), []).append(t.name)
    lines = ["stateDiagram-v2"]
    lines += [f"    {a} --> {b}: {', '.join(names)}" for (a, b), names in edges.items()]
    lines += [f"    {state} --> [*]" for state in S if state in TERMINAL_STATES]
    return "\n".join(lines)


APPROVALS = frozenset({APPROVE_PARTIAL, BREAK_GLASS_PARTIAL, APPROVE, BREAK_GLASS})
