"""Views as Slack takes them, over real HTTP against the strict stand-in: a Home tab with
several approvals publishes (one action_id in many blocks), every views.update the bot sends
carries the hash of the view it replaces, and a refused call logs Slack's own words."""

from __future__ import annotations

import logging

import pytest

from bot.local.demo.stack import LocalStack
from bot.slack.messenger import Messenger, SlackDeliveryError, build_web_client
from tests.support.slack_support import opened_modal
from tests.support.workflow_kit import BOB, DAVE, request


async def test_a_home_tab_with_two_approvals_is_published_with_both_buttons(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    first = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    second = await request(stack, DAVE, "action e2e-delhi 103 restart_workers")
    before = stack.slack.home_of(BOB)
    assert before is None
    result = await stack.sender.app_home_opened(BOB)
    assert result.status == 200
    home = await stack.slack.wait_for(lambda: stack.slack.home_of(BOB), within=15)
    approvals = [
        element["value"]
        for block in home.blocks
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"] == "approve_request"
    ]
    assert sorted(approvals) == sorted([first.id, second.id])
    refused = [c for c in stack.slack.calls_to("views.publish") if not c.ok]
    assert refused == []


async def test_every_views_update_carries_the_hash_of_the_view_it_replaces(
    sqlite_stack: LocalStack,
) -> None:
    """The loading form filled in (update and action), then an action chosen in it."""
    stack = sqlite_stack
    await stack.sender.command(DAVE, "C0INCIDENT", "update together-prod tc-h200-ondemand")
    await opened_modal(stack, DAVE, "gpu_update")
    await stack.sender.command(DAVE, "C0INCIDENT", "action e2e-delhi 101")
    view = await opened_modal(stack, DAVE, "gpu_action")
    await stack.sender.view_block_action(
        DAVE, view.id, action_id="action", block_id="action", selected_value="scale_cluster"
    )
    await stack.slack.wait_for(lambda: len(stack.slack.calls_to("views.update")) >= 3 or None)
    updates = stack.slack.calls_to("views.update")
    assert len(updates) == 3 and all(c.ok for c in updates), updates
    # each view's history: the versions it replaced, each with the hash it had then
    replaced = [
        stack.slack.views[str(c.args["view_id"])].history[n]["hash"]
        for c, n in zip(updates, (0, 0, 1), strict=True)
    ]
    assert [c.args.get("hash") for c in updates] == replaced
    assert updates[1].args["view_id"] == updates[2].args["view_id"] == view.id


async def test_a_refused_call_logs_slacks_explanation(
    sqlite_stack: LocalStack, caplog: pytest.LogCaptureFixture
) -> None:
    stack = sqlite_stack
    client = build_web_client(
        "xoxb-demo-0000-bot-token-gpuops", stack.runtime.settings.slack_api_url
    )
    twice = {
        "type": "actions",
        "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": t}, "action_id": "same"}
            for t in ("a", "b")
        ],
    }
    with (
        caplog.at_level(logging.WARNING, logger="bot.slack.messenger"),
        pytest.raises(SlackDeliveryError) as caught,
    ):
        await Messenger(client).publish_home(BOB, {"type": "home", "blocks": [twice]})
    assert caught.value.code == "invalid_arguments"
    assert (
        "slack views.publish failed: invalid_arguments — [ERROR] duplicate action_id 'same' "
        "[json-pointer:/blocks/0]"
    ) in caplog.text
