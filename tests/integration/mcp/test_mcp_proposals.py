"""An agent's proposal end to end (SPEC §15): the ``mcp`` SDK's client calls
``propose_change`` over streamable HTTP; the request's root in Slack says ``via agent
(<client>)`` with the agent's fields verbatim and a Confirm button; nothing reaches the
provider before its requester presses Confirm (a signed Slack click), even a change that
needs no approval; then approvals apply as the policy says; ``request_status`` follows it
and ``cancel_request`` ends it. The audit names the person, ``via`` and the client."""

from __future__ import annotations

import json

from bot.core.store import RequestState
from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Message
from tests.conftest import StackFactory
from tests.support.mcp_kit import agent, answer_of, error_of, make_token, mcp_url
from tests.support.slack_support import provider_writes, roots
from tests.support.workflow_kit import (
    BOB,
    CHANNEL,
    DAVE,
    buttons,
    find_prompt,
    wait_state,
)

SCALE_UP = {
    "project": "together-prod",
    "cluster_id": "tc-h200-ondemand",
    "fields": {"num_gpus": 16},
    "reason": "inference backlog",
    "channel": CHANNEL,
}
SCALE_E2E = {
    "project": "e2e-delhi",
    "cluster_id": "101",
    "action": "scale_cluster",
    "fields": {"additional_nodes": 2},
    "reason": "training run",
    "channel": CHANNEL,
}


def root_of(stack: LocalStack, request_id: str) -> Message | None:
    return next((m for m in roots(stack, CHANNEL) if request_id in m.text), None)


async def confirm(stack: LocalStack, user: str, request_id: str) -> None:
    root = root_of(stack, request_id)
    assert root is not None
    clicked = await stack.sender.block_action(
        user, CHANNEL, action_id="confirm_request", value=request_id, message_ts=root.ts
    )
    assert clicked.status == 200 and clicked.acked_in_time, clicked


async def test_a_change_needing_no_approval_waits_for_its_requesters_confirm(
    make_stack: StackFactory, database_url: str
) -> None:
    stack = await make_stack(database_url=database_url)
    token = await make_token(stack, DAVE)
    async with agent(mcp_url(stack), token, "claude-code") as client:
        proposed = answer_of(await client.call_tool("propose_change", SCALE_UP))
        request_id = proposed["request_id"]
        assert proposed["state"] == "pending" and proposed["awaiting_confirm"] is True
        assert proposed["permalink"] and proposed["channel"] == CHANNEL

        root = root_of(stack, request_id)
        assert root is not None
        shown = json.dumps(root.blocks)
        assert "via agent (claude-code)" in shown and "num_gpus=16" in shown
        assert buttons(root) == {"confirm_request": request_id, "cancel_request": request_id}
        assert find_prompt(stack, CHANNEL, root.ts) is None  # nobody is asked to approve yet
        assert provider_writes(stack) == []

        await confirm(stack, BOB, request_id)  # not the requester: refused, nothing moves
        record = await stack.runtime.store.get_request(request_id)
        assert record is not None and record.state is RequestState.PENDING
        assert record.confirm == "awaiting"

        await confirm(stack, DAVE, request_id)
        done = await wait_state(stack.runtime.store, request_id, RequestState.SUCCEEDED)
        assert done.confirm == "confirmed" and len(provider_writes(stack)) == 1
        status = answer_of(await client.call_tool("request_status", {"request_id": request_id}))
        assert status["state"] == "succeeded" and status["awaiting_confirm"] is False
        late = await client.call_tool("cancel_request", {"request_id": request_id})
        assert "already" in error_of(late)

    trail = await stack.runtime.store.list_audit(request_id=request_id, limit=50)
    events = [(e.actor, e.event) for e in reversed(trail)]
    assert (DAVE, "requested") in events and (DAVE, "confirmed") in events
    assert (BOB, "refused") in events
    requested = next(e for e in trail if e.event == "requested")
    assert requested.detail["via"] == "mcp" and requested.detail["client"] == "claude-code"
    calls = [e for e in await stack.runtime.store.list_audit(limit=100) if e.event == "agent_call"]
    assert calls and all(
        e.actor == DAVE and e.detail["via"] == "mcp" and e.detail["client"] == "claude-code"
        for e in calls
    )
    assert {e.detail["tool"] for e in calls} == {
        "propose_change",
        "request_status",
        "cancel_request",
    }


async def test_a_confirmed_proposal_then_waits_for_the_approvals_the_policy_asks(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    token = await make_token(stack, DAVE)
    async with agent(mcp_url(stack), token) as client:
        proposed = answer_of(await client.call_tool("propose_change", SCALE_E2E))
        request_id = proposed["request_id"]
        assert proposed["needs_approval"] is True and proposed["awaiting_confirm"] is True
        root = root_of(stack, request_id)
        assert root is not None and find_prompt(stack, CHANNEL, root.ts) is None

        # An approver cannot approve before the requester confirms (a crafted click).
        early = await stack.sender.block_action(
            BOB, CHANNEL, action_id="approve_request", value=request_id, message_ts=root.ts
        )
        assert early.status == 200
        record = await stack.runtime.store.get_request(request_id)
        assert record is not None and record.state is RequestState.PENDING
        assert record.approvers == [] and provider_writes(stack) == []

        await confirm(stack, DAVE, request_id)
        prompt = await stack.slack.wait_for(lambda: find_prompt(stack, CHANNEL, root.ts))
        confirmed = await stack.runtime.store.get_request(request_id)
        assert confirmed is not None and confirmed.state is RequestState.PENDING
        assert confirmed.confirm == "confirmed" and provider_writes(stack) == []
        status = answer_of(await client.call_tool("request_status", {"request_id": request_id}))
        assert status["state"] == "pending" and status["awaiting_confirm"] is False

        approved = await stack.sender.block_action(
            BOB, CHANNEL, action_id="approve_request", value=request_id, message_ts=prompt.ts
        )
        assert approved.status == 200
        await wait_state(stack.runtime.store, request_id, RequestState.SUCCEEDED)
        assert len(provider_writes(stack)) == 1


async def test_an_agent_cancels_its_persons_request_and_no_other(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    dave = await make_token(stack, DAVE, name="dave-agent")
    bob = await make_token(stack, BOB, name="bob-agent")
    async with agent(mcp_url(stack), dave) as client:
        request_id = answer_of(await client.call_tool("propose_change", SCALE_UP))["request_id"]
    async with agent(mcp_url(stack), bob) as other:
        refused = await other.call_tool("cancel_request", {"request_id": request_id})
        assert "not one of your requests" in error_of(refused)
        hidden = await other.call_tool("request_status", {"request_id": request_id})
        assert "not one of your requests" in error_of(hidden)
    async with agent(mcp_url(stack), dave) as client:
        cancelled = answer_of(await client.call_tool("cancel_request", {"request_id": request_id}))
        assert cancelled["state"] == "cancelled"
    root = root_of(stack, request_id)
    assert root is not None and "confirm_request" not in buttons(root)
    assert provider_writes(stack) == []
