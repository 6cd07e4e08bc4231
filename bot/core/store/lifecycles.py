"""The writes of the remediation, Workflow Builder step and staged plan lifecycles (their
tables are in ``bot.core.lifecycle``): each move is one transaction, the compare-and-set of
the state and its audit entry together, so a crash between them leaves neither.

The tables pass in where a move may come from and where it goes; this module only knows how
to write it. A remediation's move is one ``UPDATE … WHERE decision IN (…) RETURNING`` and,
when it won, the audit entry appended in the same transaction. A step's move is one
statement (a step keeps no audit entry of its own: the request it made carries the story).
A staged plan's move is the plan's ``UPDATE … WHERE state IN (…)`` and, when it names one,
its step's, with the audit entry, in one transaction: a step lost by either is no move.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from sqlalchemy import update

from bot.core.store.builder_steps import StepRecord, StepState, StepStore
from bot.core.store.plans import (
    PlanRecord,
    PlanState,
    PlanStore,
    StagedStepRecord,
    StagedStepState,
)
from bot.core.store.records import AuditRow
from bot.core.store.tables import staged_plans, staged_steps, workflow_steps
from bot.core.store.watch import (
    AlertClaim,
    RemediationDecision,
    RemediationRecord,
    WatchStore,
    _log_taken_over,
    remediations,
)
from bot.errors import GpuopsError

_REMEDIATION_FIELDS = frozenset({"ts", "provider_state", "decided_by", "comment"})


def _now() -> datetime:
    return datetime.now(UTC)


async def move_remediation(
    watch: WatchStore,
    record_id: str,
    *,
    from_decisions: Collection[RemediationDecision],
    to: RemediationDecision | None,
    audit: AuditRow,
    **fields: object,
) -> RemediationRecord | None:
    """Move the decision to ``to`` (None: it stays) if it is still one of
    ``from_decisions`` (with ``fields``), and append ``audit``, in one transaction: the new
    record for the one winner; None for everyone else, and then nothing is written."""
    unknown = set(fields) - _REMEDIATION_FIELDS
    if unknown:
        raise ValueError(f"cannot set {', '.join(sorted(unknown))} on a remediation")
    if to is not None:
        fields = {**fields, "decision": to.value}
    statement = (
        update(remediations)
        .where(
            remediations.c.id == record_id,
            remediations.c.decision.in_([d.value for d in from_decisions]),
        )
        .values(updated_at=_now(), version=remediations.c.version + 1, **fields)
        .returning(*remediations.c)
    )
    async with watch.store._begin() as conn:
        row = (await conn.execute(statement)).mappings().first()
        if row is None:
            return None
        await watch.store._append(conn, audit)
    return RemediationRecord.model_validate(dict(row))


async def remediation_posted(
    watch: WatchStore, claim: AlertClaim, record_id: str, ts: str, audit: AuditRow
) -> None:
    """Where a remediation's message is, on its alert key and its record, with the audit
    entry of its post, in one transaction. A claim taken over meanwhile writes no ts (as
    ``WatchStore.remediation_posted``), and the post, which did happen, is audited still."""
    async with watch.store._begin() as conn:
        if (await conn.execute(watch._posted(claim, ts))).first() is None:
            _log_taken_over(claim, ts)
        else:
            await conn.execute(
                update(remediations)
                .where(remediations.c.id == record_id)
                .values(ts=ts, updated_at=_now(), version=remediations.c.version + 1)
            )
        await watch.store._append(conn, audit)


async def new_step(
    steps: StepStore,
    execution_id: str,
    requester: str,
    channel: str,
    state: StepState,
    **values: object,
) -> StepRecord | None:
    """Store an execution not known yet in ``state`` (with ``values``), in one statement:
    the step for the one caller that wins (across replicas and redeliveries), None when the
    execution is known already."""
    statement = steps._new_step(
        execution_id, requester, channel, state=state.value, **values
    ).returning(*workflow_steps.c)
    async with steps.store._begin() as conn:
        row = (await conn.execute(statement)).mappings().first()
    return None if row is None else StepRecord.model_validate(dict(row))


async def move_step(
    steps: StepStore,
    execution_id: str,
    from_states: Collection[StepState],
    to: StepState,
    *,
    updated_before: datetime | None = None,
    **values: object,
) -> StepRecord | None:
    """Move a step to ``to`` if it is still in one of ``from_states`` (and, with
    ``updated_before``, was last written before then), with ``values``, in one statement:
    the step as moved, None when it had moved."""
    statement = update(workflow_steps).where(
        workflow_steps.c.execution_id == execution_id,
        workflow_steps.c.state.in_([s.value for s in from_states]),
    )
    if updated_before is not None:
        statement = statement.where(workflow_steps.c.updated_at < updated_before)
    statement = statement.values(state=to.value, updated_at=_now(), **values).returning(
        *workflow_steps.c
    )
    async with steps.store._begin() as conn:
        row = (await conn.execute(statement)).mappings().first()
    return None if row is None else StepRecord.model_validate(dict(row))


class _StepMoved(GpuopsError):
    """The plan's move won but its step had moved: the transaction is rolled back."""


