"""Change requests: preview → approval → execution → result → follow-up (SPEC §3-§5).

Every state change is a compare-and-set in the store, so two replicas, two approvers
clicking at once, or a click delivered twice execute a change once. A change that may
have reached the provider and whose outcome we did not see ends ``unknown`` — never
re-run. This module assembles the parts; each lives in its own module of this package.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar

from bot.core.access import Access
from bot.core.notifier import Notifier
from bot.core.policy import Policy
from bot.core.requests.decisions import Decisions
from bot.core.requests.execution import Execution
from bot.core.requests.followup import FollowUp
from bot.core.requests.lifecycle import Lifecycle
from bot.core.requests.presend import PreSend
from bot.core.requests.revert import Reverts
from bot.core.requests.scheduler import Scheduler
from bot.core.requests.settle import RequestDeps
from bot.core.requests.sweeper import Sweeper
from bot.core.requests.tasks import BackgroundTasks
from bot.core.store import Store
from bot.logs import log_context

P = ParamSpec("P")
R = TypeVar("R")


class ChangeWorkflow:
    """The life of change requests, from opening to follow-up, told through a Notifier.

    ``request_change`` opens one, ``decide`` acts on a decision, ``execute`` sends an
    approved one, the sweeper methods keep the rest honest; ``drain``/``close``/
    ``wait_for_executions`` serve tests and shutdown."""

    def __init__(
        self,
        *,
        policy: Policy,
        access: Access,
        store: Store,
        notifier: Notifier,
        instance_id: str,
        poll_seconds: float,
        followup_minutes: float = 30.0,
        exec_lease_seconds: float = 30.0,
        max_call_seconds: float = 90.0,
        schedule_grace_seconds: float = 600.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        access.authorizer.policy = policy
        self.deps = RequestDeps(
            store=store,
            access=access,
            notifier=notifier,
            instance_id=instance_id,
            poll_seconds=poll_seconds,
            followup_minutes=followup_minutes,
            exec_lease_seconds=exec_lease_seconds,
            max_call_seconds=max_call_seconds,
            schedule_grace_seconds=schedule_grace_seconds,
            clock=clock,
        )
        self.follow_up = FollowUp(self.deps)
        self.presend = PreSend(self.deps)
        self.execution = Execution(self.deps, self.follow_up, self.presend)
        self.sweeper = Sweeper(self.deps, self.follow_up)
        self.lifecycle = Lifecycle(self.deps, self.execution)
        self.decisions = Decisions(self.deps, self.execution, self.sweeper)
        self.reverts = Reverts(self.deps, self.lifecycle)
        self.scheduler = Scheduler(self.deps, self.execution)
        # Every line logged while a request is opened, decided or sent names it.
        self.request_change = logged(
            self.lifecycle.request_change, project="project", cluster="cluster_id"
        )
        self.decide = logged(self.decisions.decide, request_id="request_id")
        self.revert = logged(self.reverts.revert, request_id="request_id")
        self.execute = self.execution.execute
        self.expire_due = self.sweeper.expire_due
        self.recover_interrupted = self.sweeper.recover_interrupted
        self.refresh_pending_gauge = self.sweeper.refresh_pending_gauge
        self.sweep_once = self.sweeper.sweep_once
        self.sweep_forever = self.sweeper.sweep_forever
        self.wait_for_executions = self.deps.in_flight.wait
        self.drain = self.deps.tasks.drain
        self.close = self.deps.tasks.close

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.deps.clock

    @clock.setter
    def clock(self, clock: Callable[[], datetime]) -> None:
        self.deps.clock = clock

    @property
    def instance_id(self) -> str:
        return self.deps.instance_id

    @property
    def tasks(self) -> BackgroundTasks:
        return self.deps.tasks


def logged(method: Callable[P, Awaitable[R]], **fields: str | int) -> Callable[P, Awaitable[R]]:
    """``method`` with log context fields bound from its arguments: each field names a
    keyword argument, or the index of a positional one."""

    @functools.wraps(method)
    async def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        values = {
            field: str(args[arg])
            if isinstance(arg, int) and arg < len(args)
            else kwargs.get(str(arg))
            for field, arg in fields.items()
        }
        with log_context(**{k: v for k, v in values.items() if isinstance(v, str)}):
            return await method(*args, **kwargs)

    return bound
