"""A staged request's execution (SPEC §14): its plan begun (or taken up) and driven to its
end under the request's lease and cluster lock, and the request's result once it ended."""

from __future__ import annotations

from bot.core.lifecycle import plans as lifecycle
from bot.core.requests.outcomes import Result
from bot.core.staged import words
from bot.core.staged.plan import StagedPlan
from bot.core.staged.progress import ENDED
from bot.core.staged.records import staged_of
from bot.core.staged.runner import PlanRunner
from bot.core.store import ChangeRequestRecord, RequestState
from bot.core.store.plans import PlanRecord, PlanState, StagedStepRecord, StagedStepState

S = StagedStepState


async def execute_plan(runner: PlanRunner, record: ChangeRequestRecord) -> Result:
    """A staged request's execution: its plan begun (or taken up) and driven to its end,
    waiting out a pause or a stop for Resume, under the request's lease and cluster
    lock (one change per cluster); the request's result once the plan has ended."""
    staged = staged_of(record)
    if staged is None:
        raise ValueError(f"{record.id} is not a staged change")
    await runner.begin(record)
    while True:
        plan = await runner.run(record)
        if plan is None:
            return Result(RequestState.UNKNOWN, words.lost(record.id), "internal")
        if plan.state in ENDED:
            return _ended(staged, plan, await runner.plans.steps(record.id))
        await runner.pause_a_poll()  # paused or stopped: Resume (or Abort) moves it


def _ended(staged: StagedPlan, plan: PlanRecord, steps: list[StagedStepRecord]) -> Result:
    """The request's result for an ended plan: done when it completed; failed, with the
    size it reached, when a person aborted it or reverted it to its start."""
    if plan.state is PlanState.COMPLETED:
        return Result(RequestState.SUCCEEDED, words.completed(staged))
    applied = [s for s in steps if s.state not in (S.PENDING, S.FAILED)]
    reached = applied[-1].size_after if applied else staged.start
    return Result(RequestState.FAILED, words.ended(staged, plan.state, reached), str(plan.state))


async def end_orphaned(runner: PlanRunner, record: ChangeRequestRecord) -> None:
    """A staged request ended because its executor died (``unknown``, never re-run): its
    plan ends with it (``orphan``), so no step is ever sent without its request; told in
    the thread with the step it was at."""
    plan = await runner.plans.get(record.id)
    if plan is None:
        return
    move = lifecycle.Move(lifecycle.ORPHAN, "gpuops", outcome=str(PlanState.ABORTED))
    if await lifecycle.apply(runner.plans, plan, move) is not None:
        text = words.orphaned(record.id, plan.step, plan.steps)
        await runner.deps.notifier.follow_up_note(record, text, "warning")
