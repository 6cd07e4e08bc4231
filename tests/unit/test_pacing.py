"""bot.pacing: commands' post-ack work computes in turns (first come, first served), gives
its slot up while it waits on a provider or on Slack, and holds it for max_hold seconds at a
stretch at most; /gpu acks at once while its work waits for a turn."""

from __future__ import annotations

import asyncio

import pytest

from bot.local.simulators.base import Fault, FaultKind
from bot.pacing import Pacer, waiting_elsewhere
from tests.conftest import StackFactory


async def _work(pacer: Pacer, name: str, log: list[str], seconds: float) -> None:
    async with pacer.turn():
        log.append(f"{name} start")
        await asyncio.sleep(seconds)
        log.append(f"{name} end")


async def test_one_slot_runs_the_work_one_after_the_other_in_arrival_order() -> None:
    pacer = Pacer(slots=1, max_hold=5)
    log: list[str] = []
    await asyncio.gather(*(_work(pacer, name, log, 0.01) for name in "abc"))
    assert log == ["a start", "a end", "b start", "b end", "c start", "c end"]


async def test_two_slots_let_two_work_at_once() -> None:
    pacer = Pacer(slots=2, max_hold=5)
    log: list[str] = []
    await asyncio.gather(*(_work(pacer, name, log, 0.01) for name in "abc"))
    assert log[:2] == ["a start", "b start"]
    assert log.index("c start") > min(log.index("a end"), log.index("b end"))


async def test_work_that_takes_longer_than_max_hold_lets_the_next_one_start() -> None:
    pacer = Pacer(slots=1, max_hold=0.05)
    log: list[str] = []
    slow = asyncio.create_task(_work(pacer, "slow", log, 3600))
    await asyncio.sleep(0)
    await _work(pacer, "next", log, 0)
    # next ran while slow still held its turn (it would take an hour): not held up by it
    assert log == ["slow start", "next start", "next end"]
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    log.clear()  # the slot was neither lost nor released twice: still one at a time
    await asyncio.gather(_work(pacer, "x", log, 0.01), _work(pacer, "y", log, 0.01))
    assert log == ["x start", "x end", "y start", "y end"]


async def test_a_failing_or_cancelled_turn_gives_its_slot_back() -> None:
    pacer = Pacer(slots=1, max_hold=5)
    with pytest.raises(RuntimeError):
        async with pacer.turn():
            raise RuntimeError("boom")
    holder = asyncio.create_task(_work(pacer, "holder", [], 5))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(_work(pacer, "waiter", [], 0))
    await asyncio.sleep(0)
    assert pacer.waiting == 1
    waiter.cancel()
    holder.cancel()
    await asyncio.gather(waiter, holder, return_exceptions=True)
    assert pacer.waiting == 0
    log: list[str] = []
    await asyncio.wait_for(_work(pacer, "later", log, 0), 1)
    assert log == ["later start", "later end"]


def test_a_pacer_needs_a_slot_and_a_positive_hold() -> None:
    with pytest.raises(ValueError):
        Pacer(slots=0)
    with pytest.raises(ValueError):
        Pacer(max_hold=0)


async def test_gpu_acks_at_once_while_its_work_waits_for_a_turn(make_stack: StackFactory) -> None:
    stack = await make_stack()
    pacer = stack.runtime.ops.pacer = Pacer(slots=1, max_hold=30)
    async with pacer.turn():  # someone else's work holds the only slot
        result = await stack.sender.command(
            "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved"
        )
        assert result.status == 200 and result.acked_in_time
        await stack.slack.wait_for(lambda: pacer.waiting == 1, within=2)
        assert not [m for m in stack.slack.messages.get("C0INCIDENT", []) if m.user == "UBOT"]
    shown = await stack.slack.wait_for(
        lambda: next(
            (m for m in stack.slack.messages.get("C0INCIDENT", []) if "tc-h100-reserved" in m.text),
            None,
        )
    )
    assert "16 GPUs" in shown.text


async def test_a_turn_waiting_on_another_service_lets_the_next_compute() -> None:
    pacer = Pacer(slots=1, max_hold=30)
    log: list[str] = []
    answer = asyncio.Event()

    async def calls_a_provider() -> None:
        async with pacer.turn():
            log.append("a computes")
            async with waiting_elsewhere():
                log.append("a waits")
                await answer.wait()
            log.append("a computes again")

    async def quick(name: str) -> None:
        async with pacer.turn():
            log.append(f"{name} computes")
            answer.set()
            await asyncio.sleep(0.01)
            log.append(f"{name} done")

    await asyncio.wait_for(asyncio.gather(calls_a_provider(), quick("b")), 2)
    # b ran while a waited; a queued again and went on only when b's turn ended
    assert log == ["a computes", "a waits", "b computes", "b done", "a computes again"]


async def test_waiting_elsewhere_outside_a_turn_or_in_a_spawned_task_changes_nothing() -> None:
    pacer = Pacer(slots=1, max_hold=30)
    async with waiting_elsewhere():  # no turn at all
        pass
    async with pacer.turn():

        async def spawned() -> None:  # inherits the context, not the turn
            async with waiting_elsewhere():
                await asyncio.sleep(0)

        await asyncio.create_task(spawned())
        other = asyncio.create_task(_work(pacer, "other", [], 0))
        await asyncio.sleep(0.01)
        assert not other.done()  # the slot is still ours
    await asyncio.wait_for(other, 1)


async def test_a_slow_provider_does_not_hold_up_other_commands(make_stack: StackFactory) -> None:
    stack = await make_stack()
    stack.runtime.ops.pacer = Pacer(slots=1, max_hold=30)  # only waiting_elsewhere frees it
    # Slow enough that E2E's answer comes first even on a busy machine; the order of the
    # two answers is what is checked, not a wall-clock margin.
    stack.together.faults.add(Fault(route="get", kind=FaultKind.LATENCY, seconds=4.0))
    await stack.sender.command("U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved")
    await stack.sender.command("U04DAVE", "C0INCIDENT", "show e2e-delhi 101")

    def answered(name: str) -> bool:
        return any(name in m.text for m in stack.slack.messages.get("C0INCIDENT", []))

    await stack.slack.wait_for(lambda: answered("(101)"), within=10)
    assert stack.together.calls("get")  # Together was asked first and is still answering
    assert not answered("tc-h100-reserved")
    await stack.slack.wait_for(lambda: answered("tc-h100-reserved"), within=10)
