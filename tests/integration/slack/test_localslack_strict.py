"""The stand-in is as strict as Slack: late answers, DM and membership errors, Block Kit
limits, ``views.publish``, delayed Web API methods — over real HTTP, with a minimal Bolt app
receiving signed requests."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack import FakeSlack, SlackSender
from bot.local.slack.models import JsonDict, View
from bot.local.slack.sender import (
    COMMAND_TIMEOUT_ERROR,
    INTERACTION_ERROR,
    SUBMISSION_ERROR,
)

TOKEN = "xoxb-strict-token"
APP_TOKEN = "xapp-1-strict-app-token"
SECRET = "strict-signing-secret"
CHANNEL = "C0OPS"
PUBLIC_ELSEWHERE = "C0RANDOM"
PRIVATE_ELSEWHERE = "G0SECRET"
ALICE, BOB = "UALICE", "UBOB"
LATE = 3.6  # past Slack's 3 s, with a margin for a loaded machine


def modal(title: str = "Scale", **extra: Any) -> JsonDict:
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
        **extra,
    }


def home(text: str = "your approvals", count: int = 1) -> JsonDict:
    section = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    return {"type": "home", "blocks": [section] * count}


@dataclass
class Harness:
    fake: FakeSlack
    sender: SlackSender
    client: AsyncWebClient
    delays: dict[str, float] = field(default_factory=dict)
    """What the app's middleware sleeps before going on, by request kind."""
    seen: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))


def request_kind(body: JsonDict) -> str:
    if "command" in body:
        return "command"
    if body.get("type") == "event_callback":
        return f"event:{body['event'].get('type')}:{body['event'].get('text', '')}"
    return str(body.get("type"))


