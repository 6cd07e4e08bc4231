"""``gpuops serve`` and ``socket`` as real processes at start-up and beyond (SPEC §12): the
bot token checked with auth.test against the Slack stand-in (refused: exit 1 with one
line; unreachable: /healthz 503 with the reason until Slack answers), SIGHUP not fatal, and
JSON logs that parse line by line and carry the request's context."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from asyncio.subprocess import DEVNULL
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.local.demo.stack import DEMO_BOT_TOKEN, DEMO_POLICY, DEMO_SIGNING_SECRET
from bot.local.faults.proxy import FaultProxy
from bot.local.slack.sender import SlackSender
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

APP_TOKEN = "xapp-1-A0GPUOPS-cli-start-test"
StartServer = Callable[..., Awaitable["Server"]]
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@dataclass
class Stand(World):
    policy: Path


@pytest.fixture
async def stand(tmp_path: Path) -> AsyncIterator[Stand]:
    policy = tmp_path / "policy.yml"
    policy.write_text(DEMO_POLICY)
    async with running_world(app_token=APP_TOKEN) as world:
        yield Stand(world.slack, world.together, world.e2e, policy)


def stand_env(tmp_path: Path, stand: Stand, **extra: str) -> dict[str, str]:
    settings = {"SLACK_APP_TOKEN": APP_TOKEN, **stand.urls()}
    return base_env(tmp_path, stand.policy, **{**settings, **extra})


@dataclass
class Server:
    """A running ``gpuops`` process whose stderr lines are read as they come."""

    process: asyncio.subprocess.Process
    base: str
    lines: list[str] = field(default_factory=list)
    _new_line: asyncio.Event = field(default_factory=asyncio.Event)
    _reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self.lines.append(raw.decode().rstrip("\n"))
            self._new_line.set()

    async def wait_line(self, predicate: Callable[[str], bool], within: float = 60.0) -> str:
        async with asyncio.timeout(within):
            while True:
                found = next((line for line in self.lines if predicate(line)), None)
                if found is not None:
                    return found
                self._new_line.clear()
                await self._new_line.wait()

    async def health(self) -> httpx.Response | None:
        async with httpx.AsyncClient(timeout=1.0) as client:
            try:
                return await client.get(f"{self.base}/healthz")
            except httpx.TransportError:
                return None

    async def wait_health(self, status: int, within: float = 60.0) -> httpx.Response:
        return await wait_healthy(
            f"{self.base}/healthz",
            still_running(self.process, self.log),
            within=within,
            status=status,
            explain=self.log,
        )

    def log(self) -> str:
        return "\n".join(self.lines)

    async def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.process.wait(), 10)
        if self._reader is not None:
            await self._reader
        return code


@pytest.fixture
async def start_server() -> AsyncIterator[StartServer]:
    servers: list[Server] = []

    async def start(command: str, env: dict[str, str], cwd: Path, *extra: str) -> Server:
        # Port 0: the system gives the server a port no other test holds (a probed free port
        # can be taken by another worker before the server binds it), and the log says which.
        process = await start_gpuops(command, 0, env, cwd, *extra, stdout=DEVNULL)
        server = Server(process, "")
        server._reader = asyncio.create_task(server._read())
        servers.append(server)
        listening = await server.wait_line(lambda line: "listening on http://" in line)
        found = re.search(r"listening on (http://127\.0\.0\.1:[0-9]+)", listening)
        assert found is not None, listening
        server.base = found.group(1)
        return server

    yield start
    for server in servers:
        if server.process.returncode is None:
            server.process.kill()
            await server.process.wait()
        if server._reader is not None:
            await server._reader


# -- the token checked at start ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "refusal"),
    [("serve", "token_revoked"), ("serve", "invalid_auth"), ("socket", "account_inactive")],
)
async def test_a_refused_token_stops_start_up_with_one_line_naming_it(
    tmp_path: Path, stand: Stand, command: str, refusal: str
) -> None:
    env = stand_env(tmp_path, stand)
    if refusal == "invalid_auth":  # a token of another workspace: Slack does not know it
        env["SLACK_BOT_TOKEN"] = "xoxb-1-another-workspace"
    else:
        stand.slack.token_refusal = refusal
    done = await run_gpuops([command, "--port", str(free_port())], env, tmp_path)
    assert done.code == 1, done.stderr
    naming = [line for line in done.stderr.splitlines() if "SLACK_BOT_TOKEN" in line]
    assert naming == [
        f"gpuops: Slack refused SLACK_BOT_TOKEN ({refusal}): set the bot token (xoxb-…) "
        "of this app's installation"
    ]
    assert "Traceback" not in done.stderr
    assert [call.method for call in stand.slack.calls] == ["auth.test"]  # nothing else tried
    for secret in (DEMO_BOT_TOKEN, APP_TOKEN, *CREDENTIALS.values()):
        assert secret not in done.stderr


async def test_while_slack_is_unreachable_healthz_says_why_and_serving_starts_once_it_answers(
    tmp_path: Path, stand: Stand, start_server: StartServer
) -> None:
    assert stand.slack.port is not None
    proxy = FaultProxy(target_port=stand.slack.port)
    await proxy.start()
    proxy.refuse()
    try:
        env = stand_env(tmp_path, stand, SLACK_API_URL=f"http://127.0.0.1:{proxy.port}/api/")
        server = await start_server("serve", env, tmp_path)
        answer = await server.wait_health(503)
        while "Slack is unreachable" not in answer.json().get("reason", ""):
            answer = await server.wait_health(503)
        assert answer.json()["ok"] is False
        assert f"at http://127.0.0.1:{proxy.port}/api/" in answer.json()["reason"]
        async with httpx.AsyncClient() as client:
            early = await client.post(f"{server.base}/slack/events", content=b"{}")
        assert early.status_code == 503  # Slack's request is retried, not half-served
        await server.wait_line(lambda line: "auth.test attempt 1: Slack is unreachable" in line)

        await proxy.heal_async()
        await server.wait_health(200)
        async with SlackSender(
            f"{server.base}/slack/events", DEMO_SIGNING_SECRET, stand.slack
        ) as sender:
            result = await sender.command(
                "U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved"
            )
        assert result.status == 200
        await stand.slack.wait_for(lambda: stand.slack.messages.get("C0INCIDENT"))
        assert await server.stop() == 0
    finally:
        await proxy.close()
    retries = [line for line in server.lines if "auth.test attempt" in line]
    assert retries and all("trying again in" in line for line in retries)
    assert not any("Traceback" in line for line in server.lines)


async def test_socket_mode_checks_the_token_then_connects(
    tmp_path: Path, stand: Stand, start_server: StartServer
) -> None:
    server = await start_server("socket", stand_env(tmp_path, stand), tmp_path)
    await server.wait_health(200)
    await stand.slack.socket_mode.wait_connected(within=30.0)
    methods = [call.method for call in stand.slack.calls]
    assert methods.index("auth.test") < methods.index("apps.connections.open")
    assert await server.stop() == 0


@pytest.mark.parametrize("command", ["serve", "socket"])
async def test_a_start_logs_no_bolt_warning_that_the_token_is_unused(
    tmp_path: Path, stand: Stand, start_server: StartServer, command: str
) -> None:
    """SLACK_BOT_TOKEN is set, as in production: Bolt reads it beside our client."""
    env = stand_env(tmp_path, stand)
    assert env["SLACK_BOT_TOKEN"]
    server = await start_server(command, env, tmp_path)
    await server.wait_health(200)
    assert await server.stop() == 0
    assert "listening on http://" in server.log()
    assert "will be unused" not in server.log(), server.log()


# -- SIGHUP ----------------------------------------------------------------------------------


async def test_sighup_does_not_stop_the_server(
    tmp_path: Path, stand: Stand, start_server: StartServer
) -> None:
    server = await start_server("serve", stand_env(tmp_path, stand), tmp_path)
    await server.wait_health(200)
    server.process.send_signal(signal.SIGHUP)
    await server.wait_line(lambda line: "SIGHUP received" in line)
    answer = await server.health()
    assert answer is not None and answer.status_code == 200
    assert server.process.returncode is None
    assert await server.stop() == 0


# -- JSON logs -------------------------------------------------------------------------------


async def test_json_logs_parse_line_by_line_and_carry_the_request_context(
    tmp_path: Path, stand: Stand, start_server: StartServer
) -> None:
    env = stand_env(tmp_path, stand, GPUOPS_LOG_FORMAT="json")
    server = await start_server("serve", env, tmp_path, "--log-level", "DEBUG")
    await server.wait_health(200)
    async with SlackSender(
        f"{server.base}/slack/events", DEMO_SIGNING_SECRET, stand.slack
    ) as sender:
        await sender.command("U04DAVE", "C0INCIDENT", "show together-prod tc-h100-reserved")
        await sender.command(
            "U04DAVE", "C0INCIDENT", "update together-prod tc-h200-ondemand num_gpus=16"
        )
    await stand.slack.wait_for(lambda: stand.together.calls("update", "PUT"), within=30.0)
    # aiohttp's own line (with a traceback) for a request that is not HTTP at all
    reader, writer = await asyncio.open_connection("127.0.0.1", int(server.base.rsplit(":", 1)[1]))
    writer.write(b"NOT HTTP \x00\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()
    await server.wait_line(lambda line: '"logger": "aiohttp.server"' in line)
    assert await server.stop() == 0

    entries = [json.loads(line) for line in server.lines]  # every line is one JSON object
    assert len(entries) > 20
    for entry in entries:
        assert {"ts", "level", "logger", "message"} <= set(entry)
        assert RFC3339_UTC.fullmatch(entry["ts"]), entry["ts"]
    loggers = {entry["logger"] for entry in entries}
    assert any(name.startswith("slack_bolt") for name in loggers)
    bad_request = next(e for e in entries if e["logger"] == "aiohttp.server")
    assert "BadHttpMethod" in bad_request["exception"]
    handled = [e for e in entries if e.get("user") == "U04DAVE"]
    assert handled and all(e["channel"] == "C0INCIDENT" for e in handled)
    assert any(
        e.get("project") == "together-prod" and e.get("cluster") == "tc-h100-reserved"
        for e in handled
    )
    sending = [e for e in entries if e.get("request_id", "").startswith("CR-")]
    assert sending and all(e["cluster"] == "tc-h200-ondemand" for e in sending)
    blob = "\n".join(server.lines)
    for secret in (DEMO_BOT_TOKEN, DEMO_SIGNING_SECRET, *CREDENTIALS.values()):
        assert secret not in blob


async def test_an_unknown_log_format_is_refused(tmp_path: Path, stand: Stand) -> None:
    env = stand_env(tmp_path, stand, GPUOPS_LOG_FORMAT="yaml")
    done = await run_gpuops(["serve", "--port", str(free_port())], env, tmp_path)
    assert done.code == 1
    assert done.stderr.strip() == "gpuops: GPUOPS_LOG_FORMAT must be text or json (got 'yaml')"


# -- check-config --policy and --online ----------------------------------------------------


async def test_check_config_online_passes_each_check_on_its_own_line(
    tmp_path: Path, stand: Stand
) -> None:
    elsewhere = tmp_path / "elsewhere.yml"  # --policy wins over GPUOPS_POLICY
    elsewhere.write_text(DEMO_POLICY)
    env = stand_env(tmp_path, stand, GPUOPS_POLICY=str(tmp_path / "absent.yml"))
    done = await run_gpuops(["check-config", "--policy", str(elsewhere), "--online"], env, tmp_path)
    assert done.code == 0, done.stdout + done.stderr
    checks = done.stdout.split("online checks:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    shown = [re.sub(r"listed \d+ ", "listed N ", " ".join(line.split())) for line in checks]
    assert [line.split(";", 1)[0] for line in shown] == [
        "ok Slack auth.test: the bot is UBOT in team T0GPUOPS",
        "ok notify_channel C0GPUAUDIT (e2e-delhi, together-prod): the bot is a member",
        "ok e2e-delhi (e2e): one read: listed N cluster(s) and read each",
        "ok together-prod (together): one read: listed N cluster(s) and read each",
    ]
    assert f"policy: {elsewhere}" in done.stdout and "configuration OK" in done.stdout
    assert stand.together.calls("list") and stand.e2e.calls("list")
    for secret in (DEMO_BOT_TOKEN, *CREDENTIALS.values()):
        assert secret not in done.stdout + done.stderr


async def test_check_config_online_names_unknown_and_missing_fields_reading_only(
    tmp_path: Path, stand: Stand
) -> None:
    for cluster in stand.together.clusters.values():
        cluster["zz_probe_extra"] = {"nested": 1}  # a field no model knows
        del cluster["machine_cluster_id"]  # a field the model declares
    plain_detail = stand.e2e.detail

    def altered_detail(cluster: Any) -> dict[str, Any]:  # E2E's GET of one cluster
        body = plain_detail(cluster)
        body["zz_e2e_extra"] = True
        del body["private_cloud_name"]
        return body

    stand.e2e.detail = altered_detail  # type: ignore[method-assign]
    stand.together.requests.clear()
    stand.e2e.requests.clear()
    done = await run_gpuops(["check-config", "--online"], stand_env(tmp_path, stand), tmp_path)
    assert done.code == 0, done.stdout + done.stderr
    for project, extra, absent in (
        ("together-prod (together)", "zz_probe_extra", "machine_cluster_id"),
        ("e2e-delhi (e2e)", "zz_e2e_extra", "private_cloud_name"),
    ):
        line = next(x for x in done.stdout.splitlines() if f"{project}: one read" in x)
        known, _, lacking = line.partition("the replies lack: ")
        assert extra in known.split("do not know: ", 1)[1].split("; ")[0].split(", "), line
        assert absent in lacking.split(", "), line
    requests = stand.together.requests + stand.e2e.requests
    assert len(requests) > 2 and {r.method for r in requests} == {"GET"}  # the list, each get
    paths = {r.path for r in stand.together.requests}
    assert {"/v1/compute/clusters", "/v1/compute/clusters/tc-h100-reserved"} <= paths
    for secret in (DEMO_BOT_TOKEN, *CREDENTIALS.values()):
        assert secret not in done.stdout + done.stderr


async def test_check_config_online_names_each_failure_and_exits_1(
    tmp_path: Path, stand: Stand
) -> None:
    stand.slack.not_member_channels = {"C0LONELY": "lonely"}
    stand.policy.write_text(
        DEMO_POLICY.replace(
            "    auth_token_env: E2E_AUTH_TOKEN\n    notify_channel: C0GPUAUDIT\n",
            "    auth_token_env: E2E_AUTH_TOKEN\n    notify_channel: C0LONELY\n",
        )
    )
    env = stand_env(tmp_path, stand, E2E_API_KEY="e2e-key-that-is-wrong")
    done = await run_gpuops(["check-config", "--online"], env, tmp_path)
    assert done.code == 1, done.stdout + done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert "ok Slack auth.test: the bot is UBOT in team T0GPUOPS" in lines
    assert (
        "FAIL notify_channel C0LONELY (e2e-delhi): the bot is not a member: "
        "invite the bot there with /invite @gpuops" in lines
    )
    assert "ok notify_channel C0GPUAUDIT (together-prod): the bot is a member" in lines
    failed_read = next(line for line in lines if line.startswith("FAIL e2e-delhi (e2e): one read"))
    assert "401" in failed_read
    assert any(line.startswith("ok together-prod (together): one read: listed") for line in lines)
    assert "error: 2 online check(s) failed" in lines
    assert "e2e-key-that-is-wrong" not in done.stdout + done.stderr


async def test_check_config_online_names_a_scope_the_installation_lacks(
    tmp_path: Path, stand: Stand
) -> None:
    stand.slack.scopes = stand.slack.scopes - {"channels:read", "groups:read"}
    done = await run_gpuops(["check-config", "--online"], stand_env(tmp_path, stand), tmp_path)
    assert done.code == 1
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert (
        "FAIL notify_channel C0GPUAUDIT (e2e-delhi, together-prod): the app lacks the scope "
        "channels:read,groups:read,im:read,mpim:read: reinstall it from manifest.yml" in lines
    )


async def test_check_config_online_with_a_refused_token(tmp_path: Path, stand: Stand) -> None:
    stand.slack.token_refusal = "token_revoked"
    done = await run_gpuops(["check-config", "--online"], stand_env(tmp_path, stand), tmp_path)
    assert done.code == 1
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert (
        "FAIL Slack auth.test: Slack refused SLACK_BOT_TOKEN (token_revoked): set the bot "
        "token (xoxb-…) of this app's installation" in lines
    )
    assert [call.method for call in stand.slack.calls] == ["auth.test"]
