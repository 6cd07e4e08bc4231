"""Change requests: preview → approval → execution → result → follow-up (SPEC §3-§5).

Every state change is a compare-and-set in the store, so two replicas, two approvers
clicking at once, or a click delivered twice execute a change once. A change that may
have reached the provider and whose outcome we did not see ends ``unknown`` — never
re-run. This module assembles the parts; each lives in its own module of this package.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from bot.core.access import Access
from bot.core.answers import Reply
from bot.core.ask.change import ChangeAsk
from bot.core.notifier import Notifier
from bot.core.policy.notices import tell_kept
from bot.core.policy.reload import PolicyKept
from bot.core.requests.deciders import Decision
from bot.core.requests.decisions import Decisions, NeedsBreakGlass
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.followup import FollowUp
from bot.core.requests.opening import Opening
from bot.core.requests.outcomes import Result
from bot.core.requests.presend import PreSend
from bot.core.requests.requirement_refresh import RequirementRefresh
from bot.core.requests.revert import Reverts
from bot.core.requests.schedule import Scheduler
from bot.core.requests.sweeper import Sweeper
from bot.core.requests.tasks import BackgroundTasks
from bot.core.store import Store
from bot.logs import log_context


class ChangeWorkflow:
    """The life of change requests, from opening to follow-up, told through a Notifier.

    ``request_change`` opens one, ``decide`` acts on a decision, ``execute`` sends an
    approved one, the sweeper methods keep the rest honest; ``drain``/``close``/
    ``wait_for_executions`` serve tests and shutdown."""

    def __init__(
        self,
        *,
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
        self.opening = Opening(self.deps, self.execution)
        self.decisions = Decisions(self.deps, self.execution, self.sweeper)
        self.requirement_refresh = RequirementRefresh(
            self.deps, self.decisions.deciders.still_eligible
        )
        self.reverts = Reverts(self.deps, self.opening)
        self.scheduler = Scheduler(self.deps, self.execution)

    # Every line logged while a request is opened, decided or reverted names it.

    async def request_change(self, ask: ChangeAsk) -> Reply:
        """Store and show a change someone asked for, checked at request
        (bot.core.requests.opening)."""
        with log_context(project=ask.project, cluster=ask.cluster_id):
            return await self.opening.request_change(ask)

    async def decide(
        self,
        *,
        user: str,
        channel: str,
        request_id: str,
        decision: Decision,
        break_glass_reason: str | None = None,
        reason: str | None = None,
    ) -> Reply | NeedsBreakGlass | None:
        """Act on a decision (bot.core.requests.decisions)."""
        with log_context(request_id=request_id):
            return await self.decisions.decide(
                user=user,
                channel=channel,
                request_id=request_id,
                decision=decision,
                break_glass_reason=break_glass_reason,
                reason=reason,
            )

    async def revert(self, *, user: str, channel: str, request_id: str) -> Reply:
        """Request the inverse of a change (bot.core.requests.revert)."""
        with log_context(request_id=request_id):
            return await self.reverts.revert(user=user, channel=channel, request_id=request_id)

    async def execute(self, request_id: str, *, actor: str) -> Result | None:
        """Send an approved change (bot.core.requests.execution)."""
        return await self.execution.execute(request_id, actor=actor)

    async def expire_due(self) -> int:
        """Expire the pending requests past their deadline; how many."""
        return await self.sweeper.expire_due()

    async def recover_interrupted(self) -> int:
        """End the requests whose executor is gone (never re-run); how many."""
        return await self.sweeper.recover_interrupted()

    async def refresh_pending_gauge(self) -> None:
        await self.sweeper.refresh_pending_gauge()

    async def sweep_once(self) -> None:
        await self.sweeper.sweep_once()

    async def policy_reloaded(self) -> int:
        """A new policy is in force: pending requests show what approving them takes now
        (bot.core.requests.requirement_refresh); how many changed."""
        return await self.requirement_refresh.after_reload()

    async def policy_kept(self, kept: PolicyKept) -> int:
        """A policy file was refused: the notify channels it concerns hear it once
        (bot.core.policy.notices); how many this replica told."""
        return await tell_kept(self.deps.store, self.deps.notifier, kept)

    async def sweep_forever(self, every: float) -> None:
        await self.sweeper.sweep_forever(every)

    async def wait_for_executions(self, grace: float) -> set[str]:
        """Let changes being sent finish (on shutdown); the ids still running."""
        return await self.deps.in_flight.wait(grace)

    async def drain(self) -> None:
        """Wait for background work (tests, shutdown)."""
        await self.deps.tasks.drain()

    async def close(self) -> None:
        """Cancel background work."""
        await self.deps.tasks.close()

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
