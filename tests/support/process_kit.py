"""What a test runs a ``gpuops`` process against (a subprocess or the image): the Slack
stand-in and both simulators on this host with the demo's people, channels and
credentials, the environment that points gpuops at them, and waiting for its /healthz."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bot.local.demo.stack import (
    CHANNELS,
    DEMO_BOT_TOKEN,
    DEMO_E2E_KEY,
    DEMO_E2E_TOKEN,
    DEMO_SIGNING_SECRET,
    DEMO_TOGETHER_KEY,
    USERGROUPS,
    USERS,
)
from bot.local.simulators.e2e import E2ESimulator
from bot.local.simulators.together import TogetherSimulator
from bot.local.slack.server import FakeSlack

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
CREDENTIALS = {
    "TOGETHER_API_KEY": DEMO_TOGETHER_KEY,
    "E2E_API_KEY": DEMO_E2E_KEY,
    "E2E_AUTH_TOKEN": DEMO_E2E_TOKEN,
}
SLACK_SECRETS = {"SLACK_BOT_TOKEN": DEMO_BOT_TOKEN, "SLACK_SIGNING_SECRET": DEMO_SIGNING_SECRET}


@dataclass
class World:
    """The Slack stand-in and the two simulators, running."""

    slack: FakeSlack
    together: TogetherSimulator
    e2e: E2ESimulator

    def urls(self) -> dict[str, str]:
        """The settings that point gpuops at this world (no provider polls: tests drive)."""
        return {
            "SLACK_API_URL": self.slack.api_url,
            "TOGETHER_BASE_URL": self.together.base_url,
            "E2E_BASE_URL": self.e2e.base_url,
            "GPUOPS_POLL_SECONDS": "0",
        }


@asynccontextmanager
async def running_world(app_token: str | None = None) -> AsyncIterator[World]:
    """The world started, and stopped on the way out (``app_token``: for Socket Mode)."""
    slack = FakeSlack(
        DEMO_BOT_TOKEN, channels=CHANNELS, users=USERS, usergroups=USERGROUPS, app_token=app_token
    )
    together = TogetherSimulator(api_key=DEMO_TOGETHER_KEY, transition_seconds=0.3)
    e2e = E2ESimulator(api_key=DEMO_E2E_KEY, auth_token=DEMO_E2E_TOKEN, transition_seconds=0.3)
    await slack.start()
    await together.start()
    await e2e.start()
    try:
        yield World(slack, together, e2e)
    finally:
        await e2e.stop()
        await together.stop()
        await slack.stop()


def base_env(tmp_path: Path, policy: Path, **extra: str) -> dict[str, str]:
    """A clean environment: nothing leaks in from the developer's shell."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        **SLACK_SECRETS,
        "GPUOPS_POLICY": str(policy),
        "GPUOPS_DATABASE_URL": f"sqlite:///{tmp_path / 'gpuops.db'}",
        **CREDENTIALS,
        **extra,
    }


@dataclass
class Finished:
    code: int
    stdout: str
    stderr: str


async def run_gpuops(
    args: list[str], env: dict[str, str], cwd: Path, *, within: float = 120.0
) -> Finished:
    """``gpuops`` to its end (a busy machine takes its time starting Python: no margin)."""
    process = await asyncio.create_subprocess_exec(
        GPUOPS,
        *args,
        env=env,
        cwd=cwd,
        stdout=PIPE,
        stderr=PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), within)
    assert process.returncode is not None
    return Finished(process.returncode, out.decode(), err.decode())


async def start_gpuops(
    command: str, port: int, env: dict[str, str], cwd: Path, *options: str, stdout: int = PIPE
) -> asyncio.subprocess.Process:
    """``gpuops [options] serve|socket`` on 127.0.0.1:``port``, left running (stderr piped)."""
    return await asyncio.create_subprocess_exec(
        GPUOPS,
        *options,
        command,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        env=env,
        cwd=cwd,
        stdout=stdout,
        stderr=PIPE,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def still_running(
    process: asyncio.subprocess.Process, explain: Callable[[], str] = str
) -> Callable[[], None]:
    """For ``wait_healthy``: fails at once when the process it waits for has exited."""

    def check() -> None:
        assert process.returncode is None, f"gpuops exited during start-up\n{explain()}"

    return check


async def wait_healthy(
    url: str,
    check: Callable[[], None],
    *,
    within: float,
    status: int = 200,
    every: float = 0.1,
    timeout: float = 1.0,
    explain: Callable[[], str] = str,
) -> httpx.Response:
    """Ask ``url`` until it answers ``status``. ``check`` fails the test as soon as what
    should answer is gone; past ``within`` it fails with ``explain()`` (its logs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    async with httpx.AsyncClient(timeout=timeout) as client:
        while loop.time() < deadline:
            check()
            try:
                answer = await client.get(url)
            except httpx.TransportError:
                answer = None  # not listening yet: it is running, so wait and ask again
            if answer is not None and answer.status_code == status:
                return answer
            await asyncio.sleep(every)
    pytest.fail(f"{url} did not answer {status} within {within} s:\n{explain()}")
