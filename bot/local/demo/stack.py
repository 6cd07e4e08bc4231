"""One process, everything local: both provider simulators, the Slack stand-in, and the bot
in HTTP mode against them — over real HTTP on 127.0.0.1. The demo console, the integration
tests and the benchmarks all run on this."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.config import Settings
from bot.local.simulators.e2e import E2ESimulator
from bot.local.simulators.oncall import OpsgenieSimulator, PagerDutySimulator
from bot.local.simulators.together import TogetherSimulator
from bot.local.slack.sender import SlackSender
from bot.local.slack.server import BOT_SCOPES, FakeSlack
from bot.runtime import Runtime
from bot.slack.deadline import RUNNING_LISTENERS, DeadlineSocketModeHandler
from bot.slack.http_server import HttpLimits, LimitedSite, limited_runner

# Values that only exist here; distinctive so that leak scans can look for them.
DEMO_BOT_TOKEN = "xoxb-demo-0000-bot-token-gpuops"  # noqa: S105
DEMO_SIGNING_SECRET = "demo-signing-secret-5f2b9c"  # noqa: S105
DEMO_APP_TOKEN = "xapp-1-A0GPUOPS-demo-socket-mode"  # noqa: S105
DEMO_TOGETHER_KEY = "demo-together-key-8d41e7"
DEMO_E2E_KEY = "demo-e2e-apikey-3a9c50"
DEMO_E2E_TOKEN = "demo-e2e-token-7b1f22"  # noqa: S105
DEMO_PAGERDUTY_TOKEN = "demo-pagerduty-token-41c9d0"  # noqa: S105
DEMO_OPSGENIE_KEY = "demo-opsgenie-key-93e2a7"

USERS = {
    "U01ALICE": "alice",  # admin
    "U02BOB": "bob",  # approver
    "U03CAROL": "carol",  # approver (through the platform user group)
    "U04DAVE": "dave",  # operator
    "U05ERIN": "erin",  # viewer
    "U06MALLORY": "mallory",  # no grant at all
}
ROLES = {
    "U01ALICE": "admin",
    "U02BOB": "approver",
    "U03CAROL": "approver (via group S0PLATFORM)",
    "U04DAVE": "operator",
    "U05ERIN": "viewer",
    "U06MALLORY": "no access",
}
CHANNELS = {"C0INCIDENT": "incident", "C0GPUAUDIT": "gpu-audit", "C0RANDOM": "random"}
USERGROUPS = {"S0PLATFORM": ["U03CAROL"]}
EMAILS = {user: f"{name}@example.com" for user, name in USERS.items()}  # users.lookupByEmail
USERGROUP_HANDLES = {"S0PLATFORM": "platform"}  # as a mention of the group reads

DEMO_POLICY = """\
projects:
  together-prod:
    provider: together
    api_key_env: TOGETHER_API_KEY
    project_id: proj-123
    notify_channel: C0GPUAUDIT
  e2e-delhi:
    provider: e2e
    project_id: 12345
    location: Delhi
    api_key_env: E2E_API_KEY
    auth_token_env: E2E_AUTH_TOKEN
    notify_channel: C0GPUAUDIT
grants:
  - users: [U01ALICE]
    projects: ["*"]
    role: admin
  - users: [U02BOB]
    projects: ["*"]
    role: approver
  - usergroups: [S0PLATFORM]
    projects: ["*"]
    role: approver
  - users: [U04DAVE]
    projects: [together-prod, e2e-delhi]
    role: operator
  - users: [U05ERIN]
    projects: ["*"]
    role: viewer
    channels: [C0INCIDENT]
approvals:
  expire_after_minutes: 30
  break_glass: true
