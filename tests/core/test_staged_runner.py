"""A staged plan's runner in the core (SPEC §14): a plan of 4 steps reaching its target with
each soak observed; each step sent once; a stop on each cause with its words (failed,
unknown, a remediation during the soak, an unhealthy node, a freeze declared mid-plan, a
limit breached mid-plan, not steady in time); Resume takes a stopped plan on; two runners
at once send each step once."""

from __future__ import annotations

import asyncio

from bot.core.store.plans import PlanState, StagedStepState, StopCause
from bot.core.store.watch import NewRemediationRecord
from bot.core.watch.keys import remediation_key
from bot.local.demo.stack import DEMO_POLICY
from bot.providers.errors import ProviderRequestError, ProviderServerError
from tests.support.core_harness import Core
from tests.support.staged_kit import CLUSTER, runner_of, staged_request


def _count(core: Core, request_id: str, words: str) -> int:
    return sum(words in note for note in core.notifier.notes(request_id))


async def _soak_each(core: Core, request_id: str, steps: int) -> None:
    """Wait for each step to be soaking, then move the clock past its soak."""
    for n in range(1, steps + 1):

        def steady(n: int = n) -> bool:
            return _count(core, request_id, "is steady with") >= n

        await core.notifier.wait_for(steady)
        core.clock.advance(minutes=11)


async def test_a_plan_of_four_steps_reaches_its_target_each_soak_observed(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    assert await runner.begin(record) is not None
    running = asyncio.create_task(runner.run(record))
    await _soak_each(core, record.id, 4)
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.state is PlanState.COMPLETED
    sent = [c.body for c in core.together.script.of("apply")]
    assert sent == [{"num_gpus": n} for n in (16, 24, 32, 40)]
    assert core.together.clusters[CLUSTER]["num_gpus"] == 40
    notes = core.notifier.notes(record.id)
    assert notes[0].startswith("Plan started: num_gpus 8 → 16 → 24 → 32 → 40 GPUs in 4 steps")
    assert notes[-1].endswith("Plan complete: num_gpus is 40 GPUs.")
    assert _count(core, record.id, "passed its soak") == 4
    events = [
        e.event for e in reversed(await core.store.list_audit(request_id=record.id, limit=100))
    ]
    assert events.count("plan_send") == 4 and events.count("plan_steady") == 4
    assert events[-1] == "plan_complete"


async def test_a_soak_is_held_until_its_time(core: Core) -> None:
    record = await staged_request(core, target=24)
    runner = runner_of(core)
    await runner.begin(record)
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 1)
    core.clock.advance(minutes=9)  # a minute short of the soak: the runner polls on
    polled = len(core.together.script.of("get_cluster"))
    async with asyncio.timeout(10):
        while len(core.together.script.of("get_cluster")) < polled + 3:
            await asyncio.sleep(0.01)
    assert [s.state for s in await runner.plans.steps(record.id)][:2] == [
        StagedStepState.SOAKING,
        StagedStepState.PENDING,
    ]
    core.clock.advance(minutes=2)
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 2)
    core.clock.advance(minutes=11)
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.state is PlanState.COMPLETED


