"""The timeline file names people, over real HTTP against the Slack stand-in: each person's
display name by ``users.info`` (scope ``users:read``), looked up once per file; without the
scope (Slack's ``missing_scope``) the file is shared with people as their ids."""

from __future__ import annotations

from bot.local.demo.stack import LocalStack
from tests.integration.timeline.test_timeline import timeline_of
from tests.support.workflow_kit import BOB, CHANNEL, DAVE, request


async def test_people_are_named_once_per_file(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    await request(stack, DAVE, "action e2e-delhi 103 restart_workers")
    _, file, _ = await timeline_of(stack, BOB, CHANNEL)
    assert file.content is not None
    text = file.content.decode()
    assert "asked by bob (@U02BOB)" in text
    assert text.count("requested by dave (@U04DAVE)") == 2
    asked = sorted(str(c.args["user"]) for c in stack.slack.calls_to("users.info"))
    assert asked == sorted({BOB, DAVE})  # once each, however often they appear


async def test_without_users_read_people_are_their_ids(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.slack.scopes = stack.slack.scopes - {"users:read"}
    await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    _, file, _ = await timeline_of(stack, BOB, CHANNEL)
    assert file.content is not None
    text = file.content.decode()
    assert "asked by @U02BOB" in text and "requested by @U04DAVE:" in text
    refused = stack.slack.calls_to("users.info")
    assert [c.error for c in refused] == ["missing_scope"]  # the look-ups stop at the first
