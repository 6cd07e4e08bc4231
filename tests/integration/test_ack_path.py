"""Nothing slow before a slash command's ack: its de-duplication write happens after the
ack (in the handler, in its turn), and a repeated delivery still acts once."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import StackFactory

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
