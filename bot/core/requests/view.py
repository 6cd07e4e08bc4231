"""A change request as readers see it: the words for its states and a flat view of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.core.pricing import change_price_line
from bot.core.staged.asking import progress_of, staged_lines
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
    # On-call approvers (SPEC §16): who was on call when it was asked, in words (their
    # mentions in ``oncall_mentions``), or the on-call tool's fault and the rule's fallback.
    oncall_words: str | None = None
    oncall_mentions: tuple[str, ...] = ()
    # An admin's freeze override: (freeze name, admin's user id, reason).
    override: tuple[str, str, str] | None = None
    revert_of: str | None = None  # the request this one undoes
    revertible: bool = False  # it succeeded and has an inverse: its result offers a revert
    run_at: datetime | None = None  # a scheduled change runs then
    # An agent's proposal (SPEC §15): the client's name, its fields as the agent gave them,
    # and whether its requester has confirmed it yet ("awaiting", "confirmed").
    via: str | None = None
    client: str | None = None
    proposed: tuple[str, ...] = ()
    confirm: str | None = None

    @property
    def awaiting_confirm(self) -> bool:
        return self.confirm == "awaiting" and self.state == "pending"

    # A staged plan under way (SPEC §14): its progress, and the buttons that steer it now.
    plan_progress: str | None = None
    plan_buttons: tuple[str, ...] = ()

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
        **oncall_state(approvals),
    }


def oncall_state(approvals: Mapping[str, object]) -> dict[str, str | tuple[str, ...]]:
    """``oncall_words`` and ``oncall_mentions`` of a request's stored approvals (SPEC §16):
    ``on call now: <@U02BOB> (level 1)``, or the on-call tool's fault and the fallback."""
    noted = approvals.get("oncall_now")
    if not isinstance(noted, dict):
        return {}
    fallback = str(approvals.get("fallback", "refuse"))
    if noted.get("fault"):
        said = {"groups": "the rule falls back to its groups", "refuse": "approvals are refused"}
        words = f"on call now: unknown ({noted['fault']}); {said.get(fallback, fallback)}"
        return {"oncall_words": words, "oncall_mentions": ()}
    people = [p for p in noted.get("on_call", []) if isinstance(p, dict) and p.get("slack")]
    said_people = [f"<@{p['slack']}> (level {p.get('level', 1)})" for p in people]
    said_people += [str(name) for name in noted.get("unmapped", [])]
    words = "on call now: " + (", ".join(said_people) or "nobody")
    return {"oncall_words": words, "oncall_mentions": tuple(str(p["slack"]) for p in people)}


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
        preview=plan_lines(plan) + staged_lines(record.plan),
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
        via=record.via,
        client=record.client,
        proposed=tuple(f"{k}={v}" for k, v in (record.plan.get("proposed") or {}).items()),
        confirm=record.confirm,
        plan_progress=progress_of(record)[0],
        plan_buttons=progress_of(record)[1],
        **approval_state(record),
    )


def revertible(record: ChangeRequestRecord) -> bool:
    """Succeeded, with an inverse recorded just before it was sent."""
    prior = record.prior_values or {}
    return record.state is RequestState.SUCCEEDED and bool(prior.get("inverse"))
