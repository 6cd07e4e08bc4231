"""Two replicas (SPEC §15): a proposal made through one replica's ``/mcp`` is confirmed by a
click delivered to the other and runs once; a token's rate window counts its calls on both.
"""

from __future__ import annotations

from bot.core.store import RequestState
from tests.conftest import StackFactory
from tests.support.mcp_kit import agent, answer_of, error_of, make_token
from tests.support.slack_support import provider_writes, roots
from tests.support.workflow_kit import CHANNEL, DAVE, wait_state

PROPOSAL = {
    "project": "e2e-delhi",
    "cluster_id": "101",
    "action": "attach_ip",
    "fields": {"reserved_ip_id": 502},
    "reason": "expose the notebook",
    "channel": CHANNEL,
}


async def test_a_proposal_on_one_replica_is_confirmed_on_the_other_and_limits_are_shared(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await make_stack(
        database_url=database_url, extra_settings={"gpuops_mcp_calls_per_minute": 4}
    )
    other = await stack.start_replica("replica-b")
    token = await make_token(stack, DAVE)
    async with agent(f"{other.base_url}/mcp", token) as on_b:
        proposed = answer_of(await on_b.call_tool("propose_change", PROPOSAL))
    request_id = proposed["request_id"]
    assert proposed["awaiting_confirm"] is True and proposed["needs_approval"] is False
    root = next(m for m in roots(stack, CHANNEL) if request_id in m.text)
    clicked = await stack.sender.block_action(
        DAVE, CHANNEL, action_id="confirm_request", value=request_id, message_ts=root.ts
    )
    assert clicked.status == 200
    await wait_state(stack.runtime.store, request_id, RequestState.SUCCEEDED)
    assert len(provider_writes(stack)) == 1

    async with agent(f"{stack.base_url}/mcp", token) as on_a:
        answer_of(await on_a.call_tool("request_status", {"request_id": request_id}))
        answer_of(await on_a.call_tool("request_status", {"request_id": request_id}))
    async with agent(f"{other.base_url}/mcp", token) as on_b:
        answer_of(await on_b.call_tool("request_status", {"request_id": request_id}))
        limited = await on_b.call_tool("request_status", {"request_id": request_id})
        assert "more than 4 calls this minute" in error_of(limited)
