"""People steer a staged plan (SPEC §14): Pause, Resume and Abort by the requester or an
approver of the project; refused to others (an operator, a viewer, a stranger) and to a
click from another channel; a paused plan sends nothing until Resume; an aborted one never
goes on; Revert to start asks for the change back to the start and ends the plan."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.answers import Notice
from bot.core.staged.runner import PlanRunner
from bot.core.store import RequestState
from bot.core.store.plans import PlanRecord, PlanState
from tests.support.core_harness import ALICE, BOB, CHANNEL, DAVE, ERIN, MALLORY, Core, reply_text
from tests.support.staged_kit import controls_of, runner_of, staged_request


def _notice(reply: object) -> Notice:
    content = getattr(reply, "content", None)
    assert isinstance(content, Notice), reply
    return content


def _count(core: Core, request_id: str, words: str) -> int:
    return sum(words in note for note in core.notifier.notes(request_id))


async def _at_first_soak(
    core: Core,
) -> tuple[str, PlanRunner, asyncio.Task[PlanRecord | None]]:
    record = await staged_request(core)
    runner = runner_of(core)
    await runner.begin(record)
    task = asyncio.create_task(runner.run(record))
    await core.notifier.wait_for(lambda: _count(core, record.id, "is steady with") == 1)
    return record.id, runner, task


@pytest.mark.parametrize("who", [DAVE, BOB])
async def test_pause_then_resume_by_the_requester_or_an_approver(core: Core, who: str) -> None:
    request_id, runner, task = await _at_first_soak(core)
    controls = controls_of(core, runner)
    paused = await controls.steer(who, CHANNEL, request_id, "pause")
    assert not _notice(paused).error
    plan = await asyncio.wait_for(task, 10)
    assert plan is not None and plan.state is PlanState.PAUSED
    core.clock.advance(minutes=11)
    # Paused: the runner is gone and nothing more is sent.
    assert len(core.together.script.of("apply")) == 1
    resumed = await controls.steer(who, CHANNEL, request_id, "resume")
    assert "resumed" in reply_text(resumed)
    for n in (2, 3, 4):

        def steady(n: int = n) -> bool:
            return _count(core, request_id, "is steady with") == n

        await core.notifier.wait_for(steady)
        core.clock.advance(minutes=11)
    await core.notifier.wait_for(lambda: _count(core, request_id, "Plan complete") == 1)
    assert [c.body for c in core.together.script.of("apply")] == [
        {"num_gpus": n} for n in (16, 24, 32, 40)
    ]


@pytest.mark.parametrize("who", [ERIN, MALLORY, ALICE.replace("ALICE", "NOBODY")])
async def test_others_are_refused_and_nothing_moves(core: Core, who: str) -> None:
    request_id, runner, task = await _at_first_soak(core)
    controls = controls_of(core, runner)
    refused = await controls.steer(who, CHANNEL, request_id, "abort")
    assert _notice(refused).error
    plan = await runner.plans.get(request_id)
    assert plan is not None and plan.state is PlanState.RUNNING
    task.cancel()


async def test_a_click_from_another_channel_is_refused(core: Core) -> None:
    request_id, runner, task = await _at_first_soak(core)
    controls = controls_of(core, runner)
    forged = await controls.steer(DAVE, "C0RANDOM", request_id, "abort")
    assert _notice(forged).error
    assert "steered from its own thread only" in _notice(forged).text
    plan = await runner.plans.get(request_id)
    assert plan is not None and plan.state is PlanState.RUNNING
    task.cancel()


async def test_abort_ends_it_for_good(core: Core) -> None:
    request_id, runner, task = await _at_first_soak(core)
    controls = controls_of(core, runner)
    aborted = await controls.steer(BOB, CHANNEL, request_id, "abort")
    assert "aborted by <@U02BOB>: no step will be sent" in reply_text(aborted)
    plan = await asyncio.wait_for(task, 10)
    assert plan is not None and plan.state is PlanState.ABORTED
    again = await controls.steer(DAVE, CHANNEL, request_id, "resume")
    assert _notice(again).error and "is aborted" in _notice(again).text
    core.clock.advance(minutes=30)
    assert len(core.together.script.of("apply")) == 1


async def test_revert_to_start_after_a_stop_asks_for_the_start_size(core: Core) -> None:
    request_id, runner, task = await _at_first_soak(core)
    controls = controls_of(core, runner)
    core.together.clusters["tc-h200-ondemand"]["gpu_worker_nodes"][0]["status"] = "NotReady"
    plan = await asyncio.wait_for(task, 10)
    assert plan is not None and plan.state is PlanState.STOPPED
    assert "Revert to start (8 GPUs)" in (plan.cause_text or "")
    reverted = await controls.steer(DAVE, CHANNEL, request_id, "revert")
    text = reply_text(reverted)
    assert "num_gpus 16 → 8" in text, text
    ended = await runner.plans.get(request_id)
    assert ended is not None and ended.state is PlanState.REVERTED
    reverts = [
        r
        for r in await core.store.list_requests(
            project="together-prod", cluster_id="tc-h200-ondemand"
        )
        if r.revert_of == request_id
    ]
    assert len(reverts) == 1 and reverts[0].state is RequestState.PENDING  # scale_down: approval
