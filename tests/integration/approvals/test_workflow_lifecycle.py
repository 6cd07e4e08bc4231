"""Lifecycle details over real HTTP: 'already decided' answers mention the person who
decided, as a mention that is not escaped. (Shutdown waiting for a change being sent, the
delivery memory's pruning and a preview that outlives provisioning are core logic: see
tests/core/test_execution.py and tests/core/test_decisions.py.)"""

from __future__ import annotations

import json

from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from tests.support.workflow_kit import (
    BOB,
    CAROL,
    DAVE,
    click,
    next_ephemeral,
    open_direct,
    wait_state,
)


async def test_already_decided_mentions_who_decided(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    opened = await open_direct(stack, DAVE, "e2e-delhi", "104", "restart_workers", {})
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    seen = len(stack.slack.ephemerals_for(CAROL))
    await click(stack, opened, CAROL)
    late = await next_ephemeral(stack, CAROL, seen)
    assert f"{opened.id} was already approved by <@{BOB}>" in late.text
    assert "&lt;@" not in json.dumps(late.blocks)
