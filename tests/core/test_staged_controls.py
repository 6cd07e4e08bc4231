"""A staged change end to end in the core (SPEC §14): ``/gpu update … step= soak=`` opens
one request whose preview lists every step, runs its plan in the background under the
request's lease and lock, and ends the request when the plan ends. People steer it: Pause,
Resume and Abort by the requester or an approver of the project; refused to others and to a
click from another channel; Revert to start after a stop asks for the start size under the
same policy (a scale-down: approval) and ends the plan."""

from __future__ import annotations

import asyncio
import re

import pytest

from bot.core.answers import Notice, Reply
from bot.core.requests.view import view_of
from bot.core.store import RequestState
from bot.core.store.plans import PlanRecord, PlanState, PlanStore
from tests.support.core_harness import ALICE, BOB, CHANNEL, DAVE, ERIN, MALLORY, Core
from tests.support.staged_kit import CLUSTER

ASK = f"update together-prod {CLUSTER} num_gpus=40 step=8 soak=10m"


def _notice(reply: Reply) -> Notice:
    assert isinstance(reply.content, Notice), reply
    return reply.content


def _count(core: Core, request_id: str, words: str) -> int:
    return sum(words in note for note in core.notifier.notes(request_id))


async def _opened(core: Core) -> str:
    said = await core.answer(DAVE, ASK)
    match = re.search(r"CR-[0-9A-Z]{6}", said)
    assert match is not None, said
    return match.group(0)


async def _steady(core: Core, request_id: str, n: int) -> None:
    await core.notifier.wait_for(lambda: _count(core, request_id, "is steady with") >= n)


async def _plan(core: Core, request_id: str) -> PlanRecord:
    plan = await PlanStore(core.store).get(request_id)
    assert plan is not None
    return plan


async def _ended(core: Core, request_id: str) -> RequestState:
    async with asyncio.timeout(10):
        while (record := await core.record(request_id)).state is RequestState.EXECUTING:
            await asyncio.sleep(0.02)
    return record.state


async def test_one_request_runs_its_plan_to_the_target(core: Core) -> None:
    said = await core.answer(DAVE, ASK)
    assert "num_gpus 8 → 16 → 24 → 32 → 40 GPUs in 4 steps" in said
    request_id = re.findall(r"CR-[0-9A-Z]{6}", said)[0]
    opened = next(t.record for t in core.notifier.of(request_id, "request_opened"))
    preview = view_of(opened).preview
    assert preview[0] == "num_gpus 8 → 40"
    assert preview[1].startswith("In steps: num_gpus 8 → 16 → 24 → 32 → 40 GPUs in 4 steps")
    assert preview[2:] == [
        f"Step {i}/4: {8 * i} → {8 * i + 8} GPUs, price per hour not known" for i in range(1, 5)
    ]
    for n in range(1, 5):
        await _steady(core, request_id, n)
        core.clock.advance(minutes=11)
    assert await _ended(core, request_id) is RequestState.SUCCEEDED
    record = await core.record(request_id)
    assert record.result_message == "Plan complete in 4 steps: num_gpus 8 → 16 → 24 → 32 → 40 GPUs"
    assert [c.body for c in core.together.script.of("apply")] == [
        {"num_gpus": n} for n in (16, 24, 32, 40)
    ]
    assert (await _plan(core, request_id)).state is PlanState.COMPLETED


@pytest.mark.parametrize("who", [DAVE, BOB])
async def test_pause_then_resume_by_the_requester_or_an_approver(core: Core, who: str) -> None:
    request_id = await _opened(core)
    await _steady(core, request_id, 1)
    paused = await core.workflow.steer_plan(
        user=who, channel=CHANNEL, request_id=request_id, verb="pause"
    )
    assert not _notice(paused).error
    assert "paused by" in _notice(paused).text
    core.clock.advance(minutes=11)  # past the soak: a paused plan sends nothing still
    await asyncio.sleep(0.2)
    assert len(core.together.script.of("apply")) == 1
    assert (await _plan(core, request_id)).state is PlanState.PAUSED
    resumed = await core.workflow.steer_plan(
        user=who, channel=CHANNEL, request_id=request_id, verb="resume"
    )
    assert "resumed by" in _notice(resumed).text
    await core.notifier.wait_for(lambda: _count(core, request_id, "passed its soak") == 1)
    for n in (2, 3, 4):
        await _steady(core, request_id, n)
        core.clock.advance(minutes=11)
    assert await _ended(core, request_id) is RequestState.SUCCEEDED
    assert len(core.together.script.of("apply")) == 4


