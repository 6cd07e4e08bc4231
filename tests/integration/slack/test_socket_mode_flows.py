"""``gpuops socket`` for real: a subprocess connected to the stand-in's Socket Mode runs the
main flows over it (a form opened, chosen and submitted, a mention in the request's thread,
an approval click) and loses its connection twice in the middle of a change (Slack's
``disconnect``, then a dropped socket): it reconnects, nothing is lost and nothing runs twice."""

from __future__ import annotations

import asyncio
import re
import signal
from asyncio.subprocess import DEVNULL
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.local.demo.stack import DEMO_POLICY
from bot.local.slack.models import Message, View
from bot.local.slack.sender import SenderResult, SlackSender
from bot.local.slack.server import FakeSlack
from tests.support.process_kit import (
    World,
    base_env,
    free_port,
    running_world,
    start_gpuops,
    still_running,
    wait_healthy,
)
from tests.support.slack_support import blocks_json, input_block

APP_TOKEN = "xapp-1-A0GPUOPS-socket-flows"
CHANNEL = "C0INCIDENT"
REQUEST_ID = re.compile(r"CR-[0-9A-Z]{6}")


@dataclass
class SocketBot:
    world: World
    sender: SlackSender
    process: asyncio.subprocess.Process


@pytest.fixture
async def socket_bot(tmp_path: Path) -> AsyncIterator[SocketBot]:
    policy = tmp_path / "policy.yml"
    policy.write_text(DEMO_POLICY)
    port = free_port()
    async with running_world(app_token=APP_TOKEN) as world:
        env = base_env(tmp_path, policy, SLACK_APP_TOKEN=APP_TOKEN, **world.urls())
        process = await start_gpuops("socket", port, env, tmp_path, stdout=DEVNULL)
        try:
            healthz = f"http://127.0.0.1:{port}/healthz"
            await wait_healthy(healthz, still_running(process), within=90.0)
            await world.slack.socket_mode.wait_connected(within=10.0)
            async with SlackSender.over_socket_mode(world.slack) as sender:
                yield SocketBot(world, sender, process)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 10) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _view(slack: FakeSlack, user: str, versions: int) -> View:
    """``user``'s open modal once it has more than ``versions`` earlier versions."""

    def ready() -> View | None:
        view = slack.last_view_for(user, open_only=True)
        return view if view is not None and len(view.history) > versions else None

    return await slack.wait_for(ready, within=10)


async def _command_once_connected(slack: FakeSlack, sender: SlackSender, text: str) -> SenderResult:
    """A command once the app is connected again. After a dropped socket, slack_sdk's client
    may reconnect twice (its stale-session monitor also fires, every ping interval: 10 s),
    so a connection can go away right after the first reconnect; Slack would show the
    person an error for a command sent then, as it does here."""
    for _ in range(3):
        await slack.socket_mode.wait_connected(within=30.0)
        try:
            return await sender.command("U04DAVE", CHANNEL, text)
        except TimeoutError:
            continue
    raise AssertionError("the app did not stay connected")


def _roots(bot: SocketBot) -> list[Message]:
    slack = bot.world.slack
    return [
        m
        for m in slack.messages.get(CHANNEL, [])
        if m.user == slack.bot_user_id and REQUEST_ID.search(m.text) and not m.thread_ts
    ]


async def test_form_mention_click_and_two_reconnects_over_socket_mode(
    socket_bot: SocketBot,
) -> None:
    bot, slack, sender = socket_bot, socket_bot.world.slack, socket_bot.sender

    # A form: opened first, the action chosen in it, then submitted.
    opened = await sender.command("U04DAVE", CHANNEL, "action e2e-delhi 101")
    assert opened.status == 200 and opened.acked_in_time
    view = await _view(slack, "U04DAVE", 0)  # the loading view, filled in
    assert view.callback_id == "gpu_action"
    versions = len(view.history)
    await sender.view_block_action(
        "U04DAVE", view.id, action_id="action", block_id="action", selected_value="scale_cluster"
    )
    view = await _view(slack, "U04DAVE", versions)
    assert input_block(view, "additional_nodes")["optional"] is False
    submitted = await sender.view_submission("U04DAVE", view.id, {"additional_nodes": "2"})
    assert submitted.status == 200 and submitted.acked_in_time and submitted.json is None
    (root,) = await slack.wait_for(lambda: _roots(bot) or None, within=10)
    match = REQUEST_ID.search(root.text)
    assert match is not None
    request_id = match.group(0)
    prompt = await slack.wait_for(
        lambda: next(
            (
                m
                for m in slack.replies(CHANNEL, root.ts)
                if "approve_request" in blocks_json(m.blocks)
            ),
            None,
        )
    )

    # A mention in the request's thread.
    await sender.mention("U05ERIN", CHANNEL, "show e2e-delhi 101", thread_ts=root.ts)
    await slack.wait_for(
        lambda: any("(101)" in m.text for m in slack.replies(CHANNEL, root.ts)) or None
    )

    # Slack refreshes the connection; the click comes over the new one.
    assert await slack.socket_mode.disconnect("refresh_requested") == 1
    await slack.socket_mode.wait_connected(within=15.0, opened=2)
    click = await sender.block_action(
        "U02BOB", CHANNEL, action_id="approve_request", value=request_id, message_ts=prompt.ts
    )
    assert click.status == 200 and click.acked_in_time
    # The network drops while the change runs: the change goes on, the bot reconnects.
    assert slack.socket_mode.drop() == 1
    await slack.socket_mode.wait_connected(within=15.0, opened=3)

    def done() -> bool:  # the request's root message says it is done
        current = next(m for m in slack.messages.get(CHANNEL, []) if m.ts == root.ts)
        return "*done*" in blocks_json(current.blocks)

    await slack.wait_for(lambda: done() or None, within=20)
    assert len(bot.world.e2e.calls(method="PUT")) == 1  # the change ran once
    approvals = [m for m in slack.replies(CHANNEL, root.ts) if "Approved by" in m.text]
    assert len(approvals) == 1, [m.text for m in approvals]

    after = await _command_once_connected(slack, sender, "show e2e-delhi 101")
    assert after.status == 200 and after.acked_in_time
    assert slack.errors_shown == []
