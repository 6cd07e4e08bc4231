"""FakeSlack over real HTTP, driven by slack_sdk's own async clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.local.slack import (
    EphemeralPosted,
    FakeEvent,
    FakeSlack,
    HomePublished,
    MessageEdited,
    MessagePosted,
    ViewOpened,
)
from bot.local.slack.server import BOT_SCOPES

TOKEN = "xoxb-test-token-123"
CHANNEL = "C0OPS"
PRIVATE = "C0SECRET"


def section(text: str, block_id: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "section", "text": {"type": "mrkdwn", "text": text}}
    if block_id is not None:
        block["block_id"] = block_id
    return block


def modal(title: str = "Update cluster", **extra: Any) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": "gpu_update",
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": "Submit"},
        "private_metadata": '{"project": "p1"}',
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


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(
        TOKEN,
        channels={CHANNEL: "gpu-ops"},
        not_member_channels={PRIVATE: "secret-ops"},
        users={"UALICE": "Alice", "UBOB": "Bob"},
        usergroups={"SONCALL": ["UALICE", "UBOB"]},
    )
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=fake.api_url)


async def test_start_returns_the_api_url_on_loopback(fake: FakeSlack) -> None:
    assert fake.api_url == f"http://127.0.0.1:{fake.port}/api/"


async def test_auth_test_describes_the_bot(client: AsyncWebClient) -> None:
    answer = await client.auth_test()
    assert answer["user_id"] == "UBOT"
    assert answer["team_id"] == "T0GPUOPS"
    assert answer["bot_id"] == "B0GPUOPS"


async def test_a_wrong_token_is_invalid_auth(fake: FakeSlack) -> None:
    with pytest.raises(SlackApiError) as caught:
        await AsyncWebClient(token="xoxb-wrong", base_url=fake.api_url).auth_test()
    assert caught.value.response["error"] == "invalid_auth"


async def test_a_missing_token_is_not_authed(fake: FakeSlack) -> None:
    with pytest.raises(SlackApiError) as caught:
        await AsyncWebClient(base_url=fake.api_url).auth_test()
    assert caught.value.response["error"] == "not_authed"


async def test_the_token_is_never_recorded(fake: FakeSlack, client: AsyncWebClient) -> None:
    await client.chat_postMessage(channel=CHANNEL, text="hi")
    await client.api_call("auth.test", data={"token": TOKEN})
    assert TOKEN not in json.dumps([c.model_dump() for c in fake.calls])


async def test_post_message_gives_unique_increasing_ts(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    answers = [await client.chat_postMessage(channel=CHANNEL, text=f"m{i}") for i in range(5)]
    stamps = [a["ts"] for a in answers]
    assert stamps == sorted(stamps, key=float)
    assert len(set(stamps)) == 5
    assert answers[0]["channel"] == CHANNEL
    assert answers[0]["message"]["text"] == "m0"
    assert [m.text for m in fake.messages[CHANNEL]] == ["m0", "m1", "m2", "m3", "m4"]


async def test_thread_replies_land_in_the_thread(fake: FakeSlack, client: AsyncWebClient) -> None:
    root = await client.chat_postMessage(channel=CHANNEL, text="root")
    await client.chat_postMessage(channel=CHANNEL, text="one", thread_ts=root["ts"])
    await client.chat_postMessage(channel=CHANNEL, text="two", thread_ts=root["ts"])
    await client.chat_postMessage(channel=CHANNEL, text="elsewhere")
    assert [m.text for m in fake.thread(CHANNEL, root["ts"])] == ["root", "one", "two"]
    assert [m.text for m in fake.replies(CHANNEL, root["ts"])] == ["one", "two"]
    stored_root = fake.message(CHANNEL, root["ts"])
    assert stored_root is not None
    assert stored_root.reply_count == 2


async def test_posting_where_the_bot_is_not_a_member_is_not_in_channel(
    client: AsyncWebClient,
) -> None:
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=PRIVATE, text="hi")
    assert caught.value.response["error"] == "not_in_channel"


async def test_membership_can_change_at_run_time(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.set_bot_member(CHANNEL, False)
    with pytest.raises(SlackApiError, match="not_in_channel"):
        await client.chat_postMessage(channel=CHANNEL, text="hi")
    fake.set_bot_member(CHANNEL, True)
    assert (await client.chat_postMessage(channel="#gpu-ops", text="hi"))["channel"] == CHANNEL


async def test_an_unknown_channel_is_channel_not_found(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel="C0NOPE", text="hi")
    assert caught.value.response["error"] == "channel_not_found"


async def test_a_post_to_a_user_goes_to_their_dm(fake: FakeSlack, client: AsyncWebClient) -> None:
    answer = await client.chat_postMessage(channel="UALICE", text="psst")
    assert answer["channel"] == fake.dm_channel("UALICE") == "DALICE"
    assert fake.messages["DALICE"][0].text == "psst"


async def test_a_post_without_content_is_no_text(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError, match="no_text"):
        await client.api_call("chat.postMessage", json={"channel": CHANNEL})


async def test_blocks_over_slack_limits_are_invalid_blocks(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=CHANNEL, text="x", blocks=[section("y" * 3001)])
    assert caught.value.response["error"] == "invalid_blocks"
    assert "3001" in caught.value.response["errors"][0]


async def test_form_encoded_blocks_are_decoded(fake: FakeSlack, client: AsyncWebClient) -> None:
    blocks = [section("*hello*", block_id="b1")]
    await client.api_call(
        "chat.postMessage", data={"channel": CHANNEL, "text": "hello", "blocks": json.dumps(blocks)}
    )
    assert fake.calls[-1].args["blocks"] == blocks
    assert fake.messages[CHANNEL][0].blocks == blocks


async def test_blocks_get_block_ids_like_slack_gives_them(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    answer = await client.chat_postMessage(channel=CHANNEL, text="x", blocks=[section("y")])
    assert answer["message"]["blocks"][0]["block_id"]


async def test_update_edits_and_keeps_history(fake: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="pending")
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="approved")
    answer = await client.chat_update(
        channel=CHANNEL, ts=posted["ts"], text="done", blocks=[section("done")]
    )
    assert answer["ts"] == posted["ts"]
    message = fake.message(CHANNEL, posted["ts"])
    assert message is not None
    assert message.text == "done"
    assert [e.text for e in message.edits] == ["pending", "approved"]
    assert [(v.text, v.source) for v in message.versions] == [
        ("pending", "posted"),
        ("approved", "chat.update"),
        ("done", "chat.update"),
    ]


async def test_text_over_40000_characters_is_truncated_with_a_warning(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    longest, too_long = "a" * 40_000, "b" * 40_001
    posted = await client.chat_postMessage(channel=CHANNEL, text=longest)
    assert "response_metadata" not in posted.data
    updated = await client.chat_update(channel=CHANNEL, ts=posted["ts"], text=too_long)
    second = await client.chat_postMessage(channel=CHANNEL, text=too_long)
    ephemeral = await client.chat_postEphemeral(channel=CHANNEL, user="UALICE", text=too_long)
    for answer in (updated, second, ephemeral):
        assert answer["response_metadata"]["warnings"] == ["message_truncated"]
        assert "[WARN] Your message was truncated" in answer["response_metadata"]["messages"][0]
    kept = [fake.message(CHANNEL, ts) for ts in (posted["ts"], second["ts"])]
    assert [m.text if m else None for m in kept] == ["b" * 40_000, "b" * 40_000]
    assert [e.text for e in fake.ephemerals_for("UALICE")] == ["b" * 40_000]


async def test_updating_an_unknown_message_is_message_not_found(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError, match="message_not_found"):
        await client.chat_update(channel=CHANNEL, ts="123.456", text="x")


async def test_ephemeral_needs_a_user_and_returns_message_ts(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    answer = await client.chat_postEphemeral(channel=CHANNEL, user="UALICE", text="only you")
    assert answer["message_ts"]
    [ephemeral] = fake.ephemerals_for("UALICE")
    assert (ephemeral.channel, ephemeral.text, ephemeral.source) == (
        CHANNEL,
        "only you",
        "chat.postEphemeral",
    )
    assert fake.ephemerals_for("UBOB") == []
    with pytest.raises(SlackApiError, match="user_not_in_channel"):
        await client.chat_postEphemeral(channel=CHANNEL, user="UNOBODY", text="x")


async def test_get_permalink_points_at_the_message(client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="x")
    answer = await client.chat_getPermalink(channel=CHANNEL, message_ts=posted["ts"])
    assert answer["permalink"].endswith(f"/archives/{CHANNEL}/p{posted['ts'].replace('.', '')}")
    with pytest.raises(SlackApiError, match="message_not_found"):
        await client.chat_getPermalink(channel=CHANNEL, message_ts="1.2")


async def test_views_open_needs_an_issued_trigger(fake: FakeSlack, client: AsyncWebClient) -> None:
    trigger = fake.issue_trigger_id("UALICE")
    answer = await client.views_open(trigger_id=trigger, view=modal())
    view = answer["view"]
    assert view["id"].startswith("V")
    assert view["hash"]
    assert view["callback_id"] == "gpu_update"
    assert view["state"] == {
        "values": {"num_gpus": {"num_gpus": {"type": "number_input", "value": "8"}}}
    }
    stored = fake.last_view_for("UALICE")
    assert stored is not None
    assert stored.open
    assert stored.private_metadata == '{"project": "p1"}'
    with pytest.raises(SlackApiError, match="exchanged_trigger_id"):
        await client.views_open(trigger_id=trigger, view=modal())
    with pytest.raises(SlackApiError, match="invalid_trigger_id"):
        await client.views_open(trigger_id="12.34.made-up", view=modal())


async def test_an_old_trigger_is_expired(client: AsyncWebClient, fake: FakeSlack) -> None:
    fake.trigger_ttl = 0.0
    with pytest.raises(SlackApiError, match="expired_trigger_id"):
        await client.views_open(trigger_id=fake.issue_trigger_id("UALICE"), view=modal())


async def test_an_invalid_modal_is_invalid_arguments(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    with pytest.raises(SlackApiError) as caught:
        await client.views_open(
            trigger_id=fake.issue_trigger_id("UALICE"), view=modal(title="x" * 25)
        )
    assert caught.value.response["error"] == "invalid_arguments"
    assert "title" in caught.value.response["response_metadata"]["messages"][0]


async def test_an_external_id_over_255_characters_is_invalid_arguments(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    longest, too_long = modal(external_id="e" * 255), modal(external_id="e" * 256)
    opened = await client.views_open(trigger_id=fake.issue_trigger_id("UALICE"), view=longest)
    attempts = [
        client.views_open(trigger_id=fake.issue_trigger_id("UALICE"), view=too_long),
        client.views_push(trigger_id=fake.issue_trigger_id("UALICE"), view=too_long),
        client.views_update(view_id=opened["view"]["id"], view=too_long),
    ]
    for attempt in attempts:
        with pytest.raises(SlackApiError) as caught:
            await attempt
        assert caught.value.response["error"] == "invalid_arguments"
        assert "external_id" in caught.value.response["response_metadata"]["messages"][0]
    assert [v.external_id for v in fake.views.values()] == ["e" * 255]


async def test_views_update_by_id_and_external_id_with_hash_check(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    opened = await client.views_open(
        trigger_id=fake.issue_trigger_id("UALICE"), view=modal(external_id="req-1")
    )
    view_id, first_hash = opened["view"]["id"], opened["view"]["hash"]
    updated = await client.views_update(
        view_id=view_id, hash=first_hash, view=modal(title="Step 2", external_id="req-1")
    )
    assert updated["view"]["title"]["text"] == "Step 2"
    await client.views_update(external_id="req-1", view=modal(title="Step 3"))
    assert [v["title"]["text"] for v in fake.views[view_id].history] == ["Update cluster", "Step 2"]
    with pytest.raises(SlackApiError, match="hash_conflict"):
        await client.views_update(view_id=view_id, hash=first_hash, view=modal())
    with pytest.raises(SlackApiError, match="not_found"):
        await client.views_update(view_id="VNOPE", view=modal())


async def test_views_push_stacks_on_the_open_modal(fake: FakeSlack, client: AsyncWebClient) -> None:
    opened = await client.views_open(trigger_id=fake.issue_trigger_id("UALICE"), view=modal())
    pushed = await client.views_push(
        trigger_id=fake.issue_trigger_id("UALICE"), view=modal(title="Confirm")
    )
    assert pushed["view"]["previous_view_id"] == opened["view"]["id"]
    assert [v.id for v in fake.open_views_for("UALICE")] == [
        opened["view"]["id"],
        pushed["view"]["id"],
    ]


async def test_directory_lookups(client: AsyncWebClient) -> None:
    assert (await client.usergroups_users_list(usergroup="SONCALL"))["users"] == [
        "UALICE",
        "UBOB",
    ]
    with pytest.raises(SlackApiError, match="no_such_subteam"):
        await client.usergroups_users_list(usergroup="SNOPE")
    user = (await client.users_info(user="UALICE"))["user"]
    assert user["profile"]["display_name"] == "Alice"
    with pytest.raises(SlackApiError, match="user_not_found"):
        await client.users_info(user="UNOPE")
    channel = (await client.conversations_info(channel=CHANNEL))["channel"]
    assert (channel["name"], channel["is_member"]) == ("gpu-ops", True)
    assert (await client.conversations_info(channel=PRIVATE))["channel"]["is_member"] is False
    with pytest.raises(SlackApiError, match="channel_not_found"):
        await client.conversations_info(channel="C0NOPE")
    members = (await client.conversations_members(channel=CHANNEL))["members"]
    assert set(members) == {"UBOT", "UALICE", "UBOB"}


async def test_a_method_without_its_scope_is_missing_scope_as_slack_answers(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    fake.scopes = BOT_SCOPES - {"channels:read", "groups:read"}
    with pytest.raises(SlackApiError) as refused:
        await client.conversations_info(channel=CHANNEL)
    assert refused.value.response["error"] == "missing_scope"
    assert refused.value.response["needed"] == "channels:read,groups:read,im:read,mpim:read"
    assert refused.value.response["provided"] == ",".join(sorted(fake.scopes))
    fake.scopes = frozenset({"groups:read"})  # the method lets it in; a public channel not
    with pytest.raises(SlackApiError, match="missing_scope") as public:
        await client.conversations_info(channel=CHANNEL)
    assert public.value.response["needed"] == "channels:read"
    fake.scopes = BOT_SCOPES - {"chat:write"}
    with pytest.raises(SlackApiError, match="missing_scope"):
        await client.chat_postMessage(channel=CHANNEL, text="hi")
    assert fake.messages.get(CHANNEL, []) == []
    fake.scopes = BOT_SCOPES - {"channels:read", "groups:read"}
    assert (await client.auth_test())["ok"] is True  # needs no scope
    assert (await client.users_info(user="UALICE"))["ok"] is True  # not modelled: never stricter


async def test_an_unknown_method_is_unknown_method(client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError, match="unknown_method"):
        await client.api_call("chat.scheduleTeleport")


async def test_ratelimited_is_http_429_with_retry_after(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    fake.fail("chat.postMessage", retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=CHANNEL, text="x")
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "7"
    assert caught.value.response["error"] == "ratelimited"
    assert CHANNEL not in fake.messages
    await client.chat_postMessage(channel=CHANNEL, text="x")  # the fault was used up
    assert fake.calls_to("chat.postMessage")[0].status == 429


async def test_http_500_and_api_errors_on_demand(fake: FakeSlack, client: AsyncWebClient) -> None:
    fake.fail("chat.update", "internal_error", status=500)
    fake.fail("chat.postMessage", "not_in_channel", times=2)
    for _ in range(2):
        with pytest.raises(SlackApiError, match="not_in_channel"):
            await client.chat_postMessage(channel=CHANNEL, text="x")
    posted = await client.chat_postMessage(channel=CHANNEL, text="x")
    with pytest.raises(SlackApiError) as caught:
        await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="y")
    assert caught.value.response.status_code == 500


async def test_clear_faults_and_every_method_faults(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    fake.fail("*", "fatal_error", times=-1)
    with pytest.raises(SlackApiError, match="fatal_error"):
        await client.auth_test()
    with pytest.raises(SlackApiError, match="fatal_error"):
        await client.auth_test()
    fake.clear_faults()
    assert (await client.auth_test())["ok"]


async def test_respond_ephemeral_reaches_the_user(fake: FakeSlack) -> None:
    url = fake.new_response_url(CHANNEL, "UALICE")
    response = await AsyncWebhookClient(url).send(text="only for you")
    assert (response.status_code, response.body) == (200, "ok")
    [ephemeral] = fake.ephemerals_for("UALICE", CHANNEL)
    assert (ephemeral.text, ephemeral.source) == ("only for you", "response_url")
    [post] = fake.response_posts
    assert (post.response_type, post.replace_original) == (None, False)


async def test_respond_in_channel_in_a_thread(fake: FakeSlack, client: AsyncWebClient) -> None:
    root = await client.chat_postMessage(channel=CHANNEL, text="root")
    url = fake.new_response_url(CHANNEL, "UALICE")
    await AsyncWebhookClient(url).send_dict(
        {"text": "for all", "response_type": "in_channel", "thread_ts": root["ts"]}
    )
    [reply] = fake.replies(CHANNEL, root["ts"])
    assert (reply.text, reply.user, reply.source) == ("for all", "UBOT", "response_url")
    assert fake.ephemerals == []


async def test_respond_replaces_or_deletes_the_original(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="approve?")
    url = fake.new_response_url(CHANNEL, "UALICE", message_ts=posted["ts"])
    await AsyncWebhookClient(url).send(text="approved", replace_original=True)
    message = fake.message(CHANNEL, posted["ts"])
    assert message is not None
    assert (message.text, message.edits[0].text) == ("approved", "approve?")
    await AsyncWebhookClient(url).send(delete_original=True)
    assert message.deleted
    assert fake.thread(CHANNEL, posted["ts"]) == []


async def test_a_response_url_takes_five_posts(fake: FakeSlack) -> None:
    url = fake.new_response_url(CHANNEL, "UALICE")
    statuses = [(await AsyncWebhookClient(url).send(text="x")).status_code for _ in range(6)]
    assert statuses == [200] * 5 + [404]
    unknown = await AsyncWebhookClient(f"{fake.base_url}/response/nope").send(text="x")
    assert unknown.status_code == 404


async def test_subscribers_see_every_change(fake: FakeSlack, client: AsyncWebClient) -> None:
    seen_sync: list[FakeEvent] = []
    seen_async: list[str] = []

    async def record_kind(event: FakeEvent) -> None:
        seen_async.append(event.kind)

    unsubscribe = fake.subscribe(seen_sync.append)
    fake.subscribe(record_kind)
    posted = await client.chat_postMessage(channel=CHANNEL, text="a")
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="b")
    await client.chat_postEphemeral(channel=CHANNEL, user="UBOB", text="c")
    await client.views_open(trigger_id=fake.issue_trigger_id("UBOB"), view=modal())
    assert [type(e).__name__ for e in seen_sync] == [
        MessagePosted.__name__,
        MessageEdited.__name__,
        EphemeralPosted.__name__,
        ViewOpened.__name__,
    ]
    assert seen_async == ["message_posted", "message_edited", "ephemeral_posted", "view_opened"]
    edited = seen_sync[1]
    assert isinstance(edited, MessageEdited)
    assert edited.message.text == "b"
    unsubscribe()
    await client.chat_postMessage(channel=CHANNEL, text="d")
    assert len(seen_sync) == 4
    assert len(seen_async) == 5


async def test_a_failing_subscriber_does_not_break_the_api(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    def explode(event: FakeEvent) -> None:
        raise RuntimeError("renderer crashed")

    fake.subscribe(explode)
    assert (await client.chat_postMessage(channel=CHANNEL, text="a"))["ok"]


async def test_wait_for_returns_once_the_bot_did_it(fake: FakeSlack) -> None:
    with pytest.raises(TimeoutError):
        await fake.wait_for(lambda: fake.messages.get(CHANNEL), within=0.05)


async def test_control_endpoints_for_other_processes(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    await client.chat_postMessage(channel=CHANNEL, text="a")
    await client.auth_test()
    async with httpx.AsyncClient(base_url=fake.base_url) as http:
        calls = (await http.get("/_fake/calls")).json()
        assert [c["method"] for c in calls] == ["chat.postMessage", "auth.test"]
        only = (await http.get("/_fake/calls", params={"method": "auth.test"})).json()
        assert [c["method"] for c in only] == ["auth.test"]
        fault = {"method": "auth.test", "error": "ratelimited", "retry_after": 0}
        assert (await http.post("/_fake/faults", json=fault)).status_code == 200
        with pytest.raises(SlackApiError) as caught:
            await client.auth_test()
        assert caught.value.response.status_code == 429
        await http.post("/_fake/reset")
        assert (await http.get("/_fake/calls")).json() == []
    assert fake.messages == {}
    assert fake.channels == {CHANNEL: "gpu-ops"}


async def open_modal(fake: FakeSlack, client: AsyncWebClient, user: str = "UALICE") -> str:
    answer = await client.views_open(trigger_id=fake.issue_trigger_id(user), view=modal())
    return str(answer["view"]["id"])


async def test_app_answers_to_a_submission_are_applied_like_slack(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_modal(fake, client)
    problems = await fake.apply_view_response(
        view_id, 200, {"response_action": "errors", "errors": {"num_gpus": "no", "nope": "x"}}
    )
    assert problems == ["errors key 'nope' is not an input block_id of the view"]
    assert fake.views[view_id].errors == {"num_gpus": "no", "nope": "x"}
    update = {"response_action": "update", "view": modal(title="Confirm")}
    assert await fake.apply_view_response(view_id, 200, update) == []
    assert fake.views[view_id].view["title"]["text"] == "Confirm"
    assert fake.views[view_id].errors is None
    push = {"response_action": "push", "view": modal(title="Really?")}
    assert await fake.apply_view_response(view_id, 200, push) == []
    assert [v.view["title"]["text"] for v in fake.open_views_for("UALICE")] == [
        "Confirm",
        "Really?",
    ]
    assert await fake.apply_view_response(view_id, 200, {"response_action": "clear"}) == []
    assert fake.open_views_for("UALICE") == []
    assert all(not v.open for v in fake.views.values())


async def test_an_invalid_update_or_error_status_keeps_the_modal(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_modal(fake, client)
    bad_update = {"response_action": "update", "view": modal(title="t" * 30)}
    [problem] = await fake.apply_view_response(view_id, 200, bad_update)
    assert "title" in problem
    [problem] = await fake.apply_view_response(view_id, 500, None)
    assert "500" in problem
    assert fake.views[view_id].open


async def test_the_modal_stack_is_limited_to_three(fake: FakeSlack, client: AsyncWebClient) -> None:
    await open_modal(fake, client)
    for _ in range(2):
        await client.views_push(trigger_id=fake.issue_trigger_id("UALICE"), view=modal())
    with pytest.raises(SlackApiError, match="push_limit_reached"):
        await client.views_push(trigger_id=fake.issue_trigger_id("UALICE"), view=modal())


async def test_entries_survive_an_update_that_keeps_the_input(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    view_id = await open_modal(fake, client)
    fake.enter_values(view_id, {"num_gpus": {"num_gpus": {"type": "number_input", "value": "4"}}})
    await client.views_update(view_id=view_id, view=modal(title="Again"))
    assert fake.views[view_id].state_values()["num_gpus"]["num_gpus"]["value"] == "4"
    replaced = modal()
    replaced["blocks"][0]["element"]["type"] = "plain_text_input"
    await client.views_update(view_id=view_id, view=replaced)
    assert fake.views[view_id].entered == {}


async def test_views_publish_keeps_each_users_home_and_its_versions(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    events: list[FakeEvent] = []
    fake.subscribe(events.append)
    first = await client.views_publish(
        user_id="UALICE", view={"type": "home", "blocks": [section("one")]}
    )
    second = await client.views_publish(
        user_id="UALICE", view={"type": "home", "blocks": [section("two")]}
    )
    assert first["view"]["id"] == second["view"]["id"] and second["view"]["type"] == "home"
    home = fake.home_of("UALICE")
    assert home is not None and len(home.history) == 1
    assert home.blocks[0]["text"]["text"] == "two"
    assert [e.kind for e in events] == ["home_published", "home_published"]
    assert isinstance(events[-1], HomePublished) and fake.home_of("UBOB") is None


async def test_views_publish_refuses_what_slack_refuses(client: AsyncWebClient) -> None:
    home = {"type": "home", "blocks": [section("x")]}
    with pytest.raises(SlackApiError) as unknown:
        await client.views_publish(user_id="UNOBODY", view=home)
    assert unknown.value.response["error"] == "user_not_found"
    with pytest.raises(SlackApiError) as modal_view:
        await client.views_publish(user_id="UALICE", view=modal())
    assert modal_view.value.response["error"] == "invalid_arguments"
    too_many = {"type": "home", "blocks": [section(str(i)) for i in range(101)]}
    with pytest.raises(SlackApiError) as long_view:
        await client.views_publish(user_id="UALICE", view=too_many)
    assert "no more than 100 items" in str(long_view.value.response["response_metadata"])
