"""Running a staged plan (SPEC §14): each step sent once, the cluster followed until it is
steady with every node healthy, held for its soak with no new remediation or health alert,
then the next; any of the stop causes stops it, with the words said in the thread.

The runner decides each move from the plan and its step as stored and applies it through
the table (``bot.core.lifecycle.plans``), one transaction each; a move lost means another
runner (a replica, a person's click) moved first, and this one looks again. Nothing is
sent but by ``send``'s compare-and-set, so a step goes at most once whoever runs the plan,
and never after Pause or Abort."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.core.access import Refusal
from bot.core.guardrails.guard import Guard, stored_override, stored_size
from bot.core.lifecycle import plans as lifecycle
from bot.core.requests.deps import RequestDeps
from bot.core.staged import words
from bot.core.staged.cluster import size_of, unhealthy
from bot.core.staged.plan import StagedPlan
from bot.core.staged.progress import show_progress
from bot.core.staged.records import new_plan_rows, staged_of
from bot.core.store import ChangeRequestRecord, StoreUnavailable
from bot.core.store.plans import (
    PlanRecord,
    PlanState,
    PlanStore,
    StagedStepRecord,
    StagedStepState,
    StopCause,
)
from bot.core.store.watch import WatchStore
from bot.core.watch.keys import incident_key
from bot.providers.base import ClusterState
from bot.providers.errors import ProviderError

log = logging.getLogger(__name__)


S = StagedStepState
ACTOR = "gpuops"
MIN_POLL = 0.02


class PlanRunner:
    """Drives staged plans, each step exactly once across replicas."""

    def __init__(self, deps: RequestDeps, plans: PlanStore, watch: WatchStore) -> None:
        self.deps = deps
        self.plans = plans
        self.watch = watch
        self.guard = Guard(deps.access)

    async def begin(self, record: ChangeRequestRecord) -> PlanRecord | None:
        """Store the plan of an approved staged request (the one caller that wins)."""
        staged = staged_of(record)
        if staged is None:
            raise ValueError(f"{record.id} is not a staged change")
        plan, steps = new_plan_rows(record, staged, self.deps.clock())
        begun = await lifecycle.begin(self.plans, plan, steps, record.requester)
        if begun is not None:
            await self._note(record, words.begun(staged), "good")
        return begun

    async def run(self, record: ChangeRequestRecord) -> PlanRecord | None:
        """Drive the plan until it is not running (paused, stopped, ended): the plan as
        last read, None when it has none."""
        staged = staged_of(record)
        if staged is None:
            return None
        while True:
            plan = await self.plans.get(record.id)
            if plan is None or plan.state is not PlanState.RUNNING:
                return plan
            steps = await self.plans.steps(record.id)
            step = next((s for s in steps if s.idx == plan.step), None)
            if step is None:
                return plan
            await self._advance(record, staged, plan, step)

    async def _advance(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
    ) -> None:
        """One move of the step under way (or a wait for the cluster)."""
        if step.state is S.PENDING:
            await self._send(record, staged, plan, step)
        elif step.state is S.SENDING:
            await self._sending_elsewhere(record, plan, step)
        elif step.state is S.FAILED:
            await self._apply(plan, lifecycle.Move(lifecycle.RETRY, ACTOR, idx=step.idx))
        elif step.state is S.UNKNOWN:
            await self._resolve(record, staged, plan, step)
        elif step.state is S.HELD:
            deadline = self.deps.clock() + staged.steady_within
            move = lifecycle.Move(
                lifecycle.REFOLLOW, ACTOR, idx=step.idx, step_fields={"deadline": deadline}
            )
            await self._apply(plan, move)
        elif step.state is S.FOLLOWING:
            await self._follow(record, staged, plan, step)
        elif step.state is S.SOAKING:
            await self._soak(record, staged, plan, step)
        # Passed: the plan moved on since it was read (another runner); read it again.

    # -- sending ---------------------------------------------------------------------------

    async def _send(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
    ) -> None:
        """The step's checks (the rules on the final target, now), then ``send`` and the
        call, once; its answer recorded."""
        access = self.deps.access
        try:
            self._check_rules(record)
            state = await access.fetch(record.project, record.cluster_id)
            change = access.make_plan(record.project, state, staged.action, step.inputs)
        except Refusal as refusal:
            cause = {"frozen": StopCause.FROZEN, "limit": StopCause.LIMIT}.get(
                refusal.kind, StopCause.FAILED
            )
            await self._stop(
                record, staged, plan, cause, words.refused(staged, step, refusal.message)
            )
            return
        calls_until = self.deps.clock() + timedelta(seconds=self.deps.max_call_seconds)
        sending = lifecycle.Move(
            lifecycle.SEND, ACTOR, idx=step.idx, step_fields={"calls_until": calls_until}
        )
        if await self._apply(plan, sending) is None:
            return  # paused, aborted, or another runner sends it
        adapter = access.adapter_for(record.project)
        try:
            try:
                outcome = await adapter.apply(change)
            finally:
                access.fleet.forget(record.project)
        except ProviderError as exc:
            if exc.may_have_applied:
                text = words.unknown(staged, step, exc.user_message)
                await self._answered(plan, step, lifecycle.SEND_UNKNOWN, text)
                await self._stop(record, staged, plan, StopCause.UNKNOWN, text)
            else:
                text = words.failed(staged, step, exc.user_message)
                await self._answered(plan, step, lifecycle.SEND_FAILED, text)
                await self._stop(record, staged, plan, StopCause.FAILED, text)
            return
        deadline = self.deps.clock() + staged.steady_within
        await self._answered(plan, step, lifecycle.SENT, outcome.message, {"deadline": deadline})
        await self._note(record, words.sent(staged, step), "good")

    def _check_rules(self, record: ChangeRequestRecord) -> None:
        """Limits and freezes on the plan's final target, as at request and approval."""
        size = stored_size(record.plan)
        if size is None:
            return
        overridden = stored_override(record.plan) is not None
        self.guard.check(
            record.project, record.kinds, size, self.deps.clock(), overridden=overridden
        )

    async def _answered(
        self,
        plan: PlanRecord,
        step: StagedStepRecord,
        transition: lifecycle.Transition,
        text: str,
        fields: dict[str, object] | None = None,
    ) -> None:
        """Record a sent step's answer, through a store outage (it happened)."""
        move = lifecycle.Move(
            transition,
            ACTOR,
            outcome=str(transition.step_to),
            idx=step.idx,
            step_fields={"result": text[:1000], **(fields or {})},
            detail={"message": text},
        )
        wait = 0.2
        while True:
            try:
                await lifecycle.apply(self.plans, plan, move)
                return
            except StoreUnavailable as exc:
                log.warning(
                    "plan %s: step %d's answer waits for the store: %s",
                    plan.request_id,
                    step.idx,
                    exc,
                )
                await asyncio.sleep(wait)
                wait = min(wait * 2, 5.0)

    async def _sending_elsewhere(
        self, record: ChangeRequestRecord, plan: PlanRecord, step: StagedStepRecord
    ) -> None:
        """A step left ``sending`` (its sender died, or sends it now): once no call can
        arrive any more it is ``unknown``, and the plan stops to resolve it."""
        if step.calls_until is not None and step.calls_until > self.deps.clock():
            await self.pause_a_poll()
            return
        staged = staged_of(record)
        assert staged is not None
        text = words.interrupted(staged, step)
        await self._answered(plan, step, lifecycle.SEND_UNKNOWN, text)
        await self._stop(record, staged, plan, StopCause.UNKNOWN, text)

    async def _resolve(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
    ) -> None:
        """An ``unknown`` step of a resumed plan, resolved from the provider: at its size it
        was applied; at the size before, once no call can arrive, it was not."""
        size = await self._size(record, staged)
        if size == step.size_after:
            deadline = self.deps.clock() + staged.steady_within
            move = lifecycle.Move(
                lifecycle.RESOLVED_APPLIED, ACTOR, idx=step.idx, step_fields={"deadline": deadline}
            )
            if await self._apply(plan, move) is not None:
                await self._note(record, words.resolved(staged, step, applied=True), "good")
            return
        waiting = step.calls_until is not None and step.calls_until > self.deps.clock()
        if size == step.size_before and not waiting:
            move = lifecycle.Move(lifecycle.RESOLVED_NOT_APPLIED, ACTOR, idx=step.idx)
            if await self._apply(plan, move) is not None:
                await self._note(record, words.resolved(staged, step, applied=False), "good")
            return
        if waiting:
            await self.pause_a_poll()
            return
        text = words.unresolved(staged, step, size)
        await self._stop(record, staged, plan, StopCause.UNKNOWN, text)

    # -- following and soaking ---------------------------------------------------------

    async def _follow(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
    ) -> None:
        state = await self._read(record, staged, plan, step)
        if state is None:
            return
        now = self.deps.clock()
        bad = unhealthy(self.deps.access.catalog, state)
        if state.summary.steady and bad is None:
            move = lifecycle.Move(
                lifecycle.STEADY, ACTOR, idx=step.idx, step_fields={"deadline": now + staged.soak}
            )
            if await self._apply(plan, move) is not None:
                await self._note(record, words.steady(staged, step), "good")
            return
        if state.summary.steady and bad is not None:
            await self._hold(record, staged, plan, step, StopCause.UNHEALTHY, bad)
            return
        if step.deadline is not None and now >= step.deadline:
            text = words.not_steady(staged, step, state.summary.status)
            await self._hold(record, staged, plan, step, StopCause.NOT_STEADY, text)
            return
        await self.pause_a_poll()

    async def _soak(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
    ) -> None:
        state = await self._read(record, staged, plan, step)
        if state is None:
            return
        bad = (
            unhealthy(self.deps.access.catalog, state)
            if state.summary.steady
            else words.left_steady(state.summary.status)
        )
        if bad is not None:
            await self._hold(record, staged, plan, step, StopCause.UNHEALTHY, bad)
            return
        prefix = incident_key(record.project, record.cluster_id, 0)[:-1]
        raised = await self.watch.signals_since(
            record.project, record.cluster_id, prefix, step.updated_at
        )
        if raised:
            await self._hold(record, staged, plan, step, StopCause.ALERT, words.alert(raised))
            return
        if step.deadline is None or self.deps.clock() < step.deadline:
            await self.pause_a_poll()
            return
        last = step.idx == plan.steps
        transition = lifecycle.COMPLETE if last else lifecycle.PASS
        move = lifecycle.Move(
            transition,
            ACTOR,
            outcome=str(S.PASSED),
            idx=step.idx,
            plan_fields={"step": step.idx + 1},
        )
        if await self._apply(plan, move) is not None:
            await self._note(record, words.passed(staged, step), "good")

    async def _read(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
    ) -> ClusterState | None:
        try:
            return await self.deps.access.fetch(record.project, record.cluster_id)
        except Refusal as refusal:
            if step.deadline is not None and self.deps.clock() >= step.deadline:
                await self._hold(record, staged, plan, step, StopCause.UNREADABLE, refusal.message)
            else:
                await self.pause_a_poll()
            return None

    async def _size(self, record: ChangeRequestRecord, staged: StagedPlan) -> int | None:
        try:
            state = await self.deps.access.fetch(record.project, record.cluster_id)
        except Refusal:
            return None
        return size_of(staged, state)

    # -- stopping ------------------------------------------------------------------------

    async def _hold(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        step: StagedStepRecord,
        cause: StopCause,
        why: str,
    ) -> None:
        text = words.stopped(staged, step, cause, why, reached=step.size_after)
        move = lifecycle.Move(
            lifecycle.HOLD,
            ACTOR,
            outcome=str(cause),
            idx=step.idx,
            plan_fields=lifecycle.stopped_fields(cause, text),
            step_fields={"result": why[:1000]},
            detail={"cause": str(cause), "why": why},
        )
        if await self._apply(plan, move) is not None:
            await self._note(record, text, "warning")

    async def _stop(
        self,
        record: ChangeRequestRecord,
        staged: StagedPlan,
        plan: PlanRecord,
        cause: StopCause,
        why: str,
    ) -> None:
        steps = await self.plans.steps(record.id)
        current = next(s for s in steps if s.idx == plan.step)
        reached = current.size_after if current.state is S.UNKNOWN else current.size_before
        text = words.stopped(staged, current, cause, why, reached=reached)
        move = lifecycle.Move(
            lifecycle.STOP,
            ACTOR,
            outcome=str(cause),
            plan_fields=lifecycle.stopped_fields(cause, text),
            detail={"cause": str(cause), "why": why, "step": current.idx},
        )
        if await self._apply(plan, move) is not None:
            await self._note(record, text, "warning")

    async def _apply(
        self, plan: PlanRecord, move: lifecycle.Move
    ) -> tuple[PlanRecord, StagedStepRecord | None] | None:
        return await lifecycle.apply(self.plans, plan, move)

    async def _note(self, record: ChangeRequestRecord, text: str, tone: words.Tone) -> None:
        """A step's result in the thread, and the root shows where the plan stands."""
        await self.deps.notifier.follow_up_note(record, text, tone)
        await show_progress(self.deps.notifier, self.plans, record)

    async def pause_a_poll(self) -> None:
        await asyncio.sleep(max(self.deps.poll_seconds, MIN_POLL))
