"""Lumen end to end over real HTTP, with no line of gpuops changed for it: ``gpuops serve``
in a child process finds it through the entry point (PYTHONPATH), Slack is the stand-in
sending signed requests, Lumen is its simulator on 127.0.0.1. list, show, a change that
needs approval (approved by a second person), the summary in its thread; and
``check-config`` and help say what its descriptor says."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.local.demo.stack import (
    CHANNELS,
    DEMO_BOT_TOKEN,
    DEMO_SIGNING_SECRET,
    USERGROUPS,
    USERS,
)
from bot.local.slack.models import Ephemeral, Message
from bot.local.slack.sender import SlackSender
from bot.local.slack.server import FakeSlack
from tests.support.process_kit import wait_healthy
from tests.support.workflow_kit import BOB, CHANNEL, DAVE, buttons, readable_text
from tests.thirdprovider.simulator import LUMEN_TOKEN, LumenSimulator

REPO = Path(__file__).resolve().parents[2]
GPUOPS = str(Path(sys.executable).with_name("gpuops"))
WITHIN = 60.0  # a bound on each wait for the child's answer, on a loaded machine
REQUEST_ID = re.compile(r"CR-[0-9A-Z]{6}")
POLICY = """\
projects:
  lumen-lab:
    provider: lumen
    region: north
    notify_channel: C0GPUAUDIT
grants:
  - users: [U04DAVE]
    projects: [lumen-lab]
    role: operator
  - users: [U02BOB]
    projects: ["*"]
    role: approver
