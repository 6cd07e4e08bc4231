"""The decision on a posted remediation as one table, and the only code that writes it.

Each ``Transition`` names the decisions it may come from, the one it goes to (None: it stays,
and only facts are recorded) and the audit event it records (``{verb}``: the click's
``approve`` or ``reject``). ``TRANSITIONS`` is the whole lifecycle; the README draws it
(``mermaid()``), and a test checks the drawing, that every decision is reached, that every
open one has a way out, that ended ones have none, and that no other module writes a
decision.

Every move is one transaction: the decision's compare-and-set and its audit entry
(``bot.core.store.lifecycles``), so a crash between them leaves neither. The ``post`` stores
its record ``awaiting`` with its alert key's claim before the message goes out (both given
back when the post fails), and appends its audit entry with where the message went.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.core.lifecycle import drawing
from bot.core.store import AuditRow
from bot.core.store.lifecycles import move_remediation, remediation_posted
from bot.core.store.watch import (
    AlertClaim,
    NewRemediationRecord,
    RemediationDecision,
    RemediationRecord,
    WatchStore,
)
from bot.redact import redact

D = RemediationDecision


@dataclass(frozen=True)
class Transition:
    """One named step of a remediation's decision. ``from_states`` empty: it posts a new
    one; ``to`` None: the decision stays as it is."""

    name: str
    from_states: frozenset[RemediationDecision]
    to: RemediationDecision | None
    audit_event: str
    doc: str


def _t(
    name: str,
    from_states: Iterable[RemediationDecision],
    to: RemediationDecision | None,
    audit_event: str,
    doc: str,
) -> Transition:
    return Transition(name, frozenset(from_states), to, audit_event, doc)


_CLICK_EVENT = "remediation_{verb}"
FINAL_DECISIONS = frozenset({D.APPROVED, D.REJECTED, D.ALREADY_DECIDED, D.ELSEWHERE})

POST = _t("post", (), D.AWAITING, "remediation_posted", "newly awaiting approval: posted once")
CLICK = _t(
    "click", {D.AWAITING}, D.DECIDING, _CLICK_EVENT, "one approver's click won: the call is sent"
)
SENT_APPROVED = _t("sent-approved", {D.DECIDING}, D.APPROVED, _CLICK_EVENT, "Together took it")
SENT_REJECTED = _t("sent-rejected", {D.DECIDING}, D.REJECTED, _CLICK_EVENT, "Together took it")
DECIDED_FIRST = _t(
    "decided-first",
    {D.DECIDING},
    D.ALREADY_DECIDED,
    _CLICK_EVENT,
    "Together says someone decided first",
)
SENT_UNKNOWN = _t(
    "sent-unknown",
    {D.DECIDING},
    D.UNKNOWN,
    _CLICK_EVENT,
    "it may have been applied: never sent again, the poll tells",
)
SEND_FAILED = _t(
    "send-failed",
    {D.DECIDING},
    D.AWAITING,
    _CLICK_EVENT,
    "Together did not take it: the buttons are back",
)
LEFT_ELSEWHERE = _t(
    "left-elsewhere",
    {D.AWAITING},
    D.ELSEWHERE,
    "remediation_decided_elsewhere",
    "it left pending approval outside gpuops (console, auto, cancelled)",
)
TAKEN_UNSEEN = _t(
    "taken-unseen",
    {D.DECIDING, D.UNKNOWN},
    D.ALREADY_DECIDED,
    "remediation_decided_unseen",
    "a decision's answer was lost, and Together no longer awaits one",
)
REOPEN = _t(
    "reopen",
    {D.DECIDING, D.UNKNOWN},
    D.AWAITING,
    "remediation_reopened",
    "a decision's answer was lost, and Together still awaits one: the buttons are back",
)
GONE = _t(
    "gone",
    {D.AWAITING, D.DECIDING, D.UNKNOWN},
    D.ELSEWHERE,
    "remediation_gone",
    "Together no longer has it: closed",
)
GONE_DECIDED = _t(
    "gone-decided",
    FINAL_DECISIONS,
    None,
    "remediation_gone",
    "Together no longer has a decided one: its decision stays, it is followed no more",
)

TRANSITIONS: tuple[Transition, ...] = (
    POST,
    CLICK,
    SENT_APPROVED,
    SENT_REJECTED,
    DECIDED_FIRST,
    SENT_UNKNOWN,
    SEND_FAILED,
    LEFT_ELSEWHERE,
    TAKEN_UNSEEN,
    REOPEN,
    GONE,
    GONE_DECIDED,
)


def mermaid() -> str:
    """The table as a ``stateDiagram-v2`` (the README's drawing)."""
    return drawing.mermaid(TRANSITIONS, [d for d in D if d in FINAL_DECISIONS])


_SENT = {t.to: t for t in (SENT_APPROVED, SENT_REJECTED, DECIDED_FIRST, SENT_UNKNOWN, SEND_FAILED)}


def sent(to: RemediationDecision) -> Transition:
    """How a decision whose call was sent ends in ``to``, as the call's answer says."""
    return _SENT[to]


def gone(seen: RemediationDecision) -> Transition:
    """How a remediation Together no longer has is closed, from the decision ``seen``."""
    return GONE_DECIDED if seen in FINAL_DECISIONS else GONE


@dataclass(frozen=True)
class Move:
    """One use of a transition: who, and what it records. ``seen``: the decision as read,
    the compare-and-set's condition (one of the transition's ``from_states``); without it,
    any of them. ``fields``: the facts written with it."""

    transition: Transition
    actor: str
    outcome: str
    verb: str = ""
    seen: RemediationDecision | None = None
    fields: Mapping[str, str | None] = field(default_factory=dict)
    detail: Mapping[str, Any] = field(default_factory=dict)

    def audit_row(self, record: RemediationRecord) -> AuditRow:
        """The audit entry it records (text redacted)."""
        return AuditRow(
            actor=self.actor,
            event=self.transition.audit_event.format(verb=self.verb),
            project=record.project,
            cluster_id=record.cluster_id,
            outcome=self.outcome,
            detail={k: redact(v) if isinstance(v, str) else v for k, v in self.detail.items()},
        )


async def claim(
    store: WatchStore, key: str, new: NewRemediationRecord
) -> tuple[AlertClaim, RemediationRecord] | None:
    """``post``'s first half: its alert key claimed and its record stored ``awaiting`` in
    one transaction (``WatchStore.claim_remediation``); None when it is held."""
    return await store.claim_remediation(key, new)


async def give_back(store: WatchStore, claim: AlertClaim, record: RemediationRecord) -> None:
    """``post`` undone: its message could not be posted, so its alert key and its record go
    back together (the next poll posts it afresh), unless the claim was taken over."""
    await store.give_up_remediation(claim, record.id)


async def posted(
    store: WatchStore, claim: AlertClaim, record: RemediationRecord, ts: str, move: Move
) -> None:
    """``post``'s second half: where its message is, with the post's audit entry."""
    if move.transition is not POST:
        raise ValueError(f"{move.transition.name} does not post a remediation")
    await remediation_posted(store, claim, record.id, ts, move.audit_row(record))


async def apply(
    store: WatchStore, record: RemediationRecord, move: Move
) -> RemediationRecord | None:
    """Apply ``move`` if the decision is still where it may come from, audited in the same
    transaction: the record as moved, or None when it had moved meanwhile (nothing written)."""
    t = move.transition
    if not t.from_states:
        raise ValueError(f"{t.name} posts a remediation: use claim() and posted()")
    if move.seen is not None and move.seen not in t.from_states:
        raise ValueError(f"{t.name} does not leave {move.seen}")
    came = {move.seen} if move.seen is not None else t.from_states
    return await move_remediation(
        store,
        record.id,
        from_decisions=came,
        to=t.to,
        audit=move.audit_row(record),
        **move.fields,
    )