async def new_plan(
    plans: PlanStore,
    plan: PlanRecord,
    steps: list[StagedStepRecord],
    audit: AuditRow,
) -> PlanRecord | None:
    """Store a plan not known yet with its steps and ``audit``, in one transaction: the plan
    for the one caller that wins, None when the request's plan is stored already."""
    insert = (
        plans.store._insert(staged_plans)
        .values(**plan.model_dump(mode="python"))
        .on_conflict_do_nothing(index_elements=[staged_plans.c.request_id])
        .returning(*staged_plans.c)
    )
    async with plans.store._begin() as conn:
        row = (await conn.execute(insert)).mappings().first()
        if row is None:
            return None
        for step in steps:
            await conn.execute(staged_steps.insert().values(**step.model_dump(mode="python")))
        await plans.store._append(conn, audit)
    return PlanRecord.model_validate(dict(row))


async def move_plan(
    plans: PlanStore,
    request_id: str,
    *,
    plan_from: Collection[PlanState],
    plan_to: PlanState | None,
    audit: AuditRow,
    idx: int | None = None,
    step_from: Collection[StagedStepState] = (),
    step_to: StagedStepState | None = None,
    plan_fields: dict[str, object] | None = None,
    step_fields: dict[str, object] | None = None,
) -> tuple[PlanRecord, StagedStepRecord | None] | None:
    """Move the plan to ``plan_to`` (None: it stays) if it is in one of ``plan_from`` (and,
    with ``idx``, at that step), and that step to ``step_to`` if it is in one of
    ``step_from``, with ``audit``, in one transaction: the plan and step as moved for the
    one winner; None for everyone else, and then nothing is written."""
    now = _now()
    statement = update(staged_plans).where(
        staged_plans.c.request_id == request_id,
        staged_plans.c.state.in_([s.value for s in plan_from]),
    )
    if idx is not None:
        statement = statement.where(staged_plans.c.step == idx)
    values = dict(plan_fields or {})
    if plan_to is not None:
        values["state"] = plan_to.value
    statement = statement.values(
        updated_at=now, version=staged_plans.c.version + 1, **values
    ).returning(*staged_plans.c)
    try:
        async with plans.store._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
            if row is None:
                return None
            step: StagedStepRecord | None = None
            if idx is not None and step_to is not None:
                moved = (
                    (
                        await conn.execute(
                            update(staged_steps)
                            .where(
                                staged_steps.c.request_id == request_id,
                                staged_steps.c.idx == idx,
                                staged_steps.c.state.in_([s.value for s in step_from]),
                            )
                            .values(state=step_to.value, updated_at=now, **(step_fields or {}))
                            .returning(*staged_steps.c)
                        )
                    )
                    .mappings()
                    .first()
                )
                if moved is None:
                    raise _StepMoved
                step = StagedStepRecord.model_validate(dict(moved))
            await plans.store._append(conn, audit)
    except _StepMoved:
        return None
    return PlanRecord.model_validate(dict(row)), step
