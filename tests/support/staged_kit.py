"""Driving a staged plan in the core harness (SPEC §14): a staged request stored as the
opening stores one, the runner and controls composed over the harness's workflow, and the
moves a test waits on."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from bot.core.guardrails.guard import Guard, guard_json
from bot.core.staged.controls import PlanControls
from bot.core.staged.plan import Staging, build_plan
from bot.core.staged.runner import PlanRunner
from bot.core.store import ChangeRequestRecord, RequestState
from bot.core.store.plans import PlanStore
from bot.core.store.watch import WatchStore
from bot.providers.stepping import Stepping
from tests.support.core_harness import CHANNEL, DAVE, Core

GPUS = Stepping(
    action="update",
    fields=("num_gpus", "num_reserved_gpus", "num_preemptible_gpus", "num_capacity_pool_gpus"),
    unit="GPUs",
    multiple=8,
)
CLUSTER = "tc-h200-ondemand"  # 8 GPUs, Ready, one node


async def staged_request(
    core: Core,
    *,
    target: int = 40,
    step: int = 8,
    soak: timedelta = timedelta(minutes=10),
    steady_within: timedelta = timedelta(minutes=30),
    cluster_id: str = CLUSTER,
) -> ChangeRequestRecord:
    """An approved staged request on ``cluster_id`` to ``target`` GPUs by ``step``."""
    project = "together-prod"
    state = await core.access.fetch(project, cluster_id)
    final = core.access.make_plan(project, state, "update", {"num_gpus": str(target)})
    size = Guard(core.access).size(state, final, core.clock())
    start = int(state.current["num_gpus"])
    staged = build_plan(
        GPUS,
        "update",
        {"num_gpus": str(target)},
        start=start,
        staging=Staging(step=step, soak=soak),
        soak=soak,
        steady_within=steady_within,
        hourly_total=size.hourly if size.hourly is not None else Decimal(0),
        currency=size.currency,
    )
    record, _ = await core.store.open_request(
        state=RequestState.APPROVED,
        provider="together",
        project=project,
        cluster_id=cluster_id,
        cluster_name=final.cluster_name,
        action="update",
        plan={
            "plan": final.model_dump(mode="json"),
            "inputs": dict(final.body),
            "guard": guard_json(size, None),
            "staged": staged.to_json(),
        },
        kinds=final.kinds,
        needs_approval=False,
        requester=DAVE,
        channel=CHANNEL,
        reason=None,
        expires_at=None,
    )
    return record


def runner_of(core: Core) -> PlanRunner:
    return PlanRunner(core.workflow.deps, PlanStore(core.store), WatchStore(core.store))


def controls_of(core: Core, runner: PlanRunner) -> PlanControls:
    """Pause/Resume/Abort/Revert over the harness."""
    return PlanControls(core.workflow.deps, runner.plans, core.workflow.request_change)
