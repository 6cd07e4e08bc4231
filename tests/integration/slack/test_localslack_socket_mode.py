"""Socket Mode in the stand-in, driven by slack_bolt's own ``AsyncSocketModeHandler``
(slack_sdk's aiohttp client): connect, hello, envelopes acknowledged by ``envelope_id``, late
acks treated as Slack does, refresh and dropped connections followed by a reconnect."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack import FakeSlack, SenderInputError, SlackSender, Tamper
from bot.local.slack.models import JsonDict
from bot.local.slack.sender import COMMAND_TIMEOUT_ERROR, SUBMISSION_ERROR

TOKEN = "xoxb-socket-token"
APP_TOKEN = "xapp-1-socket-app-token"
CHANNEL = "C0OPS"
ALICE, BOB = "UALICE", "UBOB"
LATE = 3.6  # past Slack's 3 s, with a margin for a loaded machine


def modal(title: str = "Scale") -> JsonDict:
    return {
        "type": "modal",
        "callback_id": "scale",
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": "Submit"},
        "blocks": [
            {
                "type": "input",
                "block_id": "num_gpus",
                "label": {"type": "plain_text", "text": "GPUs"},
                "element": {"type": "number_input", "action_id": "num_gpus", "initial_value": "8"},
            }
        ],
    }


@dataclass
class Harness:
    fake: FakeSlack
    sender: SlackSender
    client: AsyncWebClient
    delays: dict[str, float] = field(default_factory=dict)
    seen: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))


def build_app(h: Harness) -> AsyncApp:
    app = AsyncApp(client=h.client, request_verification_enabled=False)

    @app.command("/gpu")
    async def command(ack: AsyncAck, body: JsonDict) -> None:
        h.seen["command"].append(body)
        await asyncio.sleep(h.delays.get("command", 0.0))
        if body["text"] == "form":
            await app.client.views_open(trigger_id=body["trigger_id"], view=modal())
        await ack(text=f"got {body['text']}")

    @app.action("approve_request")
    async def approve(ack: AsyncAck, body: JsonDict) -> None:
        await ack()
        h.seen["approve"].append(body)

    @app.view("scale")
    async def submitted(ack: AsyncAck, view: JsonDict) -> None:
        h.seen["submitted"].append(view["id"])
        await asyncio.sleep(h.delays.get("view_submission", 0.0))
        await ack(response_action="update", view=modal(title="Checking…"))

    @app.event("app_mention")
    async def mentioned(event: JsonDict) -> None:
        h.seen["mention"].append(event)

    return app


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    fake = FakeSlack(
        TOKEN,
        channels={CHANNEL: "gpu-ops"},
        users={ALICE: "Alice", BOB: "Bob"},
        app_token=APP_TOKEN,
    )
    api_url = await fake.start()
    client = AsyncWebClient(token=TOKEN, base_url=api_url)
    harness = Harness(fake=fake, sender=SlackSender.over_socket_mode(fake), client=client)
    handler = AsyncSocketModeHandler(build_app(harness), APP_TOKEN, ping_interval=0.5)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    await fake.socket_mode.wait_connected()
    yield harness
    await handler.close_async()  # type: ignore[no-untyped-call]
    await harness.sender.aclose()
    await fake.stop()


async def open_form(h: Harness) -> str:
    result = await h.sender.command(ALICE, CHANNEL, "form")
    assert result.acked_in_time, result
    view = await h.fake.wait_for(lambda: h.fake.last_view_for(ALICE, open_only=True))
    return view.id


async def test_the_app_connects_with_the_app_token_and_gets_hello(h: Harness) -> None:
    [opened] = h.fake.calls_to("apps.connections.open")
    assert opened.ok
    assert h.fake.socket_mode.opened == 1 and len(h.fake.socket_mode.connections) == 1


async def test_a_command_is_acked_with_its_response_payload(h: Harness) -> None:
    result = await h.sender.command(ALICE, CHANNEL, "list")
    assert result.status == 200 and result.acked_in_time
    assert result.json == {"text": "got list"}
    [body] = h.seen["command"]
    assert (body["user_id"], body["channel_id"], body["text"]) == (ALICE, CHANNEL, "list")
    [ack] = h.fake.socket_mode.acks
    assert ack.payload == {"text": "got list"}


async def test_a_form_opens_and_its_submission_answer_is_applied(h: Harness) -> None:
    view_id = await open_form(h)
    result = await h.sender.view_submission(ALICE, view_id, {"num_gpus": "16"})
    assert result.acked_in_time and result.problems == ()
    assert result.json["response_action"] == "update"
    assert h.fake.views[view_id].view["title"]["text"] == "Checking…"


async def test_a_button_click_and_a_mention_arrive_as_envelopes(h: Harness) -> None:
    posted = await h.client.chat_postMessage(
        channel=CHANNEL,
        text="approve?",
        blocks=[
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve_request",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "value": "r1",
                    }
                ],
            }
        ],
    )
    click = await h.sender.block_action(
        BOB, CHANNEL, action_id="approve_request", value="r1", message_ts=posted["ts"]
    )
    mention = await h.sender.mention(ALICE, CHANNEL, "show p1 c1")
    assert click.acked_in_time and mention.acked_in_time and mention.retries == ()
    [approve] = h.seen["approve"]
    assert approve["actions"][0]["value"] == "r1"
    [event] = await h.fake.wait_for(lambda: h.seen["mention"])
    assert event["text"].endswith("show p1 c1")


async def test_a_late_ack_is_treated_as_on_slack(h: Harness) -> None:
    h.delays["command"] = LATE
    late_command = await h.sender.command(ALICE, CHANNEL, "list")
    assert late_command.late
    h.delays["command"] = 0.0
    view_id = await open_form(h)
    h.delays["view_submission"] = LATE
    late_submit = await h.sender.view_submission(ALICE, view_id)
    assert late_submit.late and h.fake.views[view_id].view["title"]["text"] == "Scale"
    assert [(e.where, e.text) for e in h.fake.errors_shown_to(ALICE)] == [
        ("command", f"/gpu {COMMAND_TIMEOUT_ERROR}"),
        ("view_submission", SUBMISSION_ERROR),
    ]


@pytest.mark.parametrize("reason", ["refresh_requested", "link_disabled"])
async def test_a_disconnect_message_makes_the_app_reconnect(h: Harness, reason: Any) -> None:
    assert await h.fake.socket_mode.disconnect(reason) == 1
    await h.fake.socket_mode.wait_connected(opened=2, within=10.0)
    assert len(h.fake.calls_to("apps.connections.open")) >= 2
    result = await h.sender.command(ALICE, CHANNEL, "after refresh")
    assert result.json == {"text": "got after refresh"}


async def test_a_dropped_connection_is_reopened_and_a_flow_continues(h: Harness) -> None:
    view_id = await open_form(h)
    assert h.fake.socket_mode.drop() == 1
    await h.fake.socket_mode.wait_connected(opened=2, within=10.0)
    result = await h.sender.view_submission(ALICE, view_id, {"num_gpus": "32"})
    assert result.acked_in_time and h.fake.views[view_id].view["title"]["text"] == "Checking…"


async def test_socket_mode_requests_cannot_be_tampered_with(h: Harness) -> None:
    with pytest.raises(SenderInputError, match="not signed"):
        await h.sender.command(ALICE, CHANNEL, "list", tamper=Tamper.WRONG_SIGNATURE)
    with pytest.raises(SenderInputError, match="url_verification"):
        await h.sender.url_verification("challenge")


# -- the protocol, seen from a bare WebSocket client ------------------------------------------


@pytest.fixture
async def bare_fake() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(
        TOKEN, channels={CHANNEL: "gpu-ops"}, users={ALICE: "Alice"}, app_token=APP_TOKEN
    )
    await fake.start()
    yield fake
    await fake.stop()


async def connection_url(fake: FakeSlack) -> str:
    app_client = AsyncWebClient(token=APP_TOKEN, base_url=fake.api_url)
    return str((await app_client.apps_connections_open(app_token=APP_TOKEN))["url"])


async def test_hello_envelopes_and_acks_have_slacks_shapes(bare_fake: FakeSlack) -> None:
    url = await connection_url(bare_fake)
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as socket:
        hello = await socket.receive_json(timeout=5)
        assert hello["type"] == "hello" and hello["num_connections"] == 1
        assert hello["connection_info"] == {"app_id": bare_fake.app_id}
        sender = SlackSender.over_socket_mode(bare_fake)
        sending = asyncio.create_task(sender.command(ALICE, CHANNEL, "help"))
        envelope = await socket.receive_json(timeout=5)
        assert envelope["type"] == "slash_commands" and envelope["accepts_response_payload"]
        assert envelope["payload"]["command"] == "/gpu" and envelope["payload"]["text"] == "help"
        await socket.send_json({"envelope_id": envelope["envelope_id"], "payload": {"text": "hi"}})
        result = await sending
        await sender.aclose()
    assert result.status == 200 and result.json == {"text": "hi"} and result.acked_in_time


async def test_an_unacked_event_comes_again_with_its_retry_attempt(bare_fake: FakeSlack) -> None:
    url = await connection_url(bare_fake)
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as socket:
        await socket.receive_json(timeout=5)  # hello
        sender = SlackSender.over_socket_mode(bare_fake, timeout=5.0)
        sending = asyncio.create_task(sender.mention(ALICE, CHANNEL, "show p1 c1"))
        first = await socket.receive_json(timeout=5)
        assert (first["type"], first["retry_attempt"], first["retry_reason"]) == (
            "events_api",
            0,
            "",
        )
        assert not first["accepts_response_payload"]
        retry = await socket.receive_json(timeout=5)  # nothing acked the first within 3 s
        assert (retry["retry_attempt"], retry["retry_reason"]) == (1, "http_timeout")
        assert retry["payload"]["event_id"] == first["payload"]["event_id"]
        assert retry["envelope_id"] != first["envelope_id"]
        for envelope in (first, retry):
            await socket.send_json({"envelope_id": envelope["envelope_id"]})
        result = await sending
        await sender.aclose()
    assert result.late and [r.acked_in_time for r in result.retries] == [True]


async def test_a_connection_url_is_good_once(bare_fake: FakeSlack) -> None:
    url = await connection_url(bare_fake)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as socket:
            assert (await socket.receive_json(timeout=5))["type"] == "hello"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(url)
    assert refused.value.status == 401