def add_listeners(app: AsyncApp, h: Harness) -> None:
    @app.middleware
    async def slow_or_failing(
        req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        kind = request_kind(req.body)
        retry = req.headers.get("x-slack-retry-num", [None])[0]
        h.seen["delivery"].append((kind, retry, req.headers.get("x-slack-retry-reason", [None])[0]))
        if kind.endswith(" fail"):
            return BoltResponse(status=500, body="")
        if retry is None:
            await asyncio.sleep(h.delays.get(kind, 0.0))
        return await next()

    @app.command("/gpu")
    async def command(ack: AsyncAck, body: JsonDict) -> None:
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
        await ack(response_action="update", view=modal(title="Checking…"))

    @app.event("app_mention")
    async def mentioned(event: JsonDict) -> None:
        h.seen["mention"].append(event)

    @app.event("app_home_opened")
    async def home_opened(event: JsonDict) -> None:
        h.seen["home"].append(event)
        await app.client.views_publish(user_id=event["user"], view=home())


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
async def h() -> AsyncIterator[Harness]:
    fake = FakeSlack(
        TOKEN,
        channels={CHANNEL: "gpu-ops"},
        not_member_channels={PUBLIC_ELSEWHERE: "random"},
        private_channels={PRIVATE_ELSEWHERE: "secret"},
        users={ALICE: "Alice", BOB: "Bob"},
        usergroups={"SONCALL": [ALICE]},
        app_token=APP_TOKEN,
    )
    api_url = await fake.start()
    client = AsyncWebClient(token=TOKEN, base_url=api_url)
    app = AsyncApp(signing_secret=SECRET, client=client, raise_error_for_unhandled_request=False)
    harness = Harness(fake=fake, sender=SlackSender("", SECRET, fake), client=client)
    add_listeners(app, harness)
    runner, events_url = await serve(app)
    harness.sender.events_url = events_url
    yield harness
    await harness.sender.aclose()
    await runner.cleanup()
    await fake.stop()


async def open_form(h: Harness) -> View:
    result = await h.sender.command(ALICE, CHANNEL, "form")
    assert result.acked_in_time, result
    return await h.fake.wait_for(lambda: h.fake.last_view_for(ALICE, open_only=True))


# -- late answers ------------------------------------------------------------------------


async def test_a_late_command_shows_the_person_operation_timeout(h: Harness) -> None:
    h.delays["command"] = LATE
    result = await h.sender.command(ALICE, CHANNEL, "list")
    assert result.status == 200 and result.late
    [shown] = h.fake.errors_shown_to(ALICE)
    assert (shown.where, shown.channel) == ("command", CHANNEL)
    assert shown.text == f"/gpu {COMMAND_TIMEOUT_ERROR}"


async def test_a_timely_command_shows_no_error(h: Harness) -> None:
    result = await h.sender.command(ALICE, CHANNEL, "list")
    assert result.acked_in_time and not result.late
    assert result.body == "got list"
    assert h.fake.errors_shown == []


async def test_a_late_submission_answer_is_ignored_and_the_modal_stays(h: Harness) -> None:
    view = await open_form(h)
    h.delays["view_submission"] = LATE
    result = await h.sender.view_submission(ALICE, view.id, {"num_gpus": "16"})
    assert result.late and result.json["response_action"] == "update"
    assert "Slack ignored the answer" in result.problems[0]
    stored = h.fake.views[view.id]
    assert stored.open and stored.history == []  # the late "update" did not happen
    assert stored.view["title"]["text"] == "Scale"
    [shown] = h.fake.errors_shown_to(ALICE)
    assert (shown.where, shown.text) == ("view_submission", SUBMISSION_ERROR)


async def test_pressing_submit_again_sends_the_same_view_id(h: Harness) -> None:
    view = await open_form(h)
    h.delays["view_submission"] = LATE
    await h.sender.view_submission(ALICE, view.id, {"num_gpus": "16"})
    h.delays["view_submission"] = 0.0
    again = await h.sender.view_submission(ALICE, view.id)
    assert again.acked_in_time and again.problems == ()
    assert h.seen["submitted"] == [view.id, view.id]
    assert h.fake.views[view.id].view["title"]["text"] == "Checking…"


async def test_a_late_button_answer_shows_a_warning(h: Harness) -> None:
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
    h.delays["block_actions"] = LATE
    result = await h.sender.block_action(
        BOB, CHANNEL, action_id="approve_request", value="r1", message_ts=posted["ts"]
    )
    assert result.late
    [shown] = h.fake.errors_shown_to(BOB)
    assert (shown.where, shown.channel, shown.text) == ("block_actions", CHANNEL, INTERACTION_ERROR)


async def test_a_late_event_is_retried_with_slacks_headers(h: Harness) -> None:
    h.delays[f"event:app_mention:<@{h.fake.bot_user_id}> slow"] = LATE
    result = await h.sender.mention(ALICE, CHANNEL, "slow")
    assert result.late
    [retry] = result.retries
    assert retry.acked_in_time
    assert [(r, reason) for _, r, reason in h.seen["delivery"]] == [
        (None, None),
        ("1", "http_timeout"),
    ]
    assert len(h.seen["mention"]) == 2  # the app sees it twice: deduplicating is its job
    assert h.fake.errors_shown == []  # nobody sees a failed event


async def test_a_failing_event_is_retried_three_times(h: Harness) -> None:
    result = await h.sender.mention(ALICE, CHANNEL, "fail")
    assert result.status == 500
    assert [r.status for r in result.retries] == [500, 500, 500]
    assert [(r, reason) for _, r, reason in h.seen["delivery"]] == [
        (None, None),
        ("1", "http_error"),
        ("2", "http_error"),
        ("3", "http_error"),
    ]


async def test_a_trigger_id_is_good_once_and_for_three_seconds(h: Harness) -> None:
    trigger = h.fake.issue_trigger_id(ALICE)
    await h.client.views_open(trigger_id=trigger, view=modal())
    with pytest.raises(SlackApiError, match="exchanged_trigger_id"):
        await h.client.views_open(trigger_id=trigger, view=modal())
    old = h.fake.issue_trigger_id(ALICE)
    h.fake._triggers[old].issued_at -= 3.01
    with pytest.raises(SlackApiError, match="expired_trigger_id"):
        await h.client.views_open(trigger_id=old, view=modal())


# -- where the bot may post ----------------------------------------------------------------


async def error_of(call: Awaitable[Any]) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call
    return str(caught.value.response["error"])


async def test_a_dm_channel_is_postable_only_once_it_exists(h: Harness) -> None:
    dm = h.fake.dm_channel(ALICE)
    assert await error_of(h.client.chat_postMessage(channel=dm, text="hi")) == "channel_not_found"
    opened = await h.client.conversations_open(users=ALICE)
    assert opened["channel"]["id"] == dm
    assert (await h.client.chat_postMessage(channel=dm, text="hi"))["channel"] == dm


async def test_posting_to_a_user_id_opens_the_dm(h: Harness) -> None:
    dm = h.fake.dm_channel(BOB)
    assert (await h.client.chat_postMessage(channel=BOB, text="hi"))["channel"] == dm
    assert (await h.client.chat_postMessage(channel=dm, text="again"))["channel"] == dm
    assert [m.text for m in h.fake.messages[dm]] == ["hi", "again"]


async def test_someone_elses_dm_is_channel_not_found(h: Harness) -> None:
    await h.sender.command(BOB, "D0BETWEENHUMANS", "list")
    error = await error_of(h.client.chat_postMessage(channel="D0BETWEENHUMANS", text="hi"))
    assert error == "channel_not_found"
    await h.sender.command(BOB, h.fake.dm_channel(BOB), "list")  # the bot's Messages tab
    assert (await h.client.chat_postMessage(channel=h.fake.dm_channel(BOB), text="hi"))["ok"]


async def test_channels_the_bot_is_not_in_fail_as_on_slack(h: Harness) -> None:
    public = await error_of(h.client.chat_postMessage(channel=PUBLIC_ELSEWHERE, text="hi"))
    private = await error_of(h.client.chat_postMessage(channel=PRIVATE_ELSEWHERE, text="hi"))
    unknown = await error_of(h.client.chat_postMessage(channel="C0NOWHERE", text="hi"))
    ephemeral = await error_of(
        h.client.chat_postEphemeral(channel=PRIVATE_ELSEWHERE, user=ALICE, text="hi")
    )
    assert (public, private, unknown, ephemeral) == (
        "not_in_channel",
        "channel_not_found",
        "channel_not_found",
        "channel_not_found",
    )


# -- Block Kit --------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
async def test_blocks_without_a_text_fallback_are_refused(h: Harness) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "summary"}}]
    error = await error_of(h.client.chat_postMessage(channel=CHANNEL, blocks=blocks))
    assert error == "no_text"
    posted = await h.client.chat_postMessage(channel=CHANNEL, text="summary", blocks=blocks)
    assert (
        await error_of(
            h.client.chat_update(channel=CHANNEL, ts=posted["ts"], text="", blocks=blocks)
        )
        == "no_text"
    )


