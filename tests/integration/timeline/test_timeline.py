"""/gpu timeline and @gpuops timeline (SPEC §10) over real HTTP: the channel's record as a
Markdown file shared through the stand-in's external upload flow, one line per event in
time order, only of the projects the person may see there."""

from __future__ import annotations

import re

import pytest

import bot.core.timeline
from bot.core.store import RequestState
from bot.local.demo.stack import DEMO_POLICY, LocalStack
from bot.local.slack.files import UploadedFile
from bot.local.slack.models import Ephemeral, Message
from tests.conftest import StackFactory
from tests.support.slack_support import command_reply
from tests.support.watch_kit import pending_remediation, press, watched_stack
from tests.support.workflow_kit import (
    BOB,
    CAROL,
    CHANNEL,
    DAVE,
    ERIN,
    MALLORY,
    NOTIFY_CHANNEL,
    click,
    poll_until,
    request,
    wait_reply,
    wait_state,
)

FILENAME = re.compile(r"^gpuops-timeline-(C[0-9A-Z]+)-(\d{8}T\d{4}Z)-(\d{8}T\d{4}Z)\.md$")
LINE = re.compile(r"^- (\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ) · (.*) · `#[0-9a-f]{10}`$")


def shared_files(stack: LocalStack, channel: str) -> list[tuple[Message, UploadedFile]]:
    """The files the bot shared in ``channel`` (with the message that carries each)."""
    return [
        (message, stack.slack.files[file["id"]])
        for message in stack.slack.messages.get(channel, [])
        if message.source == "files.completeUploadExternal"
        for file in message.files
    ]


async def timeline_of(
    stack: LocalStack, user: str, channel: str, text: str = "timeline"
) -> tuple[Message, UploadedFile, Ephemeral]:
    """``user`` types ``/gpu {text}``: the "file follows" whisper and then the file."""
    before = len(shared_files(stack, channel))
    whisper = await command_reply(stack, user, channel, text)
    assert "the file follows here" in whisper.text, whisper.text
    message, file = await stack.slack.wait_for(
        lambda: next(iter(shared_files(stack, channel)[before:]), None), within=10
    )
    return message, file, whisper


def events(file: UploadedFile) -> list[tuple[str, str]]:
    """(time, text) of each event line, in file order."""
    found = [LINE.match(line) for line in file.text.splitlines() if line.startswith("- ")]
    assert all(found), file.text
    return [(m.group(1), m.group(2)) for m in found if m]


async def test_the_channels_story_is_a_file_in_time_order(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bot.core.timeline, "PAGE_SIZE", 3)  # several pages of the store
    opened = await request(
        stack, DAVE, 'action e2e-delhi 101 restart_workers reason="NCCL hang <@U0EVIL>"'
    )
    await click(stack, opened, BOB)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    elsewhere = await request(
        stack, DAVE, "action e2e-delhi 103 restart_workers", channel="C0RANDOM"
    )

    message, file, _ = await timeline_of(stack, BOB, CHANNEL, "timeline 1h")

    name = FILENAME.match(file.filename)
    assert name is not None and name.group(1) == CHANNEL, file.filename
    assert message.thread_ts is None and message.channel == CHANNEL
    assert message.text.startswith(f"Timeline of <#{CHANNEL}> for <@{BOB}>: ")
    assert [c.method for c in stack.slack.calls if c.method.startswith("files.")] == [
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ]
    listed = events(file)
    assert [when for when, _ in listed] == sorted(when for when, _ in listed)
    texts = [text for _, text in listed]
    story = [t.split(" ", 2)[1] for t in texts]
    assert story == ["requested", "approved", "sending", "final"], texts
    assert all(t.startswith(f"**{opened.id}**") for t in texts)
    assert (
        "requested by dave (@U04DAVE): restart\\_workers on train-h100-a (101, e2e-delhi)"
        in texts[0]
    )
    assert "reason: NCCL hang \\<@U0EVIL\\>" in texts[0]  # inert: no mention, no HTML
    assert texts[1].endswith("approved by bob (@U02BOB)") and "**succeeded**" in texts[3]
    assert elsewhere.id not in file.text  # asked in #random: not this channel's story
    assert f"{len(listed)} events." in file.text


