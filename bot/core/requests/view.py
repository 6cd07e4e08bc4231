"""A change request as readers see it: the words for its states and a flat view of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.core.pricing import change_price_line
from bot.core.store import ChangeRequestRecord, RequestState
from bot.providers.base import ChangePlan

STATE_WORDS = {
    "pending": "pending approval",
    "approved": "approved",
    "executing": "running",
    "succeeded": "done",
    "failed": "failed",
    "unknown": "outcome unknown",
    "denied": "denied",
    "expired": "expired",
    "cancelled": "cancelled",
}


# A request that failed when someone pressed Approve (it never ran): why, in the words
# every surface uses for it. Its ``decision_note`` holds the kind (see Decisions).
STALE_AT_APPROVAL = "stale at approval"
REFUSED_AT_APPROVAL = "refused at approval"


def state_words(state: str) -> str:
    return STATE_WORDS.get(state, state)


def at_approval(state: str, decision_note: str | None, break_glass: bool) -> str | None:
    """``stale at approval`` or ``refused at approval`` for a request that failed at its
    approval's re-check (nothing was sent); None for any other."""
    if state != "failed" or break_glass or not decision_note:
        return None  # an approved request keeps a note only for break glass
    return STALE_AT_APPROVAL if decision_note == "stale" else REFUSED_AT_APPROVAL


def outcome_headline(record: ChangeRequestRecord) -> str:
    """``Change done``, ``Change done (no approval needed)``, ``Change failed — stale at
    approval``: how the notify channel names a request's final state."""
    words = f"Change {state_words(str(record.state))}"
    if not record.needs_approval:
        words += " (no approval needed)"
    why = at_approval(str(record.state), record.decision_note, record.break_glass)
    return f"{words} — {why}" if why else words


@dataclass(frozen=True)
class RequestView:
    """What a reader needs of a change request (built from the store record)."""

    id: str
    state: str
    provider: str
    project: str
    cluster_id: str
    cluster_name: str
    action: str
    preview: list[str]
    requester: str
    channel: str
    needs_approval: bool
    reason: str | None = None
    decided_by: str | None = None
    decision_note: str | None = None
    result_message: str | None = None
    break_glass: bool = False
    expires_at: datetime | None = None
    price_line: str | None = None  # what the change does to the price, when it is known
    approvers: tuple[str, ...] = ()  # who approved so far (distinct people)
    uncounted: tuple[str, ...] = ()  # of those, whose approval no longer counts
    approvals_needed: int = 1
    approval_groups: tuple[str, ...] = ()  # each approver must be in one of these
    approval_kinds: tuple[str, ...] = ()  # why approval is needed: these kinds
    approval_by_rule: bool = False  # an approval rule says so (else the default table)
    approval_budget: tuple[str, ...] = ()  # past a budget's approval_at: its figures
    # Whom the approval prompt mentions (the eligible approvers when it was opened).
    ask_users: tuple[str, ...] = ()
    ask_groups: tuple[str, ...] = ()
    # The requester's own approval by break glass, counted as one of those needed: who, why.
    glass_by: str | None = None
    glass_reason: str | None = None
    # An admin's freeze override: (freeze name, admin's user id, reason).
    override: tuple[str, str, str] | None = None
    revert_of: str | None = None  # the request this one undoes
    revertible: bool = False  # it succeeded and has an inverse: its result offers a revert
    run_at: datetime | None = None  # a scheduled change runs then

    @property
    def counted(self) -> tuple[str, ...]:
        """The approvers whose approval counts."""
        return tuple(u for u in self.approvers if u not in self.uncounted)

    @property
    def at_approval(self) -> str | None:
        """Why it failed when Approve was pressed (never sent), else None."""
        return at_approval(self.state, self.decision_note, self.break_glass)


def plan_lines(plan: ChangePlan) -> list[str]:
    return [line.text() for line in plan.lines]


def request_price_line(record: ChangeRequestRecord, plan: ChangePlan) -> str | None:
    """The price line kept with the request (priced from the policy's table or the plan),
    else the one the plan alone gives."""
    size = (record.plan.get("guard") or {}).get("size") or {}
    kept = size.get("price_line")
    if isinstance(kept, str):
        return kept
    return change_price_line(plan.node_price, plan.action, plan.body)


def _override(record: ChangeRequestRecord) -> tuple[str, str, str] | None:
    raw = (record.plan.get("guard") or {}).get("override")
    if not isinstance(raw, dict):
        return None
    return str(raw.get("freeze")), str(raw.get("by")), str(raw.get("reason"))


def approval_state(record: ChangeRequestRecord) -> dict[str, Any]:
    """Where a request's approvals stand (RequestView's approval fields, by name): who
    approved, whose approval no longer counts, how many are needed from which groups and
    why, and the requester's break glass, as stored with the request."""
    approvals = record.approvals or {}
    glass = {k: str(v) for k, v in (approvals.get("break_glass") or {}).items()}
    return {
        "approvers": tuple(record.approvers),
        "uncounted": tuple(record.uncounted),
        "approvals_needed": int(approvals.get("needed", 1)),
        "approval_groups": tuple(str(g) for g in approvals.get("usergroups", [])),
        "approval_kinds": tuple(str(k) for k in approvals.get("kinds", record.kinds)),
        "approval_by_rule": bool(approvals.get("by_rule", False)),
        "approval_budget": tuple(str(line) for line in approvals.get("budget", [])),
        "ask_users": tuple(str(u) for u in (approvals.get("ask") or {}).get("users", [])),
        "ask_groups": tuple(str(g) for g in (approvals.get("ask") or {}).get("usergroups", [])),
        "glass_by": glass.get("by"),
        "glass_reason": glass.get("reason"),
    }


def view_of(record: ChangeRequestRecord) -> RequestView:
    plan = ChangePlan.model_validate(record.plan["plan"])
    return RequestView(
        id=record.id,
        state=str(record.state),
        provider=record.provider,
        project=record.project,
        cluster_id=record.cluster_id,
        cluster_name=record.cluster_name,
        action=record.action,
        preview=plan_lines(plan),
        requester=record.requester,
        channel=record.channel,
        needs_approval=record.needs_approval,
        reason=record.reason,
        decided_by=record.decided_by,
        decision_note=record.decision_note,
        result_message=record.result_message,
        break_glass=record.break_glass,
        expires_at=record.expires_at,
        price_line=request_price_line(record, plan),
        override=_override(record),
        revert_of=record.revert_of,
        revertible=revertible(record),
        run_at=record.run_at,
        **approval_state(record),
    )


def revertible(record: ChangeRequestRecord) -> bool:
    """Succeeded, with an inverse recorded just before it was sent."""
    prior = record.prior_values or {}
    return record.state is RequestState.SUCCEEDED and bool(prior.get("inverse"))
