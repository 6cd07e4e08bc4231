"""A change request as readers see it: the words for its states and a flat view of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.core.pricing import change_price_line
from bot.core.store import ChangeRequestRecord
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


def state_words(state: str) -> str:
    return STATE_WORDS.get(state, state)


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


def plan_lines(plan: ChangePlan) -> list[str]:
    return [line.text() for line in plan.lines]


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
        price_line=change_price_line(plan.node_price, plan.action, plan.body),
    )
