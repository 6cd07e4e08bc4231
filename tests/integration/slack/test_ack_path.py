"""Nothing slow before an ack: a slash command's de-duplication write happens after the ack
(in the handler, in its turn), a click's after the middleware acknowledged it, and a
repeated delivery still acts once."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import StackFactory
from tests.support.workflow_kit import BOB, click, open_direct, wait_mirror

DAVE, CHANNEL = "U04DAVE", "C0INCIDENT"


async def test_a_slow_state_store_does_not_delay_a_commands_ack(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = await make_stack()
    store = stack.runtime.store
    real = store.remember_delivery
    keys: list[str] = []
    checked: list[bool] = []
    both_checked = asyncio.Event()

    async def slow(key: str) -> bool:
        keys.append(key)
        await asyncio.sleep(1.0)
        first_time = await real(key)
        checked.append(first_time)
        if len(checked) == 2:
            both_checked.set()
        return first_time

    monkeypatch.setattr(store, "remember_delivery", slow)
    first = await stack.sender.command(DAVE, CHANNEL, "show together-prod tc-h100-reserved")
    again = await stack.sender.redeliver(first, retry_num=1)
    assert first.status == again.status == 200
    assert first.elapsed < 0.5 and again.elapsed < 0.5  # not the store's second

    def answers() -> list[str]:
        return [
            m.text for m in stack.slack.messages.get(CHANNEL, []) if "tc-h100-reserved" in m.text
        ]

    await asyncio.wait_for(both_checked.wait(), 5)
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("command:")
    assert sorted(checked) == [False, True]  # one delivery won, the other was dropped
    await stack.slack.wait_for(answers, within=5)
    await stack.runtime.workflow.drain()
    assert len(answers()) == 1
    assert len(stack.together.calls("get", "GET")) == 1


async def test_a_slow_state_store_does_not_delay_a_clicks_ack(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approve click is acknowledged before its de-duplication write, and a redelivery
    of it still acts once."""
    stack = await make_stack(transition_seconds=0)
    opened = await open_direct(
        stack, DAVE, "e2e-delhi", "101", "scale_cluster", {"additional_nodes": "1"}
    )
    store = stack.runtime.store
    real = store.remember_delivery
    release = asyncio.Event()
    checked: list[bool] = []

    async def held(key: str) -> bool:
        await release.wait()  # the write cannot finish before both acks are in
        first_time = await real(key)
        checked.append(first_time)
        return first_time

    monkeypatch.setattr(store, "remember_delivery", held)
    first = await click(stack, opened, BOB)
    again = await stack.sender.redeliver(first, retry_num=1)
    assert first.status == again.status == 200
    assert not checked  # both answered while their de-dup writes were still waiting
    release.set()
    await wait_mirror(stack, opened, "Change done")
    assert sorted(checked) == [False, True]
    assert len(stack.e2e.calls("action", "PUT")) == 1