"""


@dataclass
class World:
    slack: FakeSlack
    lumen: LumenSimulator
    env: dict[str, str]
    workdir: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def world(tmp_path: Path, lumen_site: Path) -> AsyncIterator[World]:
    slack = FakeSlack(DEMO_BOT_TOKEN, channels=CHANNELS, users=USERS, usergroups=USERGROUPS)
    lumen = LumenSimulator()
    await slack.start()
    await lumen.start()
    policy = tmp_path / "policy.yml"
    policy.write_text(POLICY)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(lumen_site), str(REPO)]),
        "SLACK_BOT_TOKEN": DEMO_BOT_TOKEN,
        "SLACK_SIGNING_SECRET": DEMO_SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "GPUOPS_POLICY": str(policy),
        "GPUOPS_DATABASE_URL": f"sqlite:///{tmp_path / 'gpuops.db'}",
        "GPUOPS_POLL_SECONDS": "0",
        "LUMEN_BASE_URL": lumen.base_url,  # <PROVIDER>_BASE_URL, from the descriptor's name
        "LUMEN_TOKEN": LUMEN_TOKEN,
    }
    try:
        yield World(slack, lumen, env, tmp_path)
    finally:
        await lumen.stop()
        await slack.stop()


@dataclass
class Served:
    process: asyncio.subprocess.Process
    sender: SlackSender
    log: Path


@pytest.fixture
async def served(world: World) -> AsyncIterator[Served]:
    """``gpuops serve`` in a child process, healthy."""
    port = _free_port()
    log = world.workdir / "serve.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            GPUOPS,
            *("--log-level", "WARNING", "serve", "--host", "127.0.0.1", "--port", str(port)),
            env=world.env,
            cwd=world.workdir,
            stdout=out,
            stderr=out,
        )
    base = f"http://127.0.0.1:{port}"
    sender = SlackSender(f"{base}/slack/events", DEMO_SIGNING_SECRET, world.slack)
    try:
        await _healthy(process, base, log)
        yield Served(process, sender, log)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await sender.aclose()


async def _healthy(process: asyncio.subprocess.Process, base: str, log: Path) -> None:
    def tail() -> str:
        return f"gpuops serve did not come up: {log.read_text()[-2000:]}"

    def alive() -> None:
        assert process.returncode is None, tail()

    await wait_healthy(f"{base}/healthz", alive, within=90, every=0.05, explain=tail)


async def _answer(world: World, served: Served, user: str, text: str) -> Ephemeral:
    """``user`` types ``/gpu text`` in the channel; their first answer."""
    before = len(world.slack.ephemerals_for(user))
    result = await served.sender.command(user, CHANNEL, text)
    assert result.status == 200 and result.acked_in_time, result
    return await world.slack.wait_for(
        lambda: next(iter(world.slack.ephemerals_for(user)[before:]), None), within=WITHIN
    )


def _roots(world: World) -> list[Message]:
    bot = world.slack.bot_user_id
    return [
        m for m in world.slack.messages.get(CHANNEL, []) if m.user == bot and m.thread_ts is None
    ]


def _reply(world: World, root: Message, needle: str) -> Message | None:
    replies = world.slack.replies(CHANNEL, root.ts)
    return next((m for m in replies if needle in m.text + readable_text(m)), None)


async def test_lumen_lists_shows_and_changes_with_approval_and_a_summary_in_the_thread(
    world: World, served: Served
) -> None:
    listed = await _answer(world, served, DAVE, "list lumen-lab")
    assert "vision-train" in listed.text and "asr-batch" in listed.text, listed.text

    shown = len(_roots(world))
    result = await served.sender.command(DAVE, CHANNEL, "show lumen-lab lc-1")
    assert result.status == 200 and result.acked_in_time, result
    summary = await world.slack.wait_for(
        lambda: next(iter(_roots(world)[shown:]), None), within=WITHIN
    )
    assert "vision-train" in summary.text and "8 GPUs" in summary.text + readable_text(summary)

    # Shrinking needs approval by Lumen's default (its descriptor's approval_by_default).
    asked = len(_roots(world))
    answer = await _answer(world, served, DAVE, 'resize lumen-lab lc-1 gpus=4 reason="q4"')
    root = await world.slack.wait_for(
        lambda: next((m for m in _roots(world)[asked:] if REQUEST_ID.search(m.text)), None),
        within=WITHIN,
    )
    request_id = REQUEST_ID.search(root.text)
    assert request_id is not None and request_id.group(0) in answer.text
    assert root.text.startswith("[pending approval]") and "gpus 8 → 4" in root.text
    prompt = await world.slack.wait_for(
        lambda: next(
            (m for m in world.slack.replies(CHANNEL, root.ts) if "approve_request" in buttons(m)),
            None,
        ),
        within=WITHIN,
    )
    assert world.lumen.calls("POST") == []  # nothing is sent before a second person approves

    clicked = await served.sender.block_action(
        BOB, CHANNEL, action_id="approve_request", value=request_id.group(0), message_ts=prompt.ts
    )
    assert clicked.status == 200 and clicked.acked_in_time, clicked

    def done() -> Message | None:
        now = world.slack.message(CHANNEL, root.ts)
        return now if now is not None and now.text.startswith("[done]") else None

    await world.slack.wait_for(done, within=WITHIN)
    posts = world.lumen.calls("POST")
    assert [(p.path, p.body, p.region) for p in posts] == [
        ("/v2/clusters/lc-1/resize", {"gpus": 4}, "north")
    ]
    after = await world.slack.wait_for(
        lambda: _reply(world, root, "vision-train (lc-1)"), within=WITHIN
    )
    who = readable_text(after)
    assert "4 GPUs" in after.text + who
    assert "requested by <@U04DAVE>" in who and "approved by <@U02BOB>" in who


async def test_help_and_check_config_say_what_the_descriptor_says(
    world: World, served: Served
) -> None:
    helped = await _answer(world, served, DAVE, "help")
    assert "/gpu resize <project> <cluster_id> [field=value …]" in helped.text
    assert "Lumen: gpus" in helped.text

    checked = await asyncio.create_subprocess_exec(
        GPUOPS, "check-config", env=world.env, cwd=world.workdir, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(checked.communicate(), 120)
    assert checked.returncode == 0, err.decode()
    row = next(line for line in out.decode().splitlines() if line.strip().startswith("lumen-lab"))
    assert "lumen (north)" in row and "LUMEN_TOKEN" in row
