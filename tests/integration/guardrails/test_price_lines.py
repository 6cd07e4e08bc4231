"""The price of a change in its request message (the preview) and its approval prompt, over
real HTTP: an hourly E2E plan gives a number, a committed plan says so, no plan and Together
(whose API has no price) give no line."""

from __future__ import annotations

from bot.local.demo.stack import LocalStack
from bot.local.slack.models import Message
from tests.support.workflow_kit import DAVE, Opened, readable_text, request


def shown(stack: LocalStack, opened: Opened) -> tuple[str, str]:
    """The text of the request's root message and of its approval prompt."""
    root = stack.slack.message(opened.channel, opened.root_ts)
    assert root is not None and opened.prompt_ts is not None
    prompt = stack.slack.message(opened.channel, opened.prompt_ts)
    assert isinstance(prompt, Message)
    return readable_text(root), readable_text(prompt)


async def test_hourly_committed_and_missing_plans_in_preview_and_prompt(
    stack: LocalStack,
) -> None:
    hourly = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=2")
    committed = await request(stack, DAVE, "action e2e-delhi 106 scale_cluster additional_nodes=1")
    no_plan = await request(stack, DAVE, "action e2e-delhi 104 scale_cluster additional_nodes=3")

    line = "≈ +₹3,990.40/h: 2 more nodes at ₹1,995.20/h each, hourly plan"
    for text in shown(stack, hourly):
        assert f":moneybag: {line}" in text
    for text in shown(stack, committed):
        assert "1 more node on a committed plan (30 days)" in text
        assert "/h" not in text.split(":moneybag:")[1]
    for text in shown(stack, no_plan):
        assert ":moneybag:" not in text


async def test_together_changes_have_no_price_line(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    together = await request(stack, DAVE, "update together-prod tc-h100-reserved num_gpus=8")
    for text in shown(stack, together):
        assert ":moneybag:" not in text
