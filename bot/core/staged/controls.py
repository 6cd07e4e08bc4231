"""People steer a staged plan (SPEC §14): Pause, Resume, Abort and Revert to start, from the
buttons of its root (``plan_pause``, ``plan_resume``, ``plan_abort``, ``plan_revert``).

Only the requester or an approver of the project may, and only from the channel the plan's
root is in (a click forged from elsewhere is refused); each is one move of the table, so
two clicks at once move it once and the other is told how it stands. A resumed plan goes on
in the execution that holds it (its request's lease and cluster lock), which waits out a
pause or a stop. Revert to start ends the plan, waits for its request to let the cluster
go, and asks for the change back to the start as a new request under the same policy."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from bot.core.access import Refusal
from bot.core.answers import Reply, error, notice
from bot.core.ask.change import ChangeAsk
from bot.core.lifecycle import plans as lifecycle
from bot.core.policy import Role
from bot.core.requests.deps import RequestDeps
from bot.core.staged.progress import show_progress
from bot.core.staged.records import staged_of
from bot.core.store import TERMINAL_STATES, ChangeRequestRecord
from bot.core.store.plans import PlanRecord, PlanStore

log = logging.getLogger(__name__)

ENDING_SECONDS = 10.0  # how long Revert waits for the plan's request to free the cluster
PlanVerb = Literal["pause", "resume", "abort", "revert"]
_MOVES = {
    "pause": lifecycle.PAUSE,
    "resume": lifecycle.RESUME,
    "abort": lifecycle.ABORT,
    "revert": lifecycle.REVERT,
}
_DONE = {
    "pause": ("paused", ": no step is sent until Resume"),
    "resume": ("resumed", ""),
    "abort": ("aborted", ": no step will be sent"),
    "revert": ("reverted to its start", ""),
}


class PlanControls:
    """Pause, Resume, Abort, Revert to start, each by the right people only."""

    def __init__(
        self,
        deps: RequestDeps,
        plans: PlanStore,
        request_change: Callable[[ChangeAsk], Awaitable[Reply]],
    ) -> None:
        self.deps = deps
        self.plans = plans
        self.request_change = request_change

    async def steer(self, user: str, channel: str, request_id: str, verb: PlanVerb) -> Reply:
        access = self.deps.access
        record = await self.deps.store.get_request(request_id)
        plan = await self.plans.get(request_id)
        if record is None or plan is None:
            return error(f"{request_id} is not a staged plan.")
        try:
            await self._may_steer(user, channel, record, plan)
        except Refusal as refusal:
            return await access.refuse(
                user,
                channel,
                refusal,
                project=record.project,
                cluster_id=record.cluster_id,
                request_id=record.id,
                command=f"plan {verb}",
            )
        transition = _MOVES[verb]
        if plan.state not in transition.plan_from:
            return error(f"Plan {record.id} is {plan.state}: it cannot be {verb}d now.")
        if verb == "revert":
            return await self._revert(user, channel, record, plan)
        moved = await lifecycle.apply(
            self.plans, plan, lifecycle.Move(transition, user, outcome=str(transition.plan_to))
        )
        if moved is None:
            now = await self.plans.get(request_id)
            state = now.state if now else "gone"
            return error(f"Plan {record.id} moved meanwhile: it is {state}.")
        done, then = _DONE[verb]
        text = f"Plan {record.id} {done} by <@{user}>{then}."
        await self.deps.notifier.follow_up_note(record, text, "good")
        await show_progress(self.deps.notifier, self.plans, record)
        return notice(text)

    async def _may_steer(
        self, user: str, channel: str, record: ChangeRequestRecord, plan: PlanRecord
    ) -> None:
        if channel != plan.channel:
            raise Refusal(
                f"plan {record.id} is steered from its own thread only.", kind="not_authorized"
            )
        if user == record.requester:
            return
        await self.deps.access.require(
            user, record.project, channel, Role.approver, doing="steering a staged plan"
        )

    async def _revert(
        self, user: str, channel: str, record: ChangeRequestRecord, plan: PlanRecord
    ) -> Reply:
        """Revert to start: the change back to the plan's start, asked as a new request
        (approved as the policy says); the plan ends once it is asked."""
        staged = staged_of(record)
        if staged is None:
            return error(f"{record.id} is not a staged plan.")
        descriptor = self.deps.access.catalog.descriptor(record.provider)
        if staged.unit == "nodes" or descriptor.name != record.provider:
            return error(
                f"{descriptor.title} cannot remove the nodes {staged.action} added: a revert "
                "to the start is not possible here."
            )
        ask = ChangeAsk(
            user=user,
            channel=channel,
            project=record.project,
            cluster_id=record.cluster_id,
            action=staged.action,
            inputs={staged.field: staged.start},
            reason=f"revert plan {record.id} to its start",
            origin="revert",
            command=f"revert {record.id}",
            revert_of=record.id,
        )
        moved = await lifecycle.apply(
            self.plans,
            plan,
            lifecycle.Move(lifecycle.REVERT, user, outcome=str(lifecycle.REVERT.plan_to)),
        )
        if moved is None:
            return error(f"Plan {record.id} moved meanwhile: ask again.")
        back = f"{staged.start} {staged.unit}"
        text = f"Plan {record.id} ends: <@{user}> asked to revert it to its start ({back})."
        await self.deps.notifier.follow_up_note(record, text, "good")
        await self._ended(record.id)
        return await self.request_change(ask)

    async def _ended(self, request_id: str) -> None:
        """Wait for the plan's execution to end its request (it frees the cluster)."""
        give_up = asyncio.get_running_loop().time() + ENDING_SECONDS
        while asyncio.get_running_loop().time() < give_up:
            record = await self.deps.store.get_request(request_id)
            if record is None or record.state in TERMINAL_STATES:
                return
            await asyncio.sleep(max(self.deps.poll_seconds, 0.02))
        log.warning("plan %s: its request had not ended when its revert was asked", request_id)
