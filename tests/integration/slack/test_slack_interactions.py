"""One way to answer a person who acted, over real HTTP against the Slack stand-in: the
routes are tried in turn, a failed response_url falls through to the next, a public reply
goes to the channel, a form that cannot open is explained, and a modal's metadata is read
back the same way wherever it is read; and every message button reads its click one way."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.answers import error, notice
from bot.local.demo.stack import LocalStack
from bot.local.slack import FakeSlack
from bot.slack.interactions import (
    DirectMessage,
    Post,
    ResponseUrl,
    Whisper,
    modal_metadata,
    open_form,
    tell,
)
from bot.slack.messenger import Messenger, build_web_client
from bot.slack.render.primitives import notice as render_notice
from handlers.clicks import UNREADABLE

TOKEN = "xoxb-test-token-123"
MEMBER = "C0OPS"
NOT_MEMBER = "C0SECRET"
ALICE = "UALICE"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(
        TOKEN,
        channels={MEMBER: "gpu-ops"},
        not_member_channels={NOT_MEMBER: "secret-ops"},
        users={ALICE: "Alice"},
    )
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def messenger(slack: FakeSlack) -> Messenger:
    return Messenger(build_web_client(TOKEN, slack.api_url))


def dm_texts(slack: FakeSlack) -> list[str]:
    return [m.text for m in slack.messages.get(slack.dm_channel(ALICE), [])]


@pytest.mark.parametrize(
    ("channel", "whispered", "dms"),
    [(MEMBER, ["done"], []), (NOT_MEMBER, [], ["done"])],
    ids=["a whisper where the bot is", "a DM where it is not"],
)
async def test_the_first_route_that_works_delivers(
    slack: FakeSlack, messenger: Messenger, channel: str, whispered: list[str], dms: list[str]
) -> None:
    routes = Whisper(messenger, channel, ALICE), DirectMessage(messenger, ALICE)
    assert await tell(notice("done"), *routes) is True
    assert [e.text for e in slack.ephemerals_for(ALICE)] == whispered
    assert dm_texts(slack) == dms


async def test_a_post_is_seen_by_the_channel_in_its_thread(
    slack: FakeSlack, messenger: Messenger
) -> None:
    root = await messenger.post(MEMBER, render_notice("the request"))
    assert await tell(notice("for all", public=True), Post(messenger, MEMBER, root))
    [reply] = slack.replies(MEMBER, root)
    assert reply.text == "for all" and slack.ephemerals_for(ALICE) == []


async def test_a_failed_response_url_falls_through_to_the_next_route(
    slack: FakeSlack, messenger: Messenger
) -> None:
    async def broken(**_: Any) -> None:
        raise ConnectionError("response_url unreachable")

    told = await tell(error("nope"), ResponseUrl(broken), DirectMessage(messenger, ALICE))
    assert told is True
    assert dm_texts(slack) == ["nope"]


async def test_the_response_url_shows_a_public_reply_to_the_channel() -> None:
    sent: list[dict[str, Any]] = []

    async def respond(**kwargs: Any) -> None:
        sent.append(kwargs)

    assert await tell(notice("for all", public=True), ResponseUrl(respond))
    assert await tell(notice("for you"), ResponseUrl(respond))
    assert [(s["response_type"], s["text"]) for s in sent] == [
        ("in_channel", "for all"),
        ("ephemeral", "for you"),
    ]
    assert all(s["replace_original"] is False for s in sent)


async def test_no_route_that_works_is_logged_as_an_error(
    slack: FakeSlack, messenger: Messenger, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="bot.slack.interactions"):
        told = await tell(notice("lost"), Whisper(messenger, NOT_MEMBER, ALICE), about="a test")
    assert told is False
    assert "could not deliver a test (Whisper: not_in_channel)" in caplog.text


async def test_a_form_without_a_trigger_is_explained_by_the_routes(
    slack: FakeSlack, messenger: Messenger
) -> None:
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Deny"}, "blocks": []}
    opened = await open_form(messenger, None, view, "deny", DirectMessage(messenger, ALICE))
    assert opened is False
    assert dm_texts(slack) == ["I could not open the deny form (no_trigger); try again."]


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        (
            '{"channel": "C0OPS", "request_id": "GPU-1"}',
            {"channel": "C0OPS", "request_id": "GPU-1"},
        ),
        ('{"channel": "C0OPS", "thread_ts": null, "shown": {"a": "1"}}', {"channel": "C0OPS"}),
        ("not json", {}),
        ('["a list"]', {}),
        ("", {}),
        (None, {}),
    ],
)
def test_modal_metadata_keeps_the_text_values_of_a_json_object(
    raw: str | None, read: dict[str, str]
) -> None:
    assert modal_metadata(raw) == read


@pytest.mark.parametrize("action_id", ["approve_request", "revert_request", "reject_remediation"])
async def test_an_unreadable_click_is_told_so_through_the_response_url(
    sqlite_stack: LocalStack, action_id: str
) -> None:
    """Every message button's listener reads its click one way (on_click): one without a
    value goes no further and the person is told, through the click's response_url."""
    stack = sqlite_stack
    user, channel = "U04DAVE", "C0INCIDENT"
    result = await stack.sender.block_action(
        user, channel, action_id=action_id, value="", message_ts="1700000000.000100"
    )
    assert result.status == 200
    told = await stack.slack.wait_for(lambda: next(iter(stack.slack.ephemerals_for(user)), None))
    assert told.source == "response_url" and told.text == UNREADABLE
    assert await stack.runtime.store.list_requests() == []