async def test_a_response_url_post_with_blocks_needs_text(h: Harness) -> None:
    url = h.fake.new_response_url(CHANNEL, ALICE)
    blocks = [{"type": "divider"}]
    async with httpx.AsyncClient() as http:
        refused = await http.post(url, json={"blocks": blocks})
        accepted = await http.post(url, json={"blocks": blocks, "text": "a divider"})
    assert (refused.status_code, refused.text) == (400, "no_text")
    assert accepted.status_code == 200


async def test_modals_with_inputs_slack_refuses_are_invalid_arguments(h: Harness) -> None:
    [block] = modal()["blocks"]
    options = [{"text": {"type": "plain_text", "text": "A"}, "value": "a"}]
    bad_elements = [
        {"type": "plain_text_input", "action_id": "r", "max_length": 3001},
        {
            "type": "plain_text_input",
            "action_id": "r",
            "placeholder": {"type": "plain_text", "text": "p" * 151},
        },
        {
            "type": "static_select",
            "action_id": "s",
            "options": options,
            "initial_option": {"text": {"type": "plain_text", "text": "B"}, "value": "b"},
        },
    ]
    for element in bad_elements:
        view = modal(blocks=[{**block, "element": element}])
        trigger = h.fake.issue_trigger_id(ALICE)
        with pytest.raises(SlackApiError) as caught:
            await h.client.views_open(trigger_id=trigger, view=view)
        assert caught.value.response["error"] == "invalid_arguments"
        assert caught.value.response["response_metadata"]["messages"][0].startswith("[ERROR] ")


async def test_views_update_honours_the_hash(h: Harness) -> None:
    view = await open_form(h)
    opened_hash = view.hash
    first = await h.client.views_update(view_id=view.id, hash=opened_hash, view=modal(title="One"))
    error = await error_of(h.client.views_update(view_id=view.id, hash=opened_hash, view=modal()))
    assert error == "hash_conflict"
    await h.client.views_update(view_id=view.id, hash=first["view"]["hash"], view=modal())


