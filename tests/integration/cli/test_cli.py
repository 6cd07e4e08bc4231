"""The ``gpuops`` console script as a real subprocess: check-config on a good and a bad
policy, ``serve`` against a fake Slack and the simulators started here (ready on /healthz,
a signed /gpu show works through it, SIGTERM stops it), and ``socket`` without its token."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bot.core.store import Store
from bot.local.demo.stack import DEMO_BOT_TOKEN, DEMO_POLICY, DEMO_SIGNING_SECRET
from bot.local.faults.proxy import FaultProxy
from bot.local.slack.sender import SlackSender, Tamper
from tests.support.process_kit import (
    CREDENTIALS,
    World,
    base_env,
    free_port,
    run_gpuops,
    running_world,
    start_gpuops,
    still_running,
    wait_healthy,
)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(DEMO_POLICY)
    return path


# -- check-config ---------------------------------------------------------------------------


async def test_check_config_prints_the_grant_table(tmp_path: Path, policy_file: Path) -> None:
    done = await run_gpuops(["check-config"], base_env(tmp_path, policy_file), tmp_path)
    assert done.code == 0, done.stdout + done.stderr
    out = done.stdout
    assert "configuration OK" in out
    for header in ("WHO", "PROJECT", "ROLE", "CHANNELS"):
        assert header in out
    rows = [line.split() for line in out.splitlines()]
    assert ["user", "U01ALICE", "together-prod", "admin", "any"] in rows
    assert ["user", "U04DAVE", "e2e-delhi", "operator", "any"] in rows
    assert ["user", "U05ERIN", "together-prod", "viewer", "C0INCIDENT"] in rows
    assert ["group", "S0PLATFORM", "e2e-delhi", "approver", "any"] in rows
    assert "U06MALLORY" not in out  # no grant, not in the table
    assert "e2e (Delhi, project 12345)" in out
    for secret in (DEMO_BOT_TOKEN, DEMO_SIGNING_SECRET, *CREDENTIALS.values()):
        assert secret not in out + done.stderr


async def test_check_config_names_the_bad_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        DEMO_POLICY.replace(
            "    provider: together\n", "    provider: together\n    colour: blue\n"
        )
    )
    done = await run_gpuops(["check-config"], base_env(tmp_path, bad), tmp_path)
    assert done.code == 1
    assert "projects.together-prod.colour" in done.stdout and "unknown key" in done.stdout
    assert "configuration OK" not in done.stdout


async def test_check_config_names_a_missing_credential(tmp_path: Path, policy_file: Path) -> None:
    env = base_env(tmp_path, policy_file)
    del env["E2E_AUTH_TOKEN"]
    done = await run_gpuops(["check-config"], env, tmp_path)
    assert done.code == 1
    assert "E2E_AUTH_TOKEN is not set" in done.stdout and "e2e-delhi" in done.stdout


# -- serve and socket ---------------------------------------------------------------------------


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with running_world() as running:
        yield running


async def test_serve_answers_signed_requests_and_stops_on_sigterm(
    tmp_path: Path, policy_file: Path, world: World
) -> None:
    port = free_port()
    env = base_env(tmp_path, policy_file, **world.urls())
    process = await start_gpuops("serve", port, env, tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_healthy(f"{base}/healthz", still_running(process), within=60.0)
        async with SlackSender(f"{base}/slack/events", DEMO_SIGNING_SECRET, world.slack) as sender:
            forged = await sender.command(
                "U04DAVE", "C0INCIDENT", "show e2e-delhi 101", tamper=Tamper.WRONG_SIGNATURE
            )
            assert forged.status == 401
            result = await sender.command(
                "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved"
            )
            assert result.status == 200 and result.acked_in_time
        posted = await world.slack.wait_for(
            lambda: next(iter(world.slack.messages.get("C0INCIDENT", [])), None)
        )
        assert posted.text.startswith("train-h100-reserved (tc-h100-reserved)")
        assert world.together.calls("get") and world.e2e.requests == []
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{base}/metrics")).text
        assert 'gpuops_commands_total{command="show",outcome="ok"} 1.0' in metrics

        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 5)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    _, err = await process.communicate()
    log = err.decode()
    assert code == 0, log
    assert "stopping" in log
    for secret in (DEMO_BOT_TOKEN, DEMO_SIGNING_SECRET, *CREDENTIALS.values()):
        assert secret not in log


async def test_socket_without_an_app_token_says_so(tmp_path: Path, policy_file: Path) -> None:
    done = await run_gpuops(
        ["socket", "--port", str(free_port())], base_env(tmp_path, policy_file), tmp_path
    )
    assert done.code != 0
    assert "SLACK_APP_TOKEN" in done.stderr and "Traceback" not in done.stderr


# -- serve refuses a state store it cannot use ------------------------------------------------


async def test_serve_refuses_a_read_only_sqlite_store(tmp_path: Path, policy_file: Path) -> None:
    path = tmp_path / "gpuops.db"
    await (await Store.open(f"sqlite:///{path}")).close()  # a migrated database file
    # Root ignores file modes, so open the file read-only as SQLite opens a 444 file.
    env = base_env(
        tmp_path, policy_file, GPUOPS_DATABASE_URL=f"sqlite:///file:{path}?mode=ro&uri=true"
    )
    done = await run_gpuops(["serve", "--port", str(free_port())], env, tmp_path)
    assert done.code != 0
    assert f"the state store sqlite:///file:{path}" in done.stderr
    assert "read-only" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.postgres
async def test_serve_names_a_refused_or_silent_database_and_exits_in_time(
    tmp_path: Path, policy_file: Path
) -> None:
    proxy = FaultProxy(target_port=5432)
    await proxy.start()
    try:
        url = f"postgresql://postgres:not-shown@127.0.0.1:{proxy.port}/test"
        env = base_env(tmp_path, policy_file, GPUOPS_DATABASE_URL=url)
        proxy.refuse()
        refused = await run_gpuops(["serve", "--port", str(free_port())], env, tmp_path)
        await proxy.heal_async()
        proxy.hang()
        started = time.monotonic()
        silent = await run_gpuops(["serve", "--port", str(free_port())], env, tmp_path)
        took = time.monotonic() - started
    finally:
        await proxy.close()
    named = f"the state store postgresql://postgres@127.0.0.1:{proxy.port}/test is unavailable"
    for done in (refused, silent):
        assert done.code != 0 and named in done.stderr, done.stderr
        assert "not-shown" not in done.stderr and "Traceback" not in done.stderr
    assert "no answer within 5 s" in silent.stderr  # asyncpg's connect timeout
    assert took < 40  # connect (5 s) plus Python start-up on a shared 2-core machine (21 s seen)


APP_TOKEN = "xapp-1-A0GPUOPS-cli-socket-test"


async def test_socket_connects_to_slack_and_answers_commands_over_it(
    tmp_path: Path, policy_file: Path, world: World
) -> None:
    world.slack.app_token = APP_TOKEN
    port = free_port()
    env = base_env(tmp_path, policy_file, SLACK_APP_TOKEN=APP_TOKEN, **world.urls())
    process = await start_gpuops("socket", port, env, tmp_path)
    try:
        await wait_healthy(f"http://127.0.0.1:{port}/healthz", still_running(process), within=60.0)
        await world.slack.socket_mode.wait_connected(within=60.0)
        async with SlackSender.over_socket_mode(world.slack) as sender:
            result = await sender.command(
                "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved"
            )
            assert result.status == 200 and result.acked_in_time
        posted = await world.slack.wait_for(
            lambda: next(iter(world.slack.messages.get("C0INCIDENT", [])), None)
        )
        assert posted.text.startswith("train-h100-reserved (tc-h100-reserved)")
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 5)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    _, err = await process.communicate()
    log = err.decode()
    assert code == 0, log
    assert "connected in Socket Mode" in log
    for secret in (APP_TOKEN, DEMO_BOT_TOKEN, *CREDENTIALS.values()):
        assert secret not in log


@pytest.mark.postgres
@pytest.mark.parametrize("missing", ["database", "role"])
async def test_serve_names_a_missing_database_or_role_in_one_line(
    tmp_path: Path, policy_file: Path, missing: str
) -> None:
    """Issue #16 point 9: not SQLAlchemy's raw text and its "Background on this error" link."""
    url = (
        "postgresql://postgres@127.0.0.1:5432/gpuops_no_such_db"
        if missing == "database"
        else "postgresql://gpuops_no_such_role@127.0.0.1:5432/test"
    )
    env = base_env(tmp_path, policy_file, GPUOPS_DATABASE_URL=url)
    done = await run_gpuops(["serve", "--port", str(free_port())], env, tmp_path)
    assert done.code != 0
    assert "is unavailable" in done.stderr and "does not exist" in done.stderr, done.stderr
    assert "Background on this error" not in done.stderr and "sqlalche.me" not in done.stderr
    assert "Traceback" not in done.stderr