async def test_a_timeline_mentioned_in_a_thread_is_shared_in_that_thread(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    opened = await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    result = await stack.sender.mention(BOB, CHANNEL, "timeline 30m", thread_ts=opened.root_ts)
    assert result.status == 200 and result.acked_in_time
    message, file = await stack.slack.wait_for(
        lambda: next(iter(shared_files(stack, CHANNEL)), None), within=10
    )
    assert message.thread_ts == opened.root_ts  # a reply in the thread, not in the channel
    assert file.thread_ts == opened.root_ts and file.channel == CHANNEL
    [(_, text)] = events(file)
    assert text.startswith(f"**{opened.id}** requested by dave (@U04DAVE)")


ERIN_SEES_TOGETHER_ONLY = DEMO_POLICY.replace(
    """  - users: [U05ERIN]
    projects: ["*"]""",
    """  - users: [U05ERIN]
    projects: [together-prod]""",
)


async def test_only_the_projects_the_person_may_see_there_are_listed(
    make_stack: StackFactory,
) -> None:
    assert ERIN_SEES_TOGETHER_ONLY != DEMO_POLICY
    stack = await make_stack(policy_yaml=ERIN_SEES_TOGETHER_ONLY)
    e2e = await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    together = await request(
        stack, DAVE, "update together-prod tc-h200-ondemand num_gpus=16", approval=False
    )

    _, for_erin, whisper = await timeline_of(stack, ERIN, CHANNEL)
    assert "(together-prod)" in whisper.text
    assert together.id in for_erin.text and e2e.id not in for_erin.text
    assert "projects you may see here: together-prod ·" in for_erin.text
    _, for_dave, _ = await timeline_of(stack, DAVE, CHANNEL)
    assert together.id in for_dave.text and e2e.id in for_dave.text

    refused = await command_reply(stack, MALLORY, CHANNEL, "timeline")
    assert "you may see no project in this channel" in refused.text
    # erin's grant holds only in #incident: elsewhere she has no timeline either
    elsewhere = await command_reply(stack, ERIN, "C0RANDOM", "timeline")
    assert "you may see no project in this channel" in elsewhere.text
    assert len(shared_files(stack, CHANNEL)) == 2 and shared_files(stack, "C0RANDOM") == []


async def test_the_notify_channel_lists_mirrored_requests_and_watch_posts(
    make_stack: StackFactory,
) -> None:
    stack = await watched_stack(make_stack)
    mirrored = await request(
        stack, DAVE, "update together-prod tc-h200-ondemand num_gpus=16", approval=False
    )
    _, posted = await pending_remediation(stack)
    await press(stack, posted, BOB, "approve_remediation")

    async def decided() -> bool:
        trail = await stack.runtime.store.list_audit(project="together-prod", limit=50)
        return any(e.event == "remediation_approve" for e in trail)

    await poll_until(decided)
    await stack.slack.wait_for(  # bob is told; his next whisper is the timeline's
        lambda: any("Approved" in e.text for e in stack.slack.ephemerals_for(BOB, NOTIFY_CHANNEL))
    )

    _, file, _ = await timeline_of(stack, BOB, NOTIFY_CHANNEL, "timeline 2h")
    texts = [text for _, text in events(file)]
    assert any(t.startswith(f"**{mirrored.id}** requested by dave (@U04DAVE)") for t in texts), (
        texts
    )
    proposed = next(i for i, t in enumerate(texts) if t.startswith("remediation proposed"))
    approval = next(i for i, t in enumerate(texts) if "approval by bob (@U02BOB)" in t)
    assert proposed < approval and "tc-h100-reserved (together-prod)" in texts[proposed]


async def test_a_window_that_cannot_be_read_is_refused_with_the_rule(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    too_long = await command_reply(stack, BOB, CHANNEL, "timeline 8d")
    assert "at most 7 days" in too_long.text
    unreadable = await command_reply(stack, BOB, CHANNEL, "timeline yesterday")
    assert "`30m`, `2h`, `1d` or an RFC 3339 time" in unreadable.text
    future = await command_reply(stack, BOB, CHANNEL, "timeline 2099-01-01T00:00:00Z")
    assert "in the future" in future.text
    quiet = await command_reply(stack, BOB, "C0RANDOM", "timeline 7d")
    assert "the file follows" in quiet.text
    nothing = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for(BOB, "C0RANDOM")[1:]), None)
    )
    assert "Nothing happened in" in nothing.text and "no file to share" in nothing.text
    assert not any(c.method.startswith("files.") for c in stack.slack.calls)


