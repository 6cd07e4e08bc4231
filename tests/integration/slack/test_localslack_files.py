"""The Slack stand-in's external file upload (files.getUploadURLExternal, the upload, then
files.completeUploadExternal) over real HTTP, with Slack's rules and error names — and
slack_sdk's own files_upload_v2, the reference client, works against it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack.server import FakeSlack

TOKEN = "xoxb-files-test-token"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = FakeSlack(
        TOKEN,
        channels={"C0INCIDENT": "incident"},
        not_member_channels={"C0OUTSIDE": "outside"},
        users={"U02BOB": "bob"},
    )
    await slack.start()
    try:
        yield slack
    finally:
        await slack.stop()


async def api(fake: FakeSlack, method: str, **params: Any) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            fake.api_url + method, data=params, headers={"Authorization": f"Bearer {TOKEN}"}
        )
    body: dict[str, Any] = answer.json()
    return body


async def ticket(fake: FakeSlack, content: bytes, name: str = "notes.md") -> dict[str, Any]:
    answer = await api(fake, "files.getUploadURLExternal", filename=name, length=len(content))
    assert answer["ok"], answer
    return answer


async def upload(url: str, content: bytes | None = None, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(url, content=content, **kwargs)


async def complete(fake: FakeSlack, file_id: str, **params: Any) -> dict[str, Any]:
    files = json.dumps([{"id": file_id, "title": "Notes"}])
    return await api(fake, "files.completeUploadExternal", files=files, **params)


async def test_the_three_steps_share_a_file_in_a_thread(fake: FakeSlack) -> None:
    root = await fake.post_user_message("C0INCIDENT", "U02BOB", "postmortem?")
    content = b"# notes\n- one\n"
    got = await ticket(fake, content)
    assert got["upload_url"].startswith(fake.base_url + "/upload/v1/")  # served by the stand-in
    assert got["file_id"].startswith("F")
    sent = await upload(got["upload_url"], content)  # no token: the URL is the permission
    assert (sent.status_code, sent.text) == (200, f"OK - {len(content)}")
    done = await complete(
        fake,
        got["file_id"],
        channel_id="C0INCIDENT",
        thread_ts=root.ts,
        initial_comment="Notes for <@U02BOB>",
    )
    assert done == {"ok": True, "files": [{"id": got["file_id"], "title": "Notes"}]}
    [message] = fake.replies("C0INCIDENT", root.ts)
    assert message.text == "Notes for <@U02BOB>" and message.files[0]["name"] == "notes.md"
    assert message.as_slack(fake.team_id)["files"][0]["size"] == len(content)
    assert fake.files[got["file_id"]].text == "# notes\n- one\n"


async def test_a_multipart_upload_is_accepted_too(fake: FakeSlack) -> None:
    got = await ticket(fake, b"abc")
    sent = await upload(got["upload_url"], files={"file": ("notes.md", b"abc")})
    assert sent.status_code == 200
    assert fake.files[got["file_id"]].content == b"abc"


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"length": "10"}, "invalid_arguments"),  # no filename
        ({"filename": "a.md"}, "invalid_arguments"),  # no length
        ({"filename": "a.md", "length": "ten"}, "invalid_arguments"),
        ({"filename": "a.md", "length": "0"}, "missing_argument"),
        ({"filename": "a.md", "length": "10", "alt_txt": "x" * 1001}, "alt_txt_too_large"),
        (
            {"filename": "a.py", "length": str(2 * 1024**2), "snippet_type": "python"},
            "snippet_too_large",
        ),
    ],
)
async def test_an_upload_url_is_refused_as_slack_refuses_it(
    fake: FakeSlack, params: dict[str, str], error: str
) -> None:
    answer = await api(fake, "files.getUploadURLExternal", **params)
    assert (answer["ok"], answer["error"]) == (False, error)


async def test_the_workspace_file_size_limit(fake: FakeSlack) -> None:
    fake.uploads.max_file_bytes = 100
    too_big = await api(fake, "files.getUploadURLExternal", filename="a.md", length="101")
    assert too_big["error"] == "file_upload_size_restricted"
    assert (await api(fake, "files.getUploadURLExternal", filename="a.md", length="100"))["ok"]


async def test_an_upload_url_takes_one_upload_of_at_most_its_length(fake: FakeSlack) -> None:
    got = await ticket(fake, b"12345")
    assert (await upload(got["upload_url"], b"123456")).status_code == 413
    assert (await upload(got["upload_url"], b"12345")).status_code == 404  # used up
    again = await ticket(fake, b"12345")
    assert (await upload(again["upload_url"], b"12345")).status_code == 200
    assert (await upload(again["upload_url"], b"12345")).status_code == 404
    unknown = await upload(fake.base_url + "/upload/v1/not-a-ticket", b"x")
    assert unknown.status_code == 404


async def test_completing_is_refused_as_slack_refuses_it(fake: FakeSlack) -> None:
    got = await ticket(fake, b"abc")
    assert (await complete(fake, got["file_id"]))["error"] == "file_not_found"  # not uploaded
    await upload(got["upload_url"], b"abc")
    outside = await complete(fake, got["file_id"], channel_id="C0OUTSIDE")
    assert outside["error"] == "not_in_channel"
    nowhere = await complete(fake, got["file_id"], channel_id="C0NOSUCH")
    assert nowhere["error"] == "channel_not_found"
    assert (await complete(fake, "F0UNKNOWN"))["error"] == "file_not_found"
    broken = await api(fake, "files.completeUploadExternal", files="[]")
    assert broken["error"] == "invalid_arguments"
    private = await complete(fake, got["file_id"])  # no channel: shared nowhere
    assert private["ok"] and fake.messages == {}
    assert (await complete(fake, got["file_id"], channel_id="C0INCIDENT"))[
        "error"
    ] == "file_not_found"  # completed already


async def test_slack_sdks_files_upload_v2_works_against_the_stand_in(fake: FakeSlack) -> None:
    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    done = await client.files_upload_v2(
        channel="C0INCIDENT", content="hello", filename="hello.md", title="Hello"
    )
    assert done["ok"] and done["file"]["title"] == "Hello"
    [message] = fake.messages["C0INCIDENT"]
    assert fake.files[message.files[0]["id"]].text == "hello"
    with pytest.raises(SlackApiError) as refused:
        await client.files_upload_v2(channel="C0OUTSIDE", content="x", filename="x.md")
    assert refused.value.response["error"] == "not_in_channel"


async def uploaded(fake: FakeSlack, content: bytes = b"abc") -> str:
    got = await ticket(fake, content)
    assert (await upload(got["upload_url"], content)).status_code == 200
    file_id: str = got["file_id"]
    return file_id


async def test_channels_shares_in_every_channel_and_dm_listed(fake: FakeSlack) -> None:
    file_id = await uploaded(fake)
    done = await complete(fake, file_id, channels="C0INCIDENT, U02BOB", initial_comment="hi")
    assert done["ok"], done
    dm = fake.open_dm("U02BOB")
    for channel in ("C0INCIDENT", dm):
        [message] = fake.messages[channel]
        assert message.text == "hi" and message.files[0]["id"] == file_id
    assert fake.files[file_id].channel == "C0INCIDENT"
    assert fake.spec_problems == []


async def test_channels_is_refused_as_slack_documents(fake: FakeSlack) -> None:
    file_id = await uploaded(fake)
    unknown = await complete(fake, file_id, channels="C0INCIDENT,C0NOSUCH")
    assert unknown["error"] == "invalid_channel"
    too_many = ",".join(f"C0{n:03d}" for n in range(101))
    assert (await complete(fake, file_id, channels=too_many))["error"] == "channels_limit_exceeded"
    assert fake.messages == {} and not fake.files[file_id].completed


async def test_thread_ts_needs_exactly_one_channel_and_uploads_their_length(
    fake: FakeSlack,
) -> None:
    root = await fake.post_user_message("C0INCIDENT", "U02BOB", "postmortem?")
    alone = await complete(fake, await uploaded(fake), thread_ts=root.ts)
    assert alone["ok"] and fake.replies("C0INCIDENT", root.ts) == []  # private, as documented
    two = await complete(
        fake, await uploaded(fake), channels="C0INCIDENT,U02BOB", thread_ts=root.ts
    )
    assert two["ok"]
    short = await ticket(fake, b"12345")
    await upload(short["upload_url"], b"123")
    assert (await complete(fake, short["file_id"], channel_id="C0INCIDENT"))["ok"]
    dm = fake.open_dm("U02BOB")
    assert fake.spec_problems == [
        f"thread_ts {root.ts} without a channel to share in",
        f"thread_ts {root.ts} with 2 channels",
        f"thread_ts {root.ts} names no message in {dm}",
        f"file {short['file_id']} got 3 of the 5 bytes announced",
    ]