# -- App Home ------------------------------------------------------------------------------


async def test_app_home_opened_reaches_the_app_and_it_publishes(h: Harness) -> None:
    result = await h.sender.app_home_opened(ALICE)
    assert result.acked_in_time
    published = await h.fake.wait_for(lambda: h.fake.homes.get(ALICE))
    [event] = h.seen["home"]
    assert (event["user"], event["tab"], event["channel"]) == (ALICE, "home", "DALICE")
    assert "view" not in event
    assert published.blocks[0]["text"]["text"] == "your approvals"
    await h.sender.app_home_opened(ALICE)
    await h.fake.wait_for(lambda: len(h.seen["home"]) == 2)
    assert h.seen["home"][1]["view"]["id"] == published.id


async def test_views_publish_checks_users_limits_and_hash(h: Harness) -> None:
    first = await h.client.views_publish(user_id=BOB, view=home())
    assert (await error_of(h.client.views_publish(user_id="UNOBODY", view=home()))) == (
        "user_not_found"
    )
    too_big = await error_of(h.client.views_publish(user_id=BOB, view=home(count=101)))
    assert too_big == "invalid_arguments"
    assert await error_of(h.client.views_publish(user_id=BOB, view=modal())) == (
        "invalid_arguments"
    )
    second = await h.client.views_publish(user_id=BOB, view=home("v2"), hash=first["view"]["hash"])
    stale = h.client.views_publish(user_id=BOB, view=home("v3"), hash=first["view"]["hash"])
    assert await error_of(stale) == "hash_conflict"
    assert second["view"]["id"] == first["view"]["id"]
    assert h.fake.homes[BOB].blocks[0]["text"]["text"] == "v2"
    assert len(h.fake.homes[BOB].history) == 1
    assert second["view"]["hash"] != first["view"]["hash"]
    # without a hash, a publish replaces whatever is there
    third = await h.client.views_publish(user_id=BOB, view=home("v4"))
    assert h.fake.homes[BOB].blocks[0]["text"]["text"] == "v4"
    assert third["view"]["hash"] == h.fake.homes[BOB].hash != second["view"]["hash"]


# -- a slow Web API and tokens ---------------------------------------------------------------


async def test_a_user_group_look_up_can_be_slow_and_rate_limited(h: Harness) -> None:
    h.fake.delay("usergroups.users.list", 0.6)
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await h.client.usergroups_users_list(usergroup="SONCALL")
    assert answer["users"] == [ALICE] and loop.time() - started >= 0.6
    h.fake.delay("usergroups.users.list", 0)
    h.fake.fail("usergroups.users.list", "ratelimited", retry_after=2)
    with pytest.raises(SlackApiError) as caught:
        await h.client.usergroups_users_list(usergroup="SONCALL")
    limited = caught.value.response
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "2"


async def test_the_app_token_opens_connections_and_nothing_else(h: Harness) -> None:
    app_client = AsyncWebClient(token=APP_TOKEN, base_url=h.fake.api_url)
    opened = await app_client.apps_connections_open(app_token=APP_TOKEN)
    assert opened["url"].startswith(f"ws://127.0.0.1:{h.fake.port}/socket-mode/")
    bot_opens = h.client.apps_connections_open(app_token=TOKEN)
    assert await error_of(bot_opens) == "not_allowed_token_type"
    app_posts = app_client.chat_postMessage(channel=CHANNEL, text="hi")
    assert await error_of(app_posts) == "not_allowed_token_type"


async def test_a_bare_user_id_in_a_fallback_is_noted_as_a_spec_problem(h: Harness) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "request r1"}}]
    await h.client.chat_postMessage(channel=CHANNEL, text=f"<@{ALICE}> asks", blocks=blocks)
    assert h.fake.spec_problems == []
    await h.client.chat_postMessage(channel=CHANNEL, text=f"{ALICE} asks", blocks=blocks)
    url = h.fake.new_response_url(CHANNEL, ALICE)
    async with httpx.AsyncClient() as http:
        await http.post(url, json={"text": f"approved by {BOB}"})
    assert h.fake.spec_problems == [
        f"the text '{ALICE} asks' names {ALICE} bare, not <@{ALICE}>",
        f"the text 'approved by {BOB}' names {BOB} bare, not <@{BOB}>",
    ]


