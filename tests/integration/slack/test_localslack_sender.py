"""SlackSender against a real slack_bolt AsyncApp served over aiohttp, with FakeSlack as the
Web API: what the sender sends must pass Bolt's signature check and reach the right
listeners with the fields Slack would give them."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond, AsyncSay
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack import (
    FakeEvent,
    FakeSlack,
    SenderInputError,
    SlackSender,
    Tamper,
    UserActed,
    View,
)

TOKEN = "xoxb-sender-test-token"
SECRET = "sender-test-signing-secret"
CHANNEL = "C0OPS"
ALICE, BOB = "UALICE", "UBOB"


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def option(value: str) -> dict[str, Any]:
    return {"text": plain(value.replace("_", " ")), "value": value}


def action_modal(extra_blocks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": "gpu_action",
        "notify_on_close": True,
        "private_metadata": json.dumps({"project": "p1", "cluster": "c1", "channel": CHANNEL}),
        "title": plain("Cluster action"),
        "submit": plain("Request"),
        "blocks": [
            {
                "type": "input",
                "block_id": "action",
                "dispatch_action": True,
                "label": plain("Action"),
                "element": {
                    "type": "static_select",
                    "action_id": "action",
                    "options": [option("scale_cluster"), option("restart_cluster")],
                },
            },
            {
                "type": "input",
                "block_id": "num_gpus",
                "label": plain("GPUs"),
                "element": {"type": "number_input", "action_id": "num_gpus", "initial_value": "8"},
            },
            {
                "type": "input",
                "block_id": "cluster_type",
                "optional": True,
                "label": plain("Type"),
                "element": {
                    "type": "static_select",
                    "action_id": "cluster_type",
                    "options": [option("KUBERNETES"), option("SLURM")],
                    "initial_option": option("SLURM"),
                },
            },
            {
                "type": "input",
                "block_id": "reservation_end_time",
                "optional": True,
                "label": plain("Ends"),
                "element": {"type": "datetimepicker", "action_id": "reservation_end_time"},
            },
            {
                "type": "input",
                "block_id": "ssh_key_ids",
                "optional": True,
                "label": plain("SSH keys"),
                "element": {
                    "type": "multi_static_select",
                    "action_id": "ssh_key_ids",
                    "options": [option("11"), option("12"), option("13")],
                },
            },
            *(extra_blocks or []),
        ],
    }


ADDITIONAL_NODES = {
    "type": "input",
    "block_id": "additional_nodes",
    "label": plain("Nodes to add"),
    "element": {"type": "number_input", "action_id": "additional_nodes"},
}


def approval_blocks(request_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Approve?"}},
        {
            "type": "actions",
            "block_id": "decision",
            "elements": [
                {
                    "type": "button",
                    "action_id": "approve_request",
                    "style": "primary",
                    "text": plain("Approve"),
                    "value": request_id,
                },
                {
                    "type": "button",
                    "action_id": "deny_request",
                    "text": plain("Deny"),
                    "value": request_id,
                },
            ],
        },
    ]


@dataclass
class Harness:
    fake: FakeSlack
    sender: SlackSender
    client: AsyncWebClient
    seen: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))


def add_listeners(app: AsyncApp, seen: dict[str, list[Any]]) -> None:
    @app.command("/gpu")
    async def gpu(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        seen["command"].append(body)
        if body["text"] == "action":
            await app.client.views_open(trigger_id=body["trigger_id"], view=action_modal())
        else:
            await respond(f"usage: /gpu {body['text']} is not a command")

    @app.action("approve_request")
    async def approve(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        await ack()
        seen["approve"].append(body)
        await respond(replace_original=True, text=f"approved by <@{body['user']['id']}>")

    @app.action("action")
    async def action_chosen(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        seen["action"].append(body)
        view = body["view"]
        await app.client.views_update(
            view_id=view["id"], hash=view["hash"], view=action_modal([ADDITIONAL_NODES])
        )

    @app.view("gpu_action")
    async def submitted(ack: AsyncAck, view: dict[str, Any]) -> None:
        values = view["state"]["values"]
        seen["submitted"].append(view)
        if int(values["num_gpus"]["num_gpus"]["value"]) > 64:
            await ack(response_action="errors", errors={"num_gpus": "At most 64 GPUs."})
        else:
            await ack()

    @app.view_closed("gpu_action")
    async def closed(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        seen["closed"].append(body)

    @app.event("app_mention")
    async def mentioned(event: dict[str, Any], say: AsyncSay, request: AsyncBoltRequest) -> None:
        seen["mention"].append(event)
        seen["retry"].append(
            (request.headers.get("x-slack-retry-num"), request.headers.get("x-slack-retry-reason"))
        )
        await say(text="here to help", thread_ts=event.get("thread_ts") or event["ts"])


async def serve(app: AsyncApp) -> tuple[web.AppRunner, str]:
    async def events(request: web.Request) -> web.Response:
        bolt_response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    web_app = web.Application()
    web_app.router.add_post("/slack/events", events)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/slack/events"


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    fake = FakeSlack(TOKEN, channels={CHANNEL: "gpu-ops"}, users={ALICE: "Alice", BOB: "Bob"})
    api_url = await fake.start()
    client = AsyncWebClient(token=TOKEN, base_url=api_url)
    app = AsyncApp(signing_secret=SECRET, client=client)
    harness = Harness(fake=fake, sender=SlackSender("", SECRET, fake), client=client)
    add_listeners(app, harness.seen)
    runner, events_url = await serve(app)
    harness.sender.events_url = events_url
    yield harness
    await harness.sender.aclose()
    await runner.cleanup()
    await fake.stop()


async def open_action_modal(h: Harness, user: str = ALICE) -> View:
    assert (await h.sender.command(user, CHANNEL, "action")).status == 200
    return await h.fake.wait_for(lambda: h.fake.last_view_for(user, open_only=True))


async def test_a_slash_command_is_acked_with_slack_fields(h: Harness) -> None:
    result = await h.sender.command(ALICE, CHANNEL, "show p1 c1")
    assert result.status == 200
    assert result.acked_in_time
    [body] = await h.fake.wait_for(lambda: h.seen["command"])
    assert body["command"] == "/gpu"
    assert body["text"] == "show p1 c1"
    assert (body["user_id"], body["user_name"]) == (ALICE, "alice")
    assert (body["channel_id"], body["channel_name"]) == (CHANNEL, "gpu-ops")
    assert (body["team_id"], body["api_app_id"]) == ("T0GPUOPS", "A0GPUOPS")
    assert body["response_url"].startswith(h.fake.base_url)


async def test_respond_to_a_command_is_an_ephemeral_for_the_user(h: Harness) -> None:
    await h.sender.command(ALICE, CHANNEL, "frobnicate")
    [ephemeral] = await h.fake.wait_for(lambda: h.fake.ephemerals_for(ALICE, CHANNEL))
    assert ephemeral.text == "usage: /gpu frobnicate is not a command"
    assert ephemeral.source == "response_url"
    assert h.fake.ephemerals_for(BOB) == []


async def test_the_typed_command_is_shown_to_subscribers(h: Harness) -> None:
    seen: list[FakeEvent] = []
    h.fake.subscribe(seen.append)
    await h.sender.command(ALICE, CHANNEL, "list")
    acted = [e for e in seen if isinstance(e, UserActed)]
    assert [(e.user, e.channel, e.text) for e in acted] == [(ALICE, CHANNEL, "/gpu list")]


async def test_a_button_click_reaches_the_action_listener(h: Harness) -> None:
    root = await h.client.chat_postMessage(channel=CHANNEL, text="request R1")
    prompt = await h.client.chat_postMessage(
        channel=CHANNEL, thread_ts=root["ts"], text="Approve?", blocks=approval_blocks("R1")
    )
    result = await h.sender.block_action(
        BOB, CHANNEL, action_id="approve_request", value="R1", message_ts=prompt["ts"]
    )
    assert result.status == 200
    [body] = await h.fake.wait_for(lambda: h.seen["approve"])
    assert body["type"] == "block_actions"
    assert body["user"]["id"] == BOB
    [action] = body["actions"]
    assert (action["action_id"], action["value"], action["type"]) == (
        "approve_request",
        "R1",
        "button",
    )
    assert (action["block_id"], action["text"]["text"]) == ("decision", "Approve")
    assert body["container"] == {
        "type": "message",
        "message_ts": prompt["ts"],
        "channel_id": CHANNEL,
        "is_ephemeral": False,
        "thread_ts": root["ts"],
    }
    assert body["message"]["blocks"][1]["elements"][0]["value"] == "R1"
    edited = await h.fake.wait_for(
        lambda: m if (m := h.fake.message(CHANNEL, prompt["ts"])) and m.edits else None
    )
    assert edited.text == f"approved by <@{BOB}>"


async def test_a_modal_submission_gets_the_apps_errors_back(h: Harness) -> None:
    view = await open_action_modal(h)
    assert view.callback_id == "gpu_action"
    result = await h.sender.view_submission(
        ALICE, view.id, {"action": "scale_cluster", "num_gpus": "100"}
    )
    assert result.status == 200
    assert result.json == {"response_action": "errors", "errors": {"num_gpus": "At most 64 GPUs."}}
    assert result.problems == ()
    stored = h.fake.views[view.id]
    assert stored.open
    assert stored.errors == {"num_gpus": "At most 64 GPUs."}


async def test_a_modal_submission_carries_slack_shaped_state(h: Harness) -> None:
    view = await open_action_modal(h)
    result = await h.sender.view_submission(
        ALICE,
        view.id,
        {
            "action": "scale_cluster",
            "num_gpus": "16",
            "reservation_end_time": "2026-12-31T00:00:00Z",
            "ssh_key_ids": ["11", "13"],
        },
    )
    assert (result.status, result.body) == (200, "")
    [submitted] = h.seen["submitted"]
    values = submitted["state"]["values"]
    assert values["action"]["action"]["selected_option"]["value"] == "scale_cluster"
    assert values["num_gpus"]["num_gpus"] == {"type": "number_input", "value": "16"}
    assert values["cluster_type"]["cluster_type"]["selected_option"]["value"] == "SLURM"
    assert values["reservation_end_time"]["reservation_end_time"] == {
        "type": "datetimepicker",
        "selected_date_time": 1798675200,
    }
    picked = values["ssh_key_ids"]["ssh_key_ids"]["selected_options"]
    assert [o["value"] for o in picked] == ["11", "13"]
    assert json.loads(submitted["private_metadata"])["channel"] == CHANNEL
    assert not h.fake.views[view.id].open
    assert h.fake.views[view.id].closed_reason == "submitted"


async def test_a_select_change_in_a_modal_lets_the_app_update_it(h: Harness) -> None:
    view = await open_action_modal(h)
    await h.sender.view_submission(ALICE, view.id, {"action": "scale_cluster", "num_gpus": "99"})
    result = await h.sender.view_block_action(
        ALICE, view.id, action_id="action", block_id="action", selected_value="restart_cluster"
    )
    assert result is not None
    assert result.status == 200
    [body] = await h.fake.wait_for(lambda: h.seen["action"])
    assert body["container"] == {"type": "view", "view_id": view.id}
    assert body["actions"][0]["selected_option"]["value"] == "restart_cluster"
    assert body["view"]["state"]["values"]["num_gpus"]["num_gpus"]["value"] == "99"
    updated = await h.fake.wait_for(
        lambda: h.fake.views[view.id] if h.fake.views[view.id].history else None
    )
    assert updated.blocks[-1]["block_id"] == "additional_nodes"
    state = updated.state_values()
    assert state["num_gpus"]["num_gpus"]["value"] == "99"
    assert state["action"]["action"]["selected_option"]["value"] == "restart_cluster"


async def test_an_input_without_dispatch_action_sends_nothing(h: Harness) -> None:
    view = await open_action_modal(h)
    result = await h.sender.view_block_action(
        ALICE, view.id, action_id="cluster_type", block_id="cluster_type", selected_value="SLURM"
    )
    assert result is None
    assert h.seen["action"] == []


async def test_slack_client_side_checks_refuse_bad_input(h: Harness) -> None:
    view = await open_action_modal(h)
    with pytest.raises(SenderInputError, match="Action"):
        await h.sender.view_submission(ALICE, view.id, {"num_gpus": "8"})
    with pytest.raises(SenderInputError, match="not an option"):
        await h.sender.view_submission(ALICE, view.id, {"action": "explode_cluster"})
    with pytest.raises(SenderInputError, match="number"):
        await h.sender.view_submission(ALICE, view.id, {"action": "scale_cluster", "num_gpus": "x"})
    with pytest.raises(SenderInputError, match="open for"):
        await h.sender.view_submission(BOB, view.id, {"action": "scale_cluster"})
    assert h.seen["submitted"] == []


async def test_closing_a_modal_notifies_the_app(h: Harness) -> None:
    view = await open_action_modal(h)
    result = await h.sender.view_closed(ALICE, view.id)
    assert result is not None
    assert result.status == 200
    [body] = await h.fake.wait_for(lambda: h.seen["closed"])
    assert (body["type"], body["view"]["id"]) == ("view_closed", view.id)
    assert not h.fake.views[view.id].open
    with pytest.raises(SenderInputError, match="closed"):
        await h.sender.view_submission(ALICE, view.id, {"action": "scale_cluster"})


async def test_a_mention_reaches_the_event_listener_and_the_channel(h: Harness) -> None:
    result = await h.sender.mention(ALICE, CHANNEL, "show p1 c1")
    assert result.status == 200
    [event] = await h.fake.wait_for(lambda: h.seen["mention"])
    assert event["type"] == "app_mention"
    assert event["text"] == "<@UBOT> show p1 c1"
    assert (event["user"], event["channel"]) == (ALICE, CHANNEL)
    assert "thread_ts" not in event
    [question, answer] = await h.fake.wait_for(
        lambda: len(t := h.fake.thread(CHANNEL, event["ts"])) == 2 and t
    )
    assert (question.user, question.text) == (ALICE, "<@UBOT> show p1 c1")
    assert (answer.user, answer.text, answer.thread_ts) == ("UBOT", "here to help", event["ts"])


async def test_a_mention_in_a_thread_carries_thread_ts(h: Harness) -> None:
    root = await h.client.chat_postMessage(channel=CHANNEL, text="request R1")
    await h.sender.mention(BOB, CHANNEL, "<@UBOT> help", thread_ts=root["ts"])
    [event] = await h.fake.wait_for(lambda: h.seen["mention"])
    assert event["thread_ts"] == root["ts"]
    assert event["text"] == "<@UBOT> help"
    replies = await h.fake.wait_for(
        lambda: len(r := h.fake.replies(CHANNEL, root["ts"])) == 2 and r
    )
    assert [m.user for m in replies] == [BOB, "UBOT"]


async def test_a_retried_event_is_the_same_envelope_with_retry_headers(h: Harness) -> None:
    first = await h.sender.mention(ALICE, CHANNEL, "help", event_id="Ev0001")
    await h.fake.wait_for(lambda: h.seen["mention"])
    again = await h.sender.mention(ALICE, CHANNEL, "help", event_id="Ev0001", retry_num=1)
    assert (first.status, again.status) == (200, 200)
    assert again.request_body == first.request_body
    events = await h.fake.wait_for(lambda: len(h.seen["mention"]) == 2 and h.seen["mention"])
    assert events[0]["ts"] == events[1]["ts"]
    assert h.seen["retry"] == [(None, None), (["1"], ["http_timeout"])]
    assert [m.user for m in h.fake.messages[CHANNEL] if m.user == ALICE] == [ALICE]


async def test_redeliver_resends_any_request(h: Harness) -> None:
    first = await h.sender.command(ALICE, CHANNEL, "list")
    second = await h.sender.redeliver(first, retry_num=2)
    assert second.status == 200
    bodies = await h.fake.wait_for(lambda: len(h.seen["command"]) == 2 and h.seen["command"])
    assert bodies[0]["response_url"] == bodies[1]["response_url"]


@pytest.mark.parametrize("tamper", [Tamper.WRONG_SIGNATURE, Tamper.STALE_TIMESTAMP])
async def test_a_bad_signature_or_stale_timestamp_is_refused(h: Harness, tamper: Tamper) -> None:
    command = await h.sender.command(ALICE, CHANNEL, "list", tamper=tamper)
    mention = await h.sender.mention(ALICE, CHANNEL, "help", tamper=tamper)
    assert (command.status, mention.status) == (401, 401)
    assert h.seen["command"] == []
    assert h.seen["mention"] == []


async def test_url_verification_echoes_the_challenge(h: Harness) -> None:
    result = await h.sender.url_verification("c-123")
    assert result.status == 200
    assert result.json == {"challenge": "c-123"}


@pytest.fixture
def h(harness: Harness) -> Harness:
    return harness
