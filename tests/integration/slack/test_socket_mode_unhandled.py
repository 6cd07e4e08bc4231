"""Over Socket Mode, gpuops's handler acknowledges what no listener wants (a form or a
command of another version), as its HTTP endpoint answers 200: Bolt alone sends nothing for
its 404, and Slack then shows the person an error and keeps the modal open."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack import FakeSlack, SlackSender
from bot.local.slack.models import JsonDict
from bot.slack.deadline import DeadlineSocketModeHandler

TOKEN = "xoxb-unhandled-token"
APP_TOKEN = "xapp-1-unhandled-app-token"
CHANNEL = "C0OPS"
ALICE = "UALICE"

ORPHAN_MODAL: JsonDict = {
    "type": "modal",
    "callback_id": "form_of_an_older_version",
    "title": {"type": "plain_text", "text": "Old form"},
    "submit": {"type": "plain_text", "text": "Submit"},
    "blocks": [
        {
            "type": "input",
            "block_id": "note",
            "label": {"type": "plain_text", "text": "Note"},
            "element": {"type": "plain_text_input", "action_id": "note"},
        }
    ],
}


@pytest.fixture
async def slack() -> AsyncIterator[tuple[FakeSlack, SlackSender]]:
    fake = FakeSlack(
        TOKEN, channels={CHANNEL: "gpu-ops"}, users={ALICE: "Alice"}, app_token=APP_TOKEN
    )
    api_url = await fake.start()
    client = AsyncWebClient(token=TOKEN, base_url=api_url)
    app = AsyncApp(client=client, request_verification_enabled=False)

    @app.command("/gpu")
    async def opens_a_form_nobody_handles(ack: AsyncAck, body: JsonDict) -> None:
        await client.views_open(trigger_id=body["trigger_id"], view=ORPHAN_MODAL)
        await ack()

    handler = DeadlineSocketModeHandler(app, APP_TOKEN, ping_interval=0.5)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await fake.socket_mode.wait_connected()
    sender = SlackSender.over_socket_mode(fake)
    yield fake, sender
    await handler.close_async()  # type: ignore[no-untyped-call]
    await sender.aclose()
    await fake.stop()


async def test_a_submission_no_listener_wants_is_acknowledged_and_closes(
    slack: tuple[FakeSlack, SlackSender],
) -> None:
    fake, sender = slack
    assert (await sender.command(ALICE, CHANNEL, "form")).acked_in_time
    view = await fake.wait_for(lambda: fake.last_view_for(ALICE, open_only=True))
    result = await sender.view_submission(ALICE, view.id, {"note": "hello"})
    assert result.acked_in_time and result.problems == ()
    assert fake.last_view_for(ALICE, open_only=True) is None  # an empty ack closes it


async def test_a_command_no_listener_wants_is_acknowledged(
    slack: tuple[FakeSlack, SlackSender],
) -> None:
    fake, sender = slack
    result = await sender.command(ALICE, CHANNEL, "list", command="/gpu-old")
    assert result.acked_in_time and result.status == 200
    assert len(fake.socket_mode.acks) == 1
