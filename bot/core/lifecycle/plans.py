"""The life of a staged plan (SPEC §14) as one table, and the only code that writes a plan's
or a step's state.

Each ``Transition`` names the plan states it may come from and the one it goes to (None: it
stays), and, for a step's move, the step states it may come from and the one it goes to.
``TRANSITIONS`` is the whole lifecycle; the README draws the plan's states (``mermaid()``)
and a step's (``steps_mermaid()``), and a test checks the drawings, that every state is
reached, that every open one has a way out, that ended ones have none, and that no other
module writes a state.

Every move is one transaction: the compare-and-set of the plan (and its step) with its
audit entry (``bot.core.store.lifecycles``). A step is sent at most once because ``send``
moves it from ``pending`` to ``sending`` before the call, only while the plan is running at
that step: a second replica, a redelivery or a plan paused or aborted meanwhile loses it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bot.core.lifecycle import drawing
from bot.core.store import AuditRow
from bot.core.store.lifecycles import move_plan, new_plan
from bot.core.store.plans import (
    PlanRecord,
    PlanState,
    PlanStore,
    StagedStepRecord,
    StagedStepState,
    StopCause,
)
from bot.redact import redact

P = PlanState
S = StagedStepState

FINAL_PLAN_STATES = frozenset({P.ABORTED, P.COMPLETED, P.REVERTED})
FINAL_STEP_STATES = frozenset({S.PASSED})
# Where a sent step's answer may find the plan: a person may pause, or abort, meanwhile.
_ANSWERED = frozenset({P.RUNNING, P.PAUSED, P.STOPPED, P.ABORTED})
_LIVE = frozenset({P.RUNNING, P.PAUSED})


@dataclass(frozen=True)
class Transition:
    """One named move of a plan: its plan states from and to (None: stays), and for a
    step's move the step states from and to. ``plan_from`` empty: it stores a new plan."""

    name: str
    plan_from: frozenset[PlanState]
    plan_to: PlanState | None
    step_from: frozenset[StagedStepState]
    step_to: StagedStepState | None
    doc: str

    @property
    def audit_event(self) -> str:
        return "plan_" + self.name.replace("-", "_")


def _t(
    name: str,
    plan_from: Iterable[PlanState],
    plan_to: PlanState | None,
    step_from: Iterable[StagedStepState] = (),
    step_to: StagedStepState | None = None,
    doc: str = "",
) -> Transition:
    return Transition(name, frozenset(plan_from), plan_to, frozenset(step_from), step_to, doc)


BEGIN = _t("begin", (), P.RUNNING, (), S.PENDING, doc="approved: the plan and its steps stored")
SEND = _t("send", {P.RUNNING}, None, {S.PENDING}, S.SENDING, "the step's call is about to go: once")
SENT = _t("sent", _ANSWERED, None, {S.SENDING}, S.FOLLOWING, "the provider took it")
SEND_FAILED = _t(
    "send-failed", _ANSWERED, None, {S.SENDING}, S.FAILED, "the provider refused it: not applied"
)
SEND_UNKNOWN = _t(
    "send-unknown",
    _ANSWERED,
    None,
    {S.SENDING},
    S.UNKNOWN,
    "it may have been applied (or its sender died): never sent again",
)
RESOLVED_APPLIED = _t(
    "resolved-applied",
    {P.RUNNING},
    None,
    {S.UNKNOWN},
    S.FOLLOWING,
    "the provider shows the step's size: it was applied",
)
RESOLVED_NOT_APPLIED = _t(
    "resolved-not-applied",
    {P.RUNNING},
    None,
    {S.UNKNOWN},
    S.PENDING,
    "the provider shows the size before, and no call can arrive any more",
)
STEADY = _t(
    "steady", _LIVE, None, {S.FOLLOWING}, S.SOAKING, "steady with every node healthy: soaking"
)
PASS = _t(
    "pass", _LIVE, None, {S.SOAKING}, S.PASSED, "held for its soak with nothing wrong: next step"
)
COMPLETE = _t(
    "complete", _LIVE, P.COMPLETED, {S.SOAKING}, S.PASSED, "the last step passed its soak"
)
HOLD = _t(
    "hold",
    _LIVE,
    P.STOPPED,
    {S.FOLLOWING, S.SOAKING},
    S.HELD,
    "sent, not proven: an alert, an unhealthy node, not steady in time",
)
STOP = _t(
    "stop",
    {P.RUNNING},
    P.STOPPED,
    doc="a failed or unknown step, a freeze or a limit before a send: stopped",
)
PAUSE = _t("pause", {P.RUNNING}, P.PAUSED, doc="a person paused it: no step is sent")
RESUME = _t("resume", {P.PAUSED, P.STOPPED}, P.RUNNING, doc="a person resumed it")
RETRY = _t(
    "retry", {P.RUNNING}, None, {S.FAILED}, S.PENDING, "resumed: a refused step is sent again"
)
REFOLLOW = _t(
    "refollow", {P.RUNNING}, None, {S.HELD}, S.FOLLOWING, "resumed: a held step is proven again"
)
ABORT = _t("abort", {P.RUNNING, P.PAUSED, P.STOPPED}, P.ABORTED, doc="a person ended it")
ORPHAN = _t(
    "orphan",
    {P.RUNNING, P.PAUSED, P.STOPPED},
    P.ABORTED,
    doc="its request ended without it (its runner died, never re-run): never goes on",
)
REVERT = _t(
    "revert",
    {P.PAUSED, P.STOPPED},
    P.REVERTED,
    doc="a person asked for the change back to its start: that request ends it",
)

