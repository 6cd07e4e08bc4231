"""Staged plans (SPEC §14): a change request sent in steps, the plan's state and each step's.

The moves of a plan's lifecycle (``bot.core.lifecycle.plans``) are written by
``bot.core.store.lifecycles``: each is one transaction, the compare-and-set of the plan's
state (and of one step's) with its audit entry, so the database picks the one winner among
replicas and redeliveries and a step is sent at most once. This module reads plans."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from bot.core.store.db import Store
from bot.core.store.tables import staged_plans, staged_steps


class PlanState(enum.StrEnum):
    RUNNING = "running"  # its steps go on
    PAUSED = "paused"  # a person paused it: no step is sent until Resume
    STOPPED = "stopped"  # gpuops stopped it (``cause``): Resume or Revert to start
    ABORTED = "aborted"  # a person ended it: never goes on
    COMPLETED = "completed"  # every step passed
    REVERTED = "reverted"  # ended by a revert to its start (``revert_id``)


class StagedStepState(enum.StrEnum):
    PENDING = "pending"  # not sent
    SENDING = "sending"  # its call is being sent: never sent again
    FOLLOWING = "following"  # sent; waiting for the cluster to be steady and healthy
    SOAKING = "soaking"  # steady and healthy; held until ``deadline``
    PASSED = "passed"  # held for its soak with nothing wrong
    FAILED = "failed"  # the provider refused it: nothing was changed
    UNKNOWN = "unknown"  # the call may have applied: resolved from the provider
    HELD = "held"  # sent, stopped before it was proven (alert, unhealthy, not steady)


class StopCause(enum.StrEnum):
    FAILED = "failed"
    UNKNOWN = "unknown"
    ALERT = "alert"  # a new remediation or health alert on the cluster during a soak
    UNHEALTHY = "unhealthy"  # a node of the cluster is not healthy
    FROZEN = "frozen"
    LIMIT = "limit"  # a limit, budget or quota is breached now
    NOT_STEADY = "not_steady"  # not steady within ``steady_within``
    UNREADABLE = "unreadable"  # the cluster could not be read


OPEN_PLAN_STATES = frozenset({PlanState.RUNNING, PlanState.PAUSED, PlanState.STOPPED})


class PlanRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    request_id: str
    project: str
    cluster_id: str
    requester: str
    channel: str
    state: PlanState
    step: int
    steps: int
    cause: StopCause | None
    cause_text: str | None
    revert_id: str | None
    version: int
    created_at: datetime
    updated_at: datetime


class StagedStepRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    request_id: str
    idx: int
    state: StagedStepState
    size_before: int
    size_after: int
    inputs: dict[str, Any]
    calls_until: datetime | None
    deadline: datetime | None
    result: str | None
    updated_at: datetime


class PlanStore:
    """The staged plans tables in the gpuops database (shares the Store's engine)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, request_id: str) -> PlanRecord | None:
        statement = select(staged_plans).where(staged_plans.c.request_id == request_id)
        async with self.store._begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
        return None if row is None else PlanRecord.model_validate(dict(row))

    async def steps(self, request_id: str) -> list[StagedStepRecord]:
        statement = (
            select(staged_steps)
            .where(staged_steps.c.request_id == request_id)
            .order_by(staged_steps.c.idx)
        )
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [StagedStepRecord.model_validate(dict(row)) for row in rows]

    async def in_states(
        self, states: frozenset[PlanState], *, project: str | None = None, limit: int = 200
    ) -> list[PlanRecord]:
        """Plans in ``states``, least recently moved first."""
        statement = select(staged_plans).where(staged_plans.c.state.in_([s.value for s in states]))
        if project is not None:
            statement = statement.where(staged_plans.c.project == project)
        statement = statement.order_by(staged_plans.c.updated_at).limit(limit)
        async with self.store._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [PlanRecord.model_validate(dict(row)) for row in rows]