"""

# The demo console's policy: DEMO_POLICY with both projects watched (SPEC §7), so the tour
# can show health alerts from either provider and a remediation approved from #gpu-audit.
# A file beside this module (examples/demo-policy.yml links to it), so that it can be read.
DEMO_POLICY_FILE = Path(__file__).with_name("demo-policy.yml")
WATCHED_DEMO_POLICY = DEMO_POLICY_FILE.read_text(encoding="utf-8")
DEMO_WATCH_EVERY_SECONDS = 1.0  # the demo polls faster than a policy may (≥ 15 s)


@dataclass
class StackOptions:
    policy_yaml: str = DEMO_POLICY
    database_url: str | None = None  # default: a SQLite file in the work directory
    poll_seconds: float = 1.0
    followup_minutes: float = 30.0
    transition_seconds: float = 3.0
    stepwise_transitions: bool = False  # see TogetherSimulator.stepwise
    sweep_seconds: float = 30.0
    total_timeout: float = 30.0
    provider_attempts: int = 4
    instance_id: str = "demo-1"
    bot_token: str = DEMO_BOT_TOKEN
    signing_secret: str = DEMO_SIGNING_SECRET
    together_key: str = DEMO_TOGETHER_KEY
    e2e_key: str = DEMO_E2E_KEY
    e2e_token: str = DEMO_E2E_TOKEN
    start_background: bool = True
    http_limits: HttpLimits | None = None  # default: those of ``gpuops serve``
    oncall_now: datetime | None = None  # the on-call simulators' clock (default: now)
    slack_scopes: frozenset[str] | None = None  # default: the manifest's
    extra_settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class BotReplica:
    """One running bot — its Runtime, its HTTP server on 127.0.0.1 and a sender signed for
    it — as a separate ``gpuops serve`` process would be."""

    runtime: Runtime
    sender: SlackSender
    events_url: str
    base_url: str
    _runner: web.AppRunner

    async def stop(self) -> None:
        await self.sender.aclose()
        await self._runner.cleanup()
        await self.runtime.close()


async def serve_bot(
    settings: Settings,
    env: dict[str, str],
    slack: FakeSlack,
    *,
    instance_id: str,
    start_background: bool = True,
    http_limits: HttpLimits | None = None,
) -> BotReplica:
    """Build a Runtime from ``settings`` and serve its ``/slack/events`` on 127.0.0.1, with
    the HTTP limits of ``gpuops serve``."""
    runtime = await Runtime.create(settings, env=env, instance_id=instance_id)
    if start_background:
        await runtime.start()  # as ``gpuops serve``: auth.test, then the background work
    limits = http_limits or HttpLimits()
    runner = limited_runner(runtime.web_app(limits), limits, shutdown_timeout=0.5)
    await runner.setup()
    site = LimitedSite(runner, "127.0.0.1", 0, max_connections=limits.max_connections)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base_url = f"http://127.0.0.1:{port}"
    events_url = f"{base_url}/slack/events"
    signing = settings.slack_signing_secret
    sender = SlackSender(events_url, signing.get_secret_value() if signing else "", slack)
    return BotReplica(runtime, sender, events_url, base_url, runner)


@dataclass
class LocalStack:
    options: StackOptions
    workdir: Path
    together: TogetherSimulator
    e2e: E2ESimulator
    slack: FakeSlack
    runtime: Runtime
    sender: SlackSender
    events_url: str
    base_url: str
    _runner: web.AppRunner
    pagerduty: PagerDutySimulator
    opsgenie: OpsgenieSimulator
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    replicas: list[BotReplica] = field(default_factory=list)
    _socket: DeadlineSocketModeHandler | None = None

    @classmethod
    async def start(
        cls, options: StackOptions | None = None, workdir: Path | None = None
    ) -> LocalStack:
        options = options or StackOptions()
        tmp = None
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="gpuops-")
            workdir = Path(tmp.name)
        together = TogetherSimulator(
            api_key=options.together_key,
            transition_seconds=options.transition_seconds,
            stepwise=options.stepwise_transitions,
        )
        e2e = E2ESimulator(
            api_key=options.e2e_key,
            auth_token=options.e2e_token,
            transition_seconds=options.transition_seconds,
        )
        slack = FakeSlack(
            options.bot_token,
            channels=CHANNELS,
            users=USERS,
            usergroups=USERGROUPS,
            emails=EMAILS,
            scopes=BOT_SCOPES if options.slack_scopes is None else options.slack_scopes,
        )
        pagerduty = PagerDutySimulator(DEMO_PAGERDUTY_TOKEN, now=options.oncall_now)
        opsgenie = OpsgenieSimulator(DEMO_OPSGENIE_KEY, now=options.oncall_now)
        await pagerduty.start()
        await opsgenie.start()
        await together.start()
        await e2e.start()
        api_url = await slack.start()
        policy_path = workdir / "policy.yml"
        policy_path.write_text(options.policy_yaml)
        settings = Settings(
            _env_file=None,
            slack_bot_token=options.bot_token,
            slack_signing_secret=options.signing_secret,
            slack_api_url=api_url,
            gpuops_policy=policy_path,
            gpuops_database_url=options.database_url or f"sqlite:///{workdir / 'gpuops.db'}",
            gpuops_provider_base_urls={"together": together.base_url, "e2e": e2e.base_url},
            gpuops_poll_seconds=options.poll_seconds,
            gpuops_followup_minutes=options.followup_minutes,
            gpuops_sweep_seconds=options.sweep_seconds,
            gpuops_total_timeout=options.total_timeout,
            gpuops_provider_attempts=options.provider_attempts,
            gpuops_instance_id=options.instance_id,
            gpuops_oncall_base_urls={
                "pagerduty": pagerduty.base_url,
                "opsgenie": opsgenie.base_url,
            },
            **options.extra_settings,
        )
        bot = await serve_bot(
            settings,
            _provider_env(options),
            slack,
            instance_id=options.instance_id,
            start_background=options.start_background,
            http_limits=options.http_limits,
        )
        return cls(
            options,
            workdir,
            together,
            e2e,
            slack,
            bot.runtime,
            bot.sender,
            bot.events_url,
            bot.base_url,
            bot._runner,
            pagerduty,
            opsgenie,
            tmp,
        )

    async def start_replica(
        self,
        instance_id: str,
        *,
        start_background: bool | None = None,
        database_url: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> BotReplica:
        """Another bot replica on the same database, simulators and FakeSlack (as a second
        ``gpuops serve`` would be); stopped with the stack. Several replicas need a database
        that several processes share: PostgreSQL (or, one at a time, the SQLite file).
        ``database_url`` reaches that same database another way (e.g. a fault proxy);
        ``settings`` overrides this replica's settings (e.g. tighter store bounds)."""
        update: dict[str, Any] = {**(settings or {}), "gpuops_instance_id": instance_id}
        if database_url is not None:
            update["gpuops_database_url"] = database_url
        replica_settings = self.runtime.settings.model_copy(update=update)
        replica = await serve_bot(
            replica_settings,
            _provider_env(self.options),
            self.slack,
            instance_id=instance_id,
            start_background=(
                self.options.start_background if start_background is None else start_background
            ),
        )
        self.replicas.append(replica)
        return replica

    async def restart_bot(self, *, instance_id: str | None = None) -> None:
        """Stop the bot (server and runtime) and start a fresh one on the same database,
        simulators and FakeSlack, as a process restart would; ``runtime``, ``sender``,
        ``events_url`` and ``base_url`` then refer to the new one (connected over Socket Mode
        again if the old one was)."""
        socket_mode = self._socket is not None
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        await BotReplica(
            self.runtime, self.sender, self.events_url, self.base_url, self._runner
        ).stop()
        settings = self.runtime.settings
        if instance_id is not None:
            settings = settings.model_copy(update={"gpuops_instance_id": instance_id})
        bot = await serve_bot(
            settings,
            _provider_env(self.options),
            self.slack,
            instance_id=instance_id or settings.gpuops_instance_id or self.options.instance_id,
            start_background=self.options.start_background,
        )
        self.runtime, self.sender, self._runner = bot.runtime, bot.sender, bot._runner
        self.events_url, self.base_url = bot.events_url, bot.base_url
        if socket_mode:
            await self.use_socket_mode(self.slack.app_token or DEMO_APP_TOKEN)

    async def use_socket_mode(self, app_token: str = DEMO_APP_TOKEN) -> None:
        """Connect the bot to the FakeSlack over Socket Mode (as ``gpuops socket`` does) and
        send everything as envelopes from now on instead of signed HTTP requests."""
        self.slack.app_token = app_token
        opened = self.slack.socket_mode.opened
        self._socket = DeadlineSocketModeHandler(self.runtime.bolt, app_token)
        await self._socket.connect_async()  # type: ignore[no-untyped-call]
        await self.slack.socket_mode.wait_connected(within=10.0, opened=opened + 1)
        await self.sender.aclose()
        self.sender = SlackSender.over_socket_mode(self.slack)

    async def stop(self) -> None:
        await handlers_finished()
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
        for replica in reversed(self.replicas):
            await replica.stop()
        self.replicas.clear()
        await self.sender.aclose()
        await self._runner.cleanup()
        await self.runtime.close()
        await self.slack.stop()
        await self.e2e.stop()
        await self.together.stop()
        await self.opsgenie.stop()
        await self.pagerduty.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


def _provider_env(options: StackOptions) -> dict[str, str]:
    return {
        "TOGETHER_API_KEY": options.together_key,
        "E2E_API_KEY": options.e2e_key,
        "E2E_AUTH_TOKEN": options.e2e_token,
        "PAGERDUTY_TOKEN": DEMO_PAGERDUTY_TOKEN,
        "OPSGENIE_TOKEN": DEMO_OPSGENIE_KEY,
    }


async def handlers_finished(within: float = 5.0) -> None:
    """Wait (at most ``within`` s) for Slack listeners still at work after their answer was
    written, so that stopping the stack does not cut off a change being reported or close
    the store under it."""
    current = asyncio.current_task()
    running = [task for task in RUNNING_LISTENERS.running() if task is not current]
    if running:
        await asyncio.wait(running, timeout=within)
