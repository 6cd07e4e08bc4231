"""A staged request's plan as stored: read from the request, and the rows it begins with."""

from __future__ import annotations

from datetime import datetime

from bot.core.staged.plan import StagedPlan
from bot.core.store import ChangeRequestRecord
from bot.core.store.plans import PlanRecord, PlanState, StagedStepRecord, StagedStepState


def staged_of(record: ChangeRequestRecord) -> StagedPlan | None:
    """The plan a request carries, None for a change sent at once."""
    raw = record.plan.get("staged")
    return StagedPlan.of_json(raw) if isinstance(raw, dict) else None


def new_plan_rows(
    record: ChangeRequestRecord, staged: StagedPlan, now: datetime
) -> tuple[PlanRecord, list[StagedStepRecord]]:
    plan = PlanRecord(
        request_id=record.id,
        project=record.project,
        cluster_id=record.cluster_id,
        requester=record.requester,
        channel=record.channel,
        state=PlanState.RUNNING,
        step=1,
        steps=len(staged.steps),
        cause=None,
        cause_text=None,
        revert_id=None,
        version=1,
        created_at=now,
        updated_at=now,
    )
    steps = [
        StagedStepRecord(
            request_id=record.id,
            idx=step.index,
            state=StagedStepState.PENDING,
            size_before=step.before,
            size_after=step.after,
            inputs=dict(step.inputs),
            calls_until=None,
            deadline=None,
            result=None,
            updated_at=now,
        )
        for step in staged.steps
    ]
    return plan, steps