async def test_a_thread_ts_naming_no_parent_is_posted_and_noted(h: Harness) -> None:
    root = await h.client.chat_postMessage(channel=CHANNEL, text="request r1")
    reply = await h.client.chat_postMessage(channel=CHANNEL, text="ok", thread_ts=root["ts"])
    assert h.fake.spec_problems == []
    await h.client.chat_postMessage(channel=CHANNEL, text="to a reply", thread_ts=reply["ts"])
    nowhere = await h.client.chat_postMessage(channel=CHANNEL, text="lost", thread_ts="1.000001")
    assert nowhere["ok"]  # Slack documents no error for it
    assert h.fake.spec_problems == [
        f"thread_ts {reply['ts']} names a reply, not its parent",
        f"thread_ts 1.000001 names no message in {CHANNEL}",
    ]


# -- the stand-in's older checks, each through its HTTP API -------------------------------------


async def test_only_the_bots_own_messages_can_be_updated(h: Harness) -> None:
    said = await h.fake.post_user_message(CHANNEL, ALICE, "mine")
    update = h.client.chat_update(channel=CHANNEL, ts=said.ts, text="the bot's now")
    assert await error_of(update) == "cant_update_message"


async def test_an_external_id_belongs_to_one_view(h: Harness) -> None:
    await h.client.views_open(
        trigger_id=h.fake.issue_trigger_id(ALICE), view=modal(external_id="x1")
    )
    again = h.client.views_open(
        trigger_id=h.fake.issue_trigger_id(BOB), view=modal(external_id="x1")
    )
    assert await error_of(again) == "duplicate_external_id"


async def test_a_body_that_is_not_json_is_invalid_json(h: Harness) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{h.fake.api_url}chat.postMessage",
            content=b"[1, 2]",
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
    assert answer.json() == {"ok": False, "error": "invalid_json"}


async def test_conversations_open_takes_one_known_user(h: Harness) -> None:
    assert await error_of(h.client.conversations_open(users="")) == "not_enough_users"
    both = h.client.conversations_open(users=f"{ALICE},{BOB}")
    assert await error_of(both) == "method_not_supported_for_mpim"
    assert await error_of(h.client.conversations_open(users="UNOBODY")) == "user_not_found"


async def test_response_urls_expire_run_out_and_want_json(h: Harness) -> None:
    url = h.fake.new_response_url(CHANNEL, ALICE)
    async with httpx.AsyncClient() as http:
        not_json = await http.post(url, content=b"text=hi")
        uses = [await http.post(url, json={"text": f"#{n}"}) for n in range(6)]
        unknown = await http.post(f"{h.fake.base_url}/response/nope", json={"text": "hi"})
        old = h.fake.new_response_url(CHANNEL, ALICE)
        token = old.rsplit("/", 1)[-1]
        h.fake._response_targets[token].created_at -= 30 * 60 + 1
        expired = await http.post(old, json={"text": "hi"})
    assert (not_json.status_code, not_json.text) == (400, "invalid_payload")
    assert [u.status_code for u in uses] == [200] * 5 + [404]
    assert uses[-1].text == "used_url"
    assert (unknown.status_code, unknown.text) == (404, "no_service")
    assert (expired.status_code, expired.text) == (404, "expired_url")


async def test_a_token_in_a_json_body_is_not_auth_as_slack_says(h: Harness) -> None:
    url = f"{h.fake.api_url}chat.postMessage"
    async with httpx.AsyncClient() as http:
        in_json = await http.post(url, json={"token": TOKEN, "channel": CHANNEL, "text": "a"})
        in_form = await http.post(url, data={"token": TOKEN, "channel": CHANNEL, "text": "b"})
        header = {"Authorization": f"Bearer {TOKEN}"}
        wrong_in_json = {"token": "xoxb-wrong", "channel": CHANNEL, "text": "c"}
        with_header = await http.post(url, json=wrong_in_json, headers=header)
    assert in_json.json() == {"ok": False, "error": "not_authed"}
    assert in_form.json()["ok"] is True  # a form-encoded body may carry it
    assert with_header.json()["ok"] is True  # the header is the token; the body's is ignored
    assert [m.text for m in h.fake.messages[CHANNEL]] == ["b", "c"]
