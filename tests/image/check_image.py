"""`make image-check` (run by deploy/image-check.sh after it built the image, not by `make
test`): the gpuops image started with podman against the simulators and the Slack stand-in
on this host: /healthz, a signed `/gpu show`, its HEALTHCHECK, a non-root process, a clean
stop, JSON logs, and nothing in it that a server does not need."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from bot.local.demo.stack import (
    DEMO_BOT_TOKEN,
    DEMO_E2E_KEY,
    DEMO_POLICY,
    DEMO_SIGNING_SECRET,
    DEMO_TOGETHER_KEY,
)
from bot.local.slack.sender import SlackSender
from tests.support.process_kit import CREDENTIALS, SLACK_SECRETS, World, running_world, wait_healthy
from tests.support.reliability import closed_port

IMAGE = os.environ.get("GPUOPS_IMAGE", "")
PODMAN = shutil.which("podman") or "/usr/bin/podman"
POSTGRES = "postgresql://postgres@127.0.0.1:5432"
CONTAINER_UID = 10001
# Start-up in a container on a busy 2-core machine: an upper bound, not a margin.
START_WITHIN = 120.0


def podman(
    *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fixed arguments, no shell
        [PODMAN, *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module", autouse=True)
def image() -> Iterator[str]:
    assert IMAGE, "run through `make image-check`, which builds the image and names it"
    assert podman("image", "exists", IMAGE, check=False).returncode == 0, f"no image {IMAGE}"
    yield IMAGE


def test_the_image_holds_nothing_a_server_does_not_need() -> None:
    probe = """
import importlib.metadata, importlib.util, json, pathlib, site
unwanted = ("pytest", "hypothesis", "mypy", "ruff", "rich", "prompt_toolkit")
present = [name for name in unwanted if importlib.util.find_spec(name)]
present += ["bot.local"] if importlib.util.find_spec("bot.local") else []
dists = {d.metadata["Name"] for d in importlib.metadata.distributions()}
present += sorted(dists & {"gpuops-local", "gpuops_local"})
present += [] if "gpuops" in dists else ["no gpuops distribution"]
roots = [pathlib.Path(p) for p in site.getsitepackages()] + [pathlib.Path("/var/lib/gpuops")]
names = ("tests", "bench", "examples")
dirs = sorted(str(p) for root in roots for p in root.glob("*") if p.name in names)
local = sorted(str(p) for p in pathlib.Path("/opt/gpuops").rglob("*") if "bot/local" in str(p))
print(json.dumps({"present": present, "dirs": dirs, "local": local}))
"""
    done = podman("run", "--rm", "--network", "none", "--entrypoint", "python3", IMAGE, "-c", probe)
    assert json.loads(done.stdout) == {"present": [], "dirs": [], "local": []}
    demo = podman("run", "--rm", "--network", "none", IMAGE, "demo", check=False)
    assert demo.returncode == 1
    assert "the demo is not part of this installation" in demo.stderr


@dataclass
class Host(World):
    database_url: str


@pytest.fixture
async def host() -> AsyncIterator[Host]:
    """The simulators and the stand-in on this host, and a database of its own."""
    name = f"gpuops_image_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(f"{POSTGRES}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        async with running_world() as world:
            yield Host(world.slack, world.together, world.e2e, f"{POSTGRES}/{name}")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def running(container: str) -> Callable[[], None]:
    """For ``wait_healthy``: fails at once when the container has stopped."""

    def check() -> None:
        state = podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
        assert state == "running", podman("logs", container).stderr

    return check


async def test_the_image_serves_slack_as_a_non_root_user(host: Host, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yml"
    policy.write_text(DEMO_POLICY)
    policy.chmod(0o644)
    port = closed_port()
    container = f"gpuops-check-{uuid.uuid4().hex[:8]}"
    env = {
        **SLACK_SECRETS,
        **CREDENTIALS,
        **host.urls(),
        "GPUOPS_DATABASE_URL": host.database_url,
        "GPUOPS_LOG_FORMAT": "json",
        "GPUOPS_PORT": str(port),
    }
    run = ["run", "--detach", "--name", container, "--network", "host"]
    run += ["--health-interval", "disable"]  # no systemd timers here: run it by hand below
    run += ["--volume", f"{policy}:/etc/gpuops/policy.yml:ro"]
    run += [arg for name in env for arg in ("--env", name)]  # values from podman's env
    podman(*run, IMAGE, "serve", "--host", "127.0.0.1", env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_healthy(
            f"{base}/healthz",
            running(container),
            within=START_WITHIN,
            every=0.5,
            timeout=2.0,
            explain=lambda: podman("logs", container).stderr,
        )
        async with SlackSender(f"{base}/slack/events", DEMO_SIGNING_SECRET, host.slack) as sender:
            answer = await sender.command(
                "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved"
            )
        assert answer.status == 200
        posted = await host.slack.wait_for(
            lambda: next(iter(host.slack.messages.get("C0INCIDENT", [])), None), within=30.0
        )
        assert posted.text.startswith("train-h100-reserved (tc-h100-reserved)")

        status = podman("exec", container, "cat", "/proc/1/status").stdout
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert uids == [str(CONTAINER_UID)] * 4  # real, effective, saved, filesystem
        assert podman("healthcheck", "run", container, check=False).returncode == 0

        podman("stop", "--time", "20", container)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip()
        logs = podman("logs", container).stderr
    finally:
        podman("rm", "--force", container, check=False)
    assert code == "0", logs
    entries = [json.loads(line) for line in logs.splitlines()]
    messages = [entry["message"] for entry in entries]
    assert any(m.startswith("Slack accepted the bot token") for m in messages)
    assert "stopping" in messages
    for secret in (DEMO_BOT_TOKEN, DEMO_SIGNING_SECRET, DEMO_TOGETHER_KEY, DEMO_E2E_KEY):
        assert secret not in logs