async def test_a_failed_step_stops_the_plan_and_resume_sends_it_again(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    core.together.script.fail(
        "apply", ProviderRequestError("Together answered 400", provider="together", status=400)
    )
    plan = await asyncio.wait_for(runner.run(record), 10)
    assert plan is not None and plan.state is PlanState.STOPPED and plan.cause is StopCause.FAILED
    text = plan.cause_text or ""
    assert text.startswith("Plan stopped at step 1/4, the step failed (8 GPUs reached)")
    assert text.endswith("Resume to go on.")  # nothing applied: nothing to revert
    assert len(core.together.script.of("apply")) == 1


async def test_an_unknown_step_stops_and_is_resolved_from_the_provider(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    # Together applied it, but the answer was a 502: it may have applied.
    error = ProviderServerError(
        "Together answered 502", provider="together", status=502, may_have_applied=True
    )
    hang = core.together.script.hang("apply", then=error)
    stopping = asyncio.create_task(runner.run(record))
    await asyncio.wait_for(hang.entered.wait(), 10)
    core.together.clusters[CLUSTER]["num_gpus"] = 16
    hang.release()
    plan = await asyncio.wait_for(stopping, 10)
    assert plan is not None and plan.cause is StopCause.UNKNOWN
    assert "(16 GPUs reached)" in (plan.cause_text or "")
    assert "Revert to start (8 GPUs)" in (plan.cause_text or "")
    steps = await runner.plans.steps(record.id)
    assert steps[0].state is StagedStepState.UNKNOWN
    await _resume(core, runner, record.id)
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(
        lambda: _count(core, record.id, "was applied (the cluster shows it)") == 1
    )
    await _soak_each(core, record.id, 4)
    done = await asyncio.wait_for(running, 10)
    assert done is not None and done.state is PlanState.COMPLETED
    # The unknown step was never sent again: 1 (unknown) + 3 more.
    assert [c.body for c in core.together.script.of("apply")][1:] == [
        {"num_gpus": n} for n in (24, 32, 40)
    ]


async def _resume(core: Core, runner: object, request_id: str) -> None:
    from bot.core.lifecycle import plans as lifecycle
    from bot.core.store.plans import PlanStore

    plans = PlanStore(core.store)
    plan = await plans.get(request_id)
    assert plan is not None
    assert await lifecycle.apply(plans, plan, lifecycle.Move(lifecycle.RESUME, "U04DAVE"))


async def test_a_remediation_during_the_soak_stops_the_plan(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 1)
    new = NewRemediationRecord(
        project="together-prod",
        cluster_id=CLUSTER,
        cluster_name="h200",
        instance_id="i-1",
        remediation_id="rem-1",
        node="tc-h200-ondemand-gpu-0",
        channel="C0GPUAUDIT",
        provider_state="PENDING_APPROVAL",
    )
    assert await runner.watch.claim_remediation(remediation_key("together-prod", "rem-1"), new)
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.state is PlanState.STOPPED and plan.cause is StopCause.ALERT
    assert (plan.cause_text or "").startswith(
        "Plan stopped at step 1/4, a new alert on the cluster during the soak (16 GPUs reached): "
        "the watcher raised a remediation on node tc-h200-ondemand-gpu-0 during the soak."
    )
    assert len(core.together.script.of("apply")) == 1


async def test_an_unhealthy_node_stops_the_plan(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 1)
    core.together.clusters[CLUSTER]["gpu_worker_nodes"][0]["status"] = "NotReady"
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.cause is StopCause.UNHEALTHY
    assert "the cluster is not healthy (16 GPUs reached): 1 node is not Ready" in (
        plan.cause_text or ""
    )


async def test_not_steady_in_time_stops_the_plan(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    core.together.clusters[CLUSTER]["status"] = "WaitingForDataPlaneNodes"
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "sent; following") == 1)
    core.clock.advance(minutes=31)
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.cause is StopCause.NOT_STEADY
    assert "was not steady within 30 min (the cluster is WaitingForDataPlaneNodes)" in (
        plan.cause_text or ""
    )


FROZEN = """
freezes:
  - name: mid-plan
    projects: [together-prod]
    from: "2020-01-01T00:00:00Z"
    to: "2099-01-01T00:00:00Z"
"""


async def test_a_freeze_declared_mid_plan_stops_it_before_the_next_send(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 1)
    core.reload(DEMO_POLICY + FROZEN)  # the demo policy has no freezes of its own
    core.clock.advance(minutes=11)
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.cause is StopCause.FROZEN
    assert "Step 2/4 (16 → 24 GPUs) was not sent: together-prod is frozen" in (
        plan.cause_text or ""
    )
    assert len(core.together.script.of("apply")) == 1


async def test_a_limit_lowered_mid_plan_stops_it(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    running = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 1)
    limited = "    project_id: proj-123\n    limits:\n      max_gpus: 32\n"
    core.reload(DEMO_POLICY.replace("    project_id: proj-123\n", limited, 1))
    core.clock.advance(minutes=11)
    plan = await asyncio.wait_for(running, 10)
    assert plan is not None and plan.cause is StopCause.LIMIT
    assert "num_gpus 40 is over together-prod's limit of 32 GPUs" in (plan.cause_text or "")


async def test_two_runners_at_once_send_each_step_once(core: Core) -> None:
    record = await staged_request(core)
    one, two = runner_of(core), runner_of(core)
    await one.begin(record)
    assert await two.begin(record) is None
    runs = [asyncio.create_task(r.run(record)) for r in (one, two)]
    await _soak_each(core, record.id, 4)
    ended = await asyncio.wait_for(asyncio.gather(*runs), 10)
    assert all(p is not None and p.state is PlanState.COMPLETED for p in ended)
    assert [c.body for c in core.together.script.of("apply")] == [
        {"num_gpus": n} for n in (16, 24, 32, 40)
    ]


async def test_a_step_left_sending_by_a_dead_runner_ends_unknown_never_resent(core: Core) -> None:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    hang = core.together.script.hang("apply")
    dying = asyncio.create_task(runner.run(record))
    await asyncio.wait_for(hang.entered.wait(), 10)
    dying.cancel()  # the replica is gone mid-call
    other = runner_of(core)
    core.clock.advance(seconds=core.workflow.deps.max_call_seconds + 1)
    plan = await asyncio.wait_for(other.run(record), 10)
    assert plan is not None and plan.cause is StopCause.UNKNOWN
    assert "lost track of it" in (plan.cause_text or "")
    assert len(core.together.script.of("apply")) == 1
