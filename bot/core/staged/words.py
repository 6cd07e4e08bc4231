"""What a staged plan says in its thread (SPEC §14): each step's result, and every stop
with its cause, the size reached, and what a person can do (Resume, Revert to start)."""

from __future__ import annotations

from typing import Literal

from bot.core.staged.plan import StagedPlan, duration_text
from bot.core.store.plans import StagedStepRecord, StopCause

Tone = Literal["good", "warning"]

CAUSES: dict[StopCause, str] = {
    StopCause.FAILED: "the step failed",
    StopCause.UNKNOWN: "the step's outcome is unknown",
    StopCause.ALERT: "a new alert on the cluster during the soak",
    StopCause.UNHEALTHY: "the cluster is not healthy",
    StopCause.FROZEN: "a change freeze",
    StopCause.LIMIT: "a limit, budget or quota would be breached",
    StopCause.NOT_STEADY: "the cluster was not steady in time",
    StopCause.UNREADABLE: "the cluster could not be read",
}


def _step(staged: StagedPlan, step: StagedStepRecord) -> str:
    return (
        f"Step {step.idx}/{len(staged.steps)} ({step.size_before} → {step.size_after} "
        f"{staged.unit})"
    )


def begun(staged: StagedPlan) -> str:
    return f"Plan started: {staged.headline()}."


def sent(staged: StagedPlan, step: StagedStepRecord) -> str:
    return f"{_step(staged, step)} sent; following the cluster until it is steady and healthy."


def steady(staged: StagedPlan, step: StagedStepRecord) -> str:
    return (
        f"{_step(staged, step)} is steady with every node healthy; holding it for "
        f"{duration_text(staged.soak)}."
    )


def passed(staged: StagedPlan, step: StagedStepRecord) -> str:
    last = step.idx == len(staged.steps)
    then = (
        f" Plan complete: {staged.field} is {staged.target} {staged.unit}."
        if last
        else " Next step."
    )
    return f"{_step(staged, step)} passed its soak with nothing wrong.{then}"


def failed(staged: StagedPlan, step: StagedStepRecord, message: str) -> str:
    return f"{_step(staged, step)} failed: {message}. Nothing was changed by it."


def unknown(staged: StagedPlan, step: StagedStepRecord, message: str) -> str:
    return (
        f"{_step(staged, step)}: {message}. The provider may have applied it; it will not be "
        "sent again, and Resume reads the cluster to tell."
    )


def interrupted(staged: StagedPlan, step: StagedStepRecord) -> str:
    return (
        f"{_step(staged, step)} was being sent when gpuops lost track of it; the provider "
        "may have applied it. It will not be sent again, and Resume reads the cluster to tell."
    )


def resolved(staged: StagedPlan, step: StagedStepRecord, *, applied: bool) -> str:
    if applied:
        return f"{_step(staged, step)} was applied (the cluster shows it); following it now."
    return (
        f"{_step(staged, step)} was not applied (the cluster shows {step.size_before}); sending it."
    )


def unresolved(staged: StagedPlan, step: StagedStepRecord, size: int | None) -> str:
    shown = "could not be read" if size is None else f"shows {size} {staged.unit}"
    return f"{_step(staged, step)}: the cluster {shown}, neither the size before nor after the step"


def refused(staged: StagedPlan, step: StagedStepRecord, message: str) -> str:
    return f"{_step(staged, step)} was not sent: {message}"


def not_steady(staged: StagedPlan, step: StagedStepRecord, status: str) -> str:
    return (
        f"{_step(staged, step)} was not steady within {duration_text(staged.steady_within)} "
        f"(the cluster is {status})"
    )


def left_steady(status: str) -> str:
    return f"the cluster is {status}"


def nodes_not_ready(count: int) -> str:
    return "1 node is not Ready" if count == 1 else f"{count} nodes are not Ready"


def alert(raised: list[str]) -> str:
    return "the watcher raised " + ", ".join(raised) + " during the soak"


def stopped(
    staged: StagedPlan, step: StagedStepRecord, cause: StopCause, why: str, *, reached: int
) -> str:
    """``Plan stopped at step 2/4 (96 GPUs reached): … Resume …, or Revert to start …``."""
    revert = (
        f" or Revert to start ({staged.start} {staged.unit})" if reached != staged.start else ""
    )
    return (
        f"Plan stopped at step {step.idx}/{len(staged.steps)}, {CAUSES[cause]} "
        f"({reached} {staged.unit} reached): {why.rstrip('.')}. Resume to go on{revert}."
    )


def completed(staged: StagedPlan) -> str:
    return f"Plan complete in {len(staged.steps)} steps: {staged.field} {staged.sizes_text()}"


def ended(staged: StagedPlan, state: str, reached: int) -> str:
    how = "reverted to its start" if state == "reverted" else "aborted"
    return (
        f"Plan {how} with {reached} {staged.unit} reached (of {staged.start} → "
        f"{staged.target}); no further step was sent"
    )


def lost(request_id: str) -> str:
    return f"the plan of {request_id} is not in the store; gpuops cannot tell what it reached"


def orphaned(request_id: str, step: int, steps: int) -> str:
    return (
        f"Plan {request_id} ended at step {step}/{steps}: gpuops lost track of it (it was "
        "restarted or its replica died). No further step will be sent; check the cluster "
        "and ask again for what is still needed."
    )
