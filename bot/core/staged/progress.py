"""A staged plan's progress on its request's root (SPEC §14): where it stands and the
buttons that steer it now, shown by re-rendering the root (the Slack notifier edits it once
the plan has been quiet for a moment: one edit per change, never more than one a second)."""

from __future__ import annotations

from bot.core.notifier import Notifier, RequestEvent
from bot.core.staged.plan import StagedPlan
from bot.core.staged.records import staged_of
from bot.core.store import ChangeRequestRecord
from bot.core.store.plans import PlanRecord, PlanState, PlanStore, StagedStepRecord

ENDED = frozenset({PlanState.COMPLETED, PlanState.ABORTED, PlanState.REVERTED})
_STEPS = {
    "pending": "next",
    "sending": "being sent",
    "following": "sent, waiting for the cluster to be steady",
    "soaking": "steady, soaking",
    "passed": "passed",
    "failed": "failed",
    "unknown": "outcome unknown",
    "held": "sent, not proven",
}


def buttons(staged: StagedPlan, plan: PlanRecord, reached: int) -> tuple[str, ...]:
    """What a person may do with the plan now."""
    revert = ("revert",) if reached != staged.start and staged.unit != "nodes" else ()
    if plan.state is PlanState.RUNNING:
        return ("pause", "abort")
    if plan.state in (PlanState.PAUSED, PlanState.STOPPED):
        return ("resume", "abort", *revert)
    return ()


def progress_text(staged: StagedPlan, plan: PlanRecord, step: StagedStepRecord | None) -> str:
    where = f"{staged.field} {staged.sizes_text()}"
    if step is None:
        return f"Plan {plan.state}: {where}"
    at = f"step {step.idx}/{plan.steps} ({step.size_before} → {step.size_after} {staged.unit})"
    if plan.state is PlanState.RUNNING:
        return f"Plan running, {at} {_STEPS[str(step.state)]} · {where}"
    return f"Plan {plan.state} at {at} · {where}"


async def show_progress(notifier: Notifier, plans: PlanStore, record: ChangeRequestRecord) -> None:
    """Re-render the request's root with the plan as it stands now."""
    staged = staged_of(record)
    plan = await plans.get(record.id)
    if staged is None or plan is None or plan.state in ENDED:
        return  # an ended plan's request ends next, and its root says how
    steps = await plans.steps(record.id)
    step = next((s for s in steps if s.idx == plan.step), None)
    done = [s for s in steps if str(s.state) in ("passed", "following", "soaking", "held")]
    reached = done[-1].size_after if done else staged.start
    progress = {
        "text": progress_text(staged, plan, step),
        "buttons": list(buttons(staged, plan, reached)),
    }
    shown = record.model_copy(update={"plan": {**record.plan, "progress": progress}})
    await notifier.request_changed(shown, RequestEvent("executing", "gpuops"))
