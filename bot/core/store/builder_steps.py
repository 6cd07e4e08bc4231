"""Workflow Builder steps (function executions, SPEC §11): claimed once per execution id,
linked to the change request they made, completed once.

Like the change requests, every deciding write is one statement whose ON CONFLICT or WHERE
clause is the decision, so the database picks the one winner among replicas and
redeliveries: the moves of a step's lifecycle (``bot.core.lifecycle.builder_steps``) are
written by ``bot.core.store.lifecycles``; this module reads steps. The link to the request
is written in the request's own transaction (``RequestsMixin.open_request``): a step never
loses the request it made. A step refused before it could be claimed is recorded as refused
before Slack is told, so a later delivery of the same execution finds it and runs nothing.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, select
from sqlalchemy.dialects import postgresql, sqlite

from bot.core.store.db import Store
from bot.core.store.tables import workflow_steps


class StepState(enum.StrEnum):
    RUNNING = "running"  # claimed; its request (if any) has not ended
    COMPLETING = "completing"  # one replica is telling Slack how it ended
    COMPLETED = "completed"  # Slack was told (or the execution was gone)


OPEN_STEP_STATES = frozenset(state.value for state in StepState if state is not StepState.COMPLETED)


class StepOutcome(enum.StrEnum):
    SUCCESS = "success"
    ERROR = "error"


class StepRecord(BaseModel):
    """One function execution as stored (no token: the app completes it with its own)."""

    model_config = ConfigDict(frozen=True)

    execution_id: str
    requester: str
    channel: str
    request_id: str | None
    state: StepState
    outcome: StepOutcome | None
    payload: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


def _now() -> datetime:
    return datetime.now(UTC)


class StepStore:
    """The workflow steps table in the gpuops database (shares the Store's engine)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _new_step(
        self, execution_id: str, requester: str, channel: str, **values: object
    ) -> postgresql.Insert | sqlite.Insert:
        """The insert of an execution not known yet (nothing when it is: the first wins)."""
        now = _now()
        return (
            self.store._insert(workflow_steps)
            .values(
                execution_id=execution_id,
                requester=requester,
                channel=channel,
                created_at=now,
                updated_at=now,
                **values,
            )
            .on_conflict_do_nothing(index_elements=[workflow_steps.c.execution_id])
        )

    async def get(self, execution_id: str) -> StepRecord | None:
        return await self._one(workflow_steps.c.execution_id == execution_id)

    async def for_request(self, request_id: str) -> StepRecord | None:
        """The step that made this change request, if one did."""
        return await self._one(workflow_steps.c.request_id == request_id)

    async def unfinished(self, limit: int = 200) -> list[StepRecord]:
        """Steps not completed yet, oldest first. Read on the state index by the open
        states (``!= completed`` would walk every step ever completed, a year of them at
        each start-up and sweep); only the open steps are sorted."""
        statement = (
            select(workflow_steps)
            .where(workflow_steps.c.state.in_(sorted(OPEN_STEP_STATES)))
            .order_by(workflow_steps.c.created_at)
            .limit(limit)
        )
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [StepRecord.model_validate(dict(row)) for row in rows]

    async def _one(self, condition: ColumnElement[bool]) -> StepRecord | None:
        async with self.store._begin() as conn:
            row = (await conn.execute(select(workflow_steps).where(condition))).mappings().first()
        return None if row is None else StepRecord.model_validate(dict(row))