@pytest.mark.parametrize("who", [ERIN, MALLORY])
async def test_others_are_refused_and_nothing_moves(core: Core, who: str) -> None:
    request_id = await _opened(core)
    await _steady(core, request_id, 1)
    refused = await core.workflow.steer_plan(
        user=who, channel=CHANNEL, request_id=request_id, verb="abort"
    )
    assert _notice(refused).error
    assert (await _plan(core, request_id)).state is PlanState.RUNNING
    trail = await core.trail(request_id)
    assert (who, "refused", "not_authorized") in trail


async def test_a_click_from_another_channel_is_refused(core: Core) -> None:
    request_id = await _opened(core)
    await _steady(core, request_id, 1)
    forged = await core.workflow.steer_plan(
        user=ALICE, channel="C0RANDOM", request_id=request_id, verb="abort"
    )
    assert "steered from its own thread only" in _notice(forged).text
    assert (await _plan(core, request_id)).state is PlanState.RUNNING


async def test_abort_ends_it_for_good(core: Core) -> None:
    request_id = await _opened(core)
    await _steady(core, request_id, 1)
    aborted = await core.workflow.steer_plan(
        user=BOB, channel=CHANNEL, request_id=request_id, verb="abort"
    )
    assert "aborted by <@U02BOB>: no step will be sent" in _notice(aborted).text
    assert await _ended(core, request_id) is RequestState.FAILED
    record = await core.record(request_id)
    assert record.result_message == (
        "Plan aborted with 16 GPUs reached (of 8 → 40); no further step was sent"
    )
    again = await core.workflow.steer_plan(
        user=DAVE, channel=CHANNEL, request_id=request_id, verb="resume"
    )
    assert "is aborted" in _notice(again).text
    core.clock.advance(minutes=30)
    await asyncio.sleep(0.1)
    assert len(core.together.script.of("apply")) == 1


async def test_revert_to_start_after_a_stop(core: Core) -> None:
    request_id = await _opened(core)
    await _steady(core, request_id, 1)
    core.together.clusters[CLUSTER]["gpu_worker_nodes"][0]["status"] = "NotReady"
    await core.notifier.wait_for(lambda: _count(core, request_id, "Plan stopped") == 1)
    plan = await _plan(core, request_id)
    assert plan.state is PlanState.STOPPED
    assert "Resume to go on or Revert to start (8 GPUs)." in (plan.cause_text or "")
    reverted = await core.workflow.steer_plan(
        user=DAVE, channel=CHANNEL, request_id=request_id, verb="revert"
    )
    assert "num_gpus 16 → 8" in _notice(reverted).text
    assert (await _plan(core, request_id)).state is PlanState.REVERTED
    assert (await core.record(request_id)).state is RequestState.FAILED
    reverts = [
        r
        for r in await core.store.list_requests(project="together-prod", cluster_id=CLUSTER)
        if r.revert_of == request_id
    ]
    assert len(reverts) == 1 and reverts[0].state is RequestState.PENDING  # a scale-down


async def test_a_plan_whose_replica_died_mid_step_never_goes_on(any_core: Core) -> None:
    """Its replica dies while step 1's call is out (its tasks cancelled, as a SIGKILL
    leaves them); another replica's recovery ends the request ``unknown`` (never re-run)
    and the plan with it: no step is ever sent again. On SQLite and PostgreSQL."""
    core = any_core
    hang = core.together.script.hang("apply")
    request_id = await _opened(core)
    await asyncio.wait_for(hang.entered.wait(), 10)
    await core.workflow.close()  # the replica is gone mid-call
    other = await core.replica("core-b")
    deps = core.workflow.deps
    core.clock.advance(seconds=deps.exec_lease_seconds + deps.max_call_seconds + 1)
    assert await other.recover_interrupted() == 1
    assert (await core.record(request_id)).state is RequestState.UNKNOWN
    plan = await _plan(core, request_id)
    assert plan.state is PlanState.ABORTED
    await core.notifier.wait_for(lambda: _count(core, request_id, "lost track of it") == 1)
    hang.release()
    assert await other.recover_interrupted() == 0
    resumed = await other.steer_plan(
        user=DAVE, channel=CHANNEL, request_id=request_id, verb="resume"
    )
    assert "is aborted" in _notice(resumed).text
    assert len(core.together.script.of("apply")) == 1
    events = [e.event for e in await core.store.list_audit(request_id=request_id, limit=100)]
    assert events.count("plan_send") == 1 and "plan_orphan" in events