TRANSITIONS: tuple[Transition, ...] = (
    BEGIN,
    SEND,
    SENT,
    SEND_FAILED,
    SEND_UNKNOWN,
    RESOLVED_APPLIED,
    RESOLVED_NOT_APPLIED,
    STEADY,
    PASS,
    COMPLETE,
    HOLD,
    STOP,
    PAUSE,
    RESUME,
    RETRY,
    REFOLLOW,
    ABORT,
    ORPHAN,
    REVERT,
)


@dataclass(frozen=True)
class _Row:
    name: str
    from_states: frozenset[enum.StrEnum]
    to: enum.StrEnum | None


def plan_rows() -> list[_Row]:
    """The moves of the plan's state (the first drawing)."""
    return [
        _Row(t.name, frozenset(t.plan_from), t.plan_to)
        for t in TRANSITIONS
        if t.plan_to or not t.plan_from
    ]


def step_rows() -> list[_Row]:
    """The moves of a step's state (the second drawing)."""
    return [_Row(t.name, frozenset(t.step_from), t.step_to) for t in TRANSITIONS if t.step_to]


def mermaid() -> str:
    """The plan's states as a ``stateDiagram-v2`` (the README's drawing)."""
    return drawing.mermaid(plan_rows(), [s for s in P if s in FINAL_PLAN_STATES])


def steps_mermaid() -> str:
    """A step's states as a ``stateDiagram-v2`` (the README's drawing)."""
    return drawing.mermaid(step_rows(), [s for s in S if s in FINAL_STEP_STATES])


@dataclass(frozen=True)
class Move:
    """One use of a transition: who, at which step, and what it records."""

    transition: Transition
    actor: str
    outcome: str = ""
    idx: int | None = None
    plan_fields: Mapping[str, object] = field(default_factory=dict)
    step_fields: Mapping[str, object] = field(default_factory=dict)
    detail: Mapping[str, object] = field(default_factory=dict)

    def audit_row(self, plan: PlanRecord) -> AuditRow:
        detail = {k: redact(v) if isinstance(v, str) else v for k, v in self.detail.items()}
        if self.idx is not None:
            detail = {"step": self.idx, "steps": plan.steps, **detail}
        return AuditRow(
            actor=self.actor,
            event=self.transition.audit_event,
            project=plan.project,
            cluster_id=plan.cluster_id,
            request_id=plan.request_id,
            outcome=self.outcome or None,
            detail=detail,
        )


async def begin(
    plans: PlanStore, plan: PlanRecord, steps: list[StagedStepRecord], actor: str
) -> PlanRecord | None:
    """``begin``: the plan and its steps stored running, for the one caller that wins."""
    if plan.state is not BEGIN.plan_to or any(s.state is not BEGIN.step_to for s in steps):
        raise ValueError("a plan begins running with every step pending")
    audit = Move(BEGIN, actor, outcome=str(P.RUNNING), detail={"steps": len(steps)})
    return await new_plan(plans, plan, steps, audit.audit_row(plan))


async def apply(
    plans: PlanStore, plan: PlanRecord, move: Move
) -> tuple[PlanRecord, StagedStepRecord | None] | None:
    """Apply ``move`` if the plan (and its step) are still where it may come from, audited
    in the same transaction: the plan and step as moved, None when either had moved."""
    t = move.transition
    if not t.plan_from:
        raise ValueError(f"{t.name} stores a new plan: use begin()")
    if t.step_to is not None and move.idx is None:
        raise ValueError(f"{t.name} moves a step: give its idx")
    return await move_plan(
        plans,
        plan.request_id,
        plan_from=t.plan_from,
        plan_to=t.plan_to,
        audit=move.audit_row(plan),
        idx=move.idx if t.step_to is not None else None,
        step_from=t.step_from,
        step_to=t.step_to,
        plan_fields=dict(move.plan_fields),
        step_fields=dict(move.step_fields),
    )


def stopped_fields(cause: StopCause, text: str) -> dict[str, object]:
    """What a stop records on the plan: its cause and the words said."""
    return {"cause": cause.value, "cause_text": redact(text)}
