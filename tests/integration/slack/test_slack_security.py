"""Hostile text from providers and users cannot mention, link or ping; requests that are
not signed by Slack (wrong signature, stale timestamp) are refused with 401 and do
nothing."""

from __future__ import annotations

import json

import pytest

from bot.local.demo.stack import LocalStack
from bot.local.slack.sender import Tamper
from tests.support.slack_support import (
    blocks_json,
    bot_messages,
    opened_modal,
    provider_writes,
    roots,
    whisper,
)

HOSTILE = "<!channel> <@U0EVIL> <https://evil.example|click>"
RAW_SEQUENCES = ("<!channel>", "<@U0EVIL>", "<https://evil.example")


def everything_sent_to_slack(stack: LocalStack) -> list[str]:
    """Every Web API call body and every response_url post the bot made, as text."""
    sent = [json.dumps(call.args, ensure_ascii=False) for call in stack.slack.calls]
    sent += [
        json.dumps({"text": p.text, "blocks": p.blocks}, ensure_ascii=False)
        for p in stack.slack.response_posts
    ]
    return sent


def assert_nothing_raw(stack: LocalStack) -> None:
    for body in everything_sent_to_slack(stack):
        for raw in RAW_SEQUENCES:
            assert raw not in body, f"{raw!r} reached Slack unescaped in {body[:300]}"


async def test_hostile_cluster_names_and_reasons_are_neutralised(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    stack.together.clusters["tc-h100-reserved"]["cluster_name"] = HOSTILE
    stack.e2e.clusters[101].name = HOSTILE

    await stack.sender.command("U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved")
    shown = await stack.slack.wait_for(lambda: next(iter(bot_messages(stack, "C0INCIDENT")), None))
    assert "&lt;!channel&gt; &lt;@U0EVIL&gt;" in shown.text  # shown, as text
    assert "\u2039!channel\u203a" in blocks_json(shown.blocks)  # the header (plain_text)

    listed = await whisper(stack, "U04DAVE", "C0INCIDENT", "list")
    assert "&lt;@U0EVIL&gt;" in blocks_json(listed.blocks)

    await whisper(
        stack,
        "U04DAVE",
        "C0INCIDENT",
        f'update together-prod tc-h100-reserved num_preemptible_gpus=8 reason="{HOSTILE}"',
    )
    await whisper(
        stack,
        "U04DAVE",
        "C0INCIDENT",
        f'action e2e-delhi 101 scale_cluster additional_nodes=1 reason="{HOSTILE}"',
    )
    await stack.runtime.workflow.drain()
    assert len(provider_writes(stack)) == 1  # the Together scale-up ran; the scale waits
    request_roots = [m for m in roots(stack, "C0INCIDENT") if "asks for" in m.text]
    assert len(request_roots) == 2
    assert all("&lt;https://evil.example|click&gt;" in blocks_json(m.blocks) for m in request_roots)
    assert any("_Reason:_" in blocks_json(m.blocks) for m in request_roots)

    await whisper(stack, "U01ALICE", "C0INCIDENT", "audit")
    root = await stack.slack.post_user_message("C0INCIDENT", "U04DAVE", "incident thread")
    await stack.sender.mention("U04DAVE", "C0INCIDENT", "show e2e-delhi 101", thread_ts=root.ts)
    await stack.slack.wait_for(
        lambda: [m for m in stack.slack.replies("C0INCIDENT", root.ts) if m.bot_id]
    )
    echoed = await whisper(stack, "U04DAVE", "C0INCIDENT", f'show "{HOSTILE}" 101')
    assert "&lt;!channel&gt;" in echoed.text  # the bad token is quoted back, as text

    await stack.sender.command("U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved")
    form = await opened_modal(stack, "U04DAVE", "gpu_update")
    assert "&lt;@U0EVIL&gt;" in blocks_json(form.blocks)
    await stack.sender.command("U04DAVE", "C0INCIDENT", "action e2e-delhi 101")
    await opened_modal(stack, "U04DAVE", "gpu_action")

    assert len(everything_sent_to_slack(stack)) > 10
    assert_nothing_raw(stack)


async def test_escaped_text_is_escaped_exactly_once_in_list_and_audit(
    sqlite_stack: LocalStack,
) -> None:
    """Text fallbacks show the hostile text as text: escaped once, not &amp;lt;…"""
    stack = sqlite_stack
    stack.together.clusters["tc-h200-ondemand"]["cluster_name"] = HOSTILE
    listed = await whisper(stack, "U04DAVE", "C0INCIDENT", "list together-prod")
    assert "&lt;!channel&gt; &lt;@U0EVIL&gt;" in listed.text
    assert "&amp;" not in listed.text and "&amp;" not in blocks_json(listed.blocks)

    await whisper(stack, "U06MALLORY", "C0INCIDENT", "update together-prod x num_gpus=8")
    trail = await whisper(stack, "U01ALICE", "C0INCIDENT", "audit together-prod")
    assert "<@U06MALLORY>" in blocks_json(trail.blocks)  # the actor, a real mention
    assert "refused" in trail.text and "&amp;" not in trail.text
    assert_nothing_raw(stack)


# -- signature verification ----------------------------------------------------------------


@pytest.mark.parametrize("tamper", [Tamper.WRONG_SIGNATURE, Tamper.STALE_TIMESTAMP])
async def test_unsigned_requests_are_refused_and_do_nothing(
    sqlite_stack: LocalStack, tamper: Tamper
) -> None:
    stack = sqlite_stack
    command = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16", tamper=tamper
    )
    assert command.status == 401
    shown = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved", tamper=tamper
    )
    assert shown.status == 401
    mention = await stack.sender.mention(
        "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved", tamper=tamper
    )
    assert mention.status == 401
    modal = await stack.sender.command(
        "U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved", tamper=tamper
    )
    assert modal.status == 401

    await stack.runtime.workflow.drain()
    assert bot_messages(stack, "C0INCIDENT") == []
    assert stack.slack.ephemerals == [] and stack.slack.response_posts == []
    assert stack.slack.views == {}
    assert [c.method for c in stack.slack.calls if c.method != "auth.test"] == []
    assert await stack.runtime.store.list_audit() == []
    assert await stack.runtime.store.list_requests() == []
    assert stack.together.requests == [] and stack.e2e.requests == []


async def test_a_forged_approval_click_is_refused(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await whisper(
        stack, "U04DAVE", "C0INCIDENT", "update together-prod tc-h100-reserved num_gpus=8"
    )
    [request] = await stack.runtime.store.list_requests()
    assert str(request.state) == "pending" and request.root_ts
    audit_rows = len(await stack.runtime.store.list_audit(limit=100))
    prompt = next(
        m
        for m in stack.slack.replies("C0INCIDENT", request.root_ts)
        if "approve_request" in blocks_json(m.blocks)
    )
    for tamper in (Tamper.WRONG_SIGNATURE, Tamper.STALE_TIMESTAMP):
        click = await stack.sender.block_action(
            "U02BOB",
            "C0INCIDENT",
            action_id="approve_request",
            value=request.id,
            message_ts=prompt.ts,
            tamper=tamper,
        )
        assert click.status == 401
    await stack.runtime.workflow.drain()
    after = await stack.runtime.store.get_request(request.id)
    assert after is not None and str(after.state) == "pending"
    assert len(await stack.runtime.store.list_audit(limit=100)) == audit_rows
    assert provider_writes(stack) == []
