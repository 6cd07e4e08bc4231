"""The Home tab is published with the hash of the tab last published for the person, over
real HTTP against the Slack stand-in: when the tab changed since (another replica published
it), Slack's ``hash_conflict`` makes the bot build it again and publish once more."""

from __future__ import annotations

from bot.local.demo.stack import LocalStack
from bot.local.slack.models import SlackCall
from bot.slack.messenger import build_web_client
from tests.support.workflow_kit import BOB

OTHER_REPLICA_TEXT = "published by another replica"


def publishes(stack: LocalStack) -> list[SlackCall]:
    return [c for c in stack.slack.calls_to("views.publish") if c.args.get("user_id") == BOB]


async def opened(stack: LocalStack, count: int) -> list[SlackCall]:
    """Bob opens his Home; wait until ``count`` publishes for him were answered."""
    result = await stack.sender.app_home_opened(BOB)
    assert result.status == 200, result
    return await stack.slack.wait_for(
        lambda: (calls := publishes(stack)) and len(calls) >= count and calls, within=15
    )


async def test_each_publish_sends_the_hash_slack_gave_the_last_one(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    first = (await opened(stack, 1))[0]
    assert first.ok and "hash" not in first.args  # nothing published for Bob before
    first_hash = stack.slack.homes[BOB].hash
    await stack.runtime.home_refresher.drain()
    stack.runtime.home_refresher.interval = 0  # the next open publishes at once
    second = (await opened(stack, 2))[1]
    assert second.ok and second.args["hash"] == first_hash


async def test_a_tab_changed_elsewhere_is_rebuilt_and_published_once_more(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    stack.runtime.home_refresher.interval = 0
    await opened(stack, 1)
    known_hash = stack.slack.homes[BOB].hash
    client = build_web_client(
        "xoxb-demo-0000-bot-token-gpuops", stack.runtime.settings.slack_api_url
    )
    text = {"type": "mrkdwn", "text": OTHER_REPLICA_TEXT}
    foreign = {"type": "home", "blocks": [{"type": "section", "text": text}]}
    await client.views_publish(user_id=BOB, view=foreign, hash=known_hash)
    calls = await opened(stack, 4)  # the bot's stale publish, then its one more
    await stack.runtime.home_refresher.drain()
    stale, again = calls[2], calls[3]
    assert (stale.args["hash"], stale.ok, stale.error) == (known_hash, False, "hash_conflict")
    assert again.ok and "hash" not in again.args
    assert len(publishes(stack)) == 4  # once more, never a loop
    home = stack.slack.homes[BOB]
    assert OTHER_REPLICA_TEXT not in str(home.blocks) and "gpuops" in str(home.blocks)
    # and the hash of that publish is the one sent next
    fresh = home.hash
    follow = (await opened(stack, 5))[4]
    assert follow.ok and follow.args["hash"] == fresh