async def test_a_failed_upload_is_told_to_the_person(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await request(stack, DAVE, "action e2e-delhi 101 restart_workers")
    stack.slack.fail("files.completeUploadExternal", "not_in_channel")
    await command_reply(stack, BOB, CHANNEL, "timeline")
    told = await stack.slack.wait_for(
        lambda: next(iter(stack.slack.ephemerals_for(BOB, CHANNEL)[1:]), None)
    )
    assert "could not share the timeline file" in told.text and "/invite @gpuops" in told.text
    assert shared_files(stack, CHANNEL) == []

    root = await stack.slack.post_user_message(CHANNEL, BOB, "timeline please")
    stack.slack.fail("files.getUploadURLExternal", "file_uploads_disabled")
    await stack.sender.mention(BOB, CHANNEL, "timeline", thread_ts=root.ts)
    whisper = await stack.slack.wait_for(
        lambda: next((e for e in stack.slack.ephemerals_for(BOB) if e.thread_ts == root.ts), None)
    )
    assert "does not allow file uploads" in whisper.text


async def test_status_follow_ups_are_in_the_timeline(make_stack: StackFactory) -> None:
    stack = await make_stack(poll_seconds=0.2, transition_seconds=0.6)
    opened = await request(
        stack, DAVE, "update together-prod tc-h200-ondemand num_gpus=16", approval=False
    )
    await wait_reply(stack, opened, "infer-h200 is Ready.")
    _, file, _ = await timeline_of(stack, DAVE, CHANNEL)
    texts = [text for _, text in events(file)]
    follow_ups = [t for t in texts if " follow-up: " in t]
    assert follow_ups[-1] == (
        f"**{opened.id}** follow-up: infer-h200 (tc-h200-ondemand, together-prod) is Ready"
    )
    assert texts.index(follow_ups[0]) > next(i for i, t in enumerate(texts) if "final state" in t)


async def test_each_approval_of_several_is_in_the_timeline(make_stack: StackFactory) -> None:
    """A request two approvers must approve: both approvals are the channel's story, the
    first with the count it left."""
    two = DEMO_POLICY.replace(
        "  break_glass: true\n",
        "  break_glass: true\n  rules:\n"
        "    - projects: [e2e-delhi]\n      kinds: [scale_cluster]\n      approvers: 2\n",
    )
    stack = await make_stack(policy_yaml=two)
    opened = await request(stack, DAVE, "action e2e-delhi 101 scale_cluster additional_nodes=1")
    await click(stack, opened, BOB)
    await wait_reply(stack, opened, "1 of 2")
    await click(stack, opened, CAROL)
    await wait_state(stack.runtime.store, opened.id, RequestState.SUCCEEDED)
    _, file, _ = await timeline_of(stack, BOB, CHANNEL, "timeline 1h")
    texts = [text for _, text in events(file)]
    assert f"**{opened.id}** approved by bob (@U02BOB) (1 of 2): not yet enough" in texts, texts
    assert f"**{opened.id}** approved by carol (@U03CAROL)" in texts, texts
