"""The composition root: builds the core, the provider clients and the Slack layer from
settings and policy, starts the background work, and serves ``/slack/events``,
``/healthz`` and ``/metrics``."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

import handlers
from bot.config import Settings
from bot.core.access import Access
from bot.core.agents.desk import AgentDesk
from bot.core.authorizer import Authorizer
from bot.core.builder_steps.completer import StepCompleter
from bot.core.builder_steps.runner import BuilderSteps
from bot.core.home import HomeActions, HomeBuilder
from bot.core.home_refresh import FanOutNotifier, HomeRefresher
from bot.core.oncall import OnCallClients, OnCallGate, OnCallRoster
from bot.core.oncall.copies import OnCallCopies
from bot.core.policy import Policy, PolicyHolder, load_policy
from bot.core.policy.reload import PolicyRejected, PolicyReloader, ReloadResult
from bot.core.registry import AdapterRegistry
from bot.core.requests.workflow import ChangeWorkflow
from bot.core.service import CommandService
from bot.core.spend.digest import DigestRunner
from bot.core.spend.ledger import Ledger
from bot.core.spend.results import LedgerOnResults
from bot.core.spend.warnings import BudgetWarnings
from bot.core.store import Store
from bot.core.store.builder_steps import StepStore
from bot.core.store.watch import WatchStore
from bot.core.watch.incidents import IncidentDesk
from bot.core.watch.remediations import RemediationDesk
from bot.core.watch.reservations import ReminderDesk
from bot.core.watch.watcher import Watcher, watched_projects
from bot.mcp.http import McpEndpoint, bearer_token
from bot.mcp.server import TokenOf, Tools, build_server
from bot.providers.catalog import Catalog
from bot.providers.installed import load_catalog
from bot.redact import install_log_redaction, register_secret
from bot.signals import Hangup
from bot.slack.app import SlackEventsEndpoint, build_bolt_app
from bot.slack.approval_copies import SlackApprovalCopies
from bot.slack.bolt_context import Services
from bot.slack.builder_steps import SlackStepPort
from bot.slack.directory import SlackEmailDirectory
from bot.slack.home import HomePublisher
from bot.slack.http_server import HttpLimits, add_ops_routes, limit_middlewares
from bot.slack.messenger import Messenger, build_web_client, slack_http_session
from bot.slack.notifier import SlackNotifier
from bot.slack.spend_notifier import SlackSpendNotifier
from bot.slack.startup import Backoff, BotIdentity, Readiness, check_bot_token
from bot.slack.usergroups import SlackUserGroupResolver
from bot.slack.watch_notifier import SlackWatchNotifier

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WATCH_POLL_GRACE_SECONDS = 5.0


@dataclass
class Runtime:
    """One running bot: its store, provider clients, core services and Bolt app."""

    settings: Settings
    holder: PolicyHolder  # the one policy in force, which a reload swaps
    store: Store
    registry: AdapterRegistry
    web_client: AsyncWebClient
    messenger: Messenger
    workflow: ChangeWorkflow
    ops: CommandService
    bolt: AsyncApp
    home_refresher: HomeRefresher
    watcher: Watcher
    steps: BuilderSteps
    reloader: PolicyReloader
    digest: DigestRunner
    _background: list[asyncio.Task[Any]] = field(default_factory=list)
    readiness: Readiness = field(default_factory=Readiness)
    hangup: Hangup = field(default_factory=Hangup)
    mcp: McpEndpoint | None = None  # /mcp: the MCP server for agents (SPEC §15)

    @classmethod
    async def create(
        cls,
        settings: Settings,
        *,
        env: Mapping[str, str] | None = None,
        http_transport: httpx.AsyncBaseTransport | None = None,
        instance_id: str | None = None,
        catalog: Catalog | None = None,
    ) -> Runtime:
        """Build the bot; ``catalog`` is the installed providers unless given (read once,
        here: everything else is handed it)."""
        install_log_redaction()
        for secret in settings.secret_values():
            register_secret(secret)
        environment = dict(settings.environment() if env is None else env)
        catalog = catalog or load_catalog()
        holder = PolicyHolder(load_policy(settings.gpuops_policy, catalog))
        registry = _provider_registry(settings, holder, environment, http_transport)
        store = await Store.open(
            settings.gpuops_database_url,
            connect_timeout=settings.gpuops_db_connect_timeout,
            operation_timeout=settings.gpuops_db_operation_timeout,
        )
        token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else ""
        web_client = build_web_client(token, settings.slack_api_url, slack_http_session())
        messenger = Messenger(web_client)
        authorizer = Authorizer(
            holder,
            SlackUserGroupResolver(web_client, ttl_seconds=settings.gpuops_usergroup_cache_seconds),
        )
        clients = OnCallClients.of(settings, environment)
        directory = SlackEmailDirectory(web_client)
        cache = settings.gpuops_oncall_cache_seconds
        oncall = OnCallGate(
            OnCallRoster(holder, clients, directory, cache_seconds=cache), authorizer
        )
        access = Access(authorizer=authorizer, store=store, adapter_for=registry, oncall=oncall)
        home_builder = HomeBuilder(authorizer, store, registry, fleet=access.fleet, oncall=oncall)
        home_refresher = HomeRefresher(
            HomePublisher(home_builder, messenger).publish,
            home_builder.may_approve,
            interval=settings.gpuops_home_refresh_seconds,
        )
        step_store = StepStore(store)
        # The usage ledger (SPEC §13): each poll of a watched project, and each change's result.
        ledger = Ledger(access.spend.usage, lambda: holder.current)
        every = {
            p.name: p.every_seconds
            for p in watched_projects(holder.current, settings.gpuops_watch_every_seconds)
        }
        results = LedgerOnResults(ledger, every.get)
        completer = StepCompleter(step_store, store, SlackStepPort(web_client))
        instance = instance_id or settings.gpuops_instance_id or socket.gethostname()
        workflow = ChangeWorkflow(
            access=access,
            store=store,
            notifier=FanOutNotifier(
                SlackNotifier(messenger, copies=store.approval_copy_refs),
                [home_refresher, completer, results],
            ),
            instance_id=instance,
            poll_seconds=settings.gpuops_poll_seconds,
            followup_minutes=settings.gpuops_followup_minutes,
            exec_lease_seconds=settings.gpuops_exec_lease_seconds,
            max_call_seconds=settings.client_settings().max_call_seconds,
            schedule_grace_seconds=settings.gpuops_schedule_grace_seconds,
        )
        access.oncall_copies = OnCallCopies(
            store, SlackApprovalCopies(messenger), oncall, holder, lambda: workflow.clock()
        )
        ops = CommandService(
            access=access,
            workflow=workflow,
            calls_per_minute=settings.gpuops_mcp_calls_per_minute,
        )
        steps = BuilderSteps(ops, step_store, completer)
        watch_store = WatchStore(
            store, claim_takeover=timedelta(seconds=settings.gpuops_claim_takeover_seconds)
        )
        watch_notifier = SlackWatchNotifier(messenger, holder)
        spend_notifier = SlackSpendNotifier(messenger)
        desk = RemediationDesk(
            access=access,
            store=watch_store,
            notifier=watch_notifier,
            remediations_for=registry.remediations,
        )
        watcher = Watcher(
            holder=holder,
            store=store,
            adapter_for=registry,
            remediations=desk,
            incidents=IncidentDesk(access=access, store=watch_store, notifier=watch_notifier),
            reminders=ReminderDesk(access=access, store=watch_store, notifier=watch_notifier),
            instance_id=instance,
            every_override=settings.gpuops_watch_every_seconds,
            fleet=access.fleet,
            ledger=ledger,
            after_poll=BudgetWarnings(
                access, watch_store, spend_notifier, workflow.clock
            ).after_poll,
        )
        bolt = build_bolt_app(
            client=web_client,
            signing_secret=_signing_secret(settings),
            services=Services(
                ops=ops,
                messenger=messenger,
                home=HomeActions(access, workflow.decide, workflow.decisions.may_deny),
                home_refresher=home_refresher,
                desk=desk,
                steps=steps,
            ),
            deliveries=store,
            register_listeners=handlers.register_all,
        )
        reloader = PolicyReloader(
            settings.gpuops_policy,
            _policy_readier(registry, environment),
            holder,
            after=workflow.policy_reloaded,
            kept=workflow.policy_kept,
            quiet_seconds=settings.gpuops_policy_quiet_seconds,
        )
        runtime = cls(
            settings,
            holder,
            store,
            registry,
            web_client,
            messenger,
            workflow,
            ops,
            bolt,
            home_refresher,
            watcher,
            steps,
            reloader,
            DigestRunner(access, watch_store, spend_notifier, workflow.clock),
        )
        runtime.hangup.on_hangup("reload the policy", runtime._reload_on_hangup)
        runtime.mcp = McpEndpoint(build_server(runtime.mcp_tools(bearer_token)))
        return runtime

    def mcp_tools(self, token_of: TokenOf) -> Tools:
        """The MCP tools on this bot's core; ``token_of`` reads a call's token."""
        return Tools(AgentDesk(self.ops), token_of, permalink=self.messenger.permalink)

    async def _reload_on_hangup(self) -> None:
        await self.reload_policy()

    async def reload_policy(self) -> ReloadResult:
        """Read the policy file again now (SIGHUP); the old policy stays if it is invalid."""
        return await self.reloader.reload()

    @property
    def policy(self) -> Policy:
        """The policy in force (the holder's)."""
        return self.holder.current

    @property
    def authorizer(self) -> Authorizer:
        return self.ops.access.authorizer

    async def start(self, backoff: Backoff = Backoff()) -> BotIdentity:
        """``gpuops serve`` and ``socket``: check the bot token (``/healthz`` says why while
        Slack cannot be reached; TokenRefused if it refuses), start the background work,
        then take Slack's requests."""
        self.readiness.wait_for("checking SLACK_BOT_TOKEN with Slack (auth.test)")
        identity = await check_bot_token(self.web_client, self.readiness, backoff=backoff)
        log.info(
            "Slack accepted the bot token (bot %s, team %s)", identity.user_id, identity.team_id
        )
        if isinstance(self.authorizer.groups, SlackUserGroupResolver):
            self.authorizer.groups.installation_team = identity.team_id
        self.readiness.wait_for("starting the background work")
        await self.start_background()
        self.readiness.set_ready()
        return identity

    async def start_background(self) -> None:
        recovered = await self.workflow.recover_interrupted()
        if recovered:
            log.warning("marked %d interrupted change(s) as unknown", recovered)
        await self.workflow.refresh_pending_gauge()
        self._background.append(
            asyncio.create_task(self.workflow.sweep_forever(self.settings.gpuops_sweep_seconds))
        )
        self._background.append(asyncio.create_task(self.watcher.run_forever()))
        self._background.append(
            asyncio.create_task(
                self.steps.completer.reconcile_forever(self.settings.gpuops_sweep_seconds)
            )
        )
        self._background.append(asyncio.create_task(self.steps.completer.retry_held_forever()))
        self._background.append(
            asyncio.create_task(
                self.reloader.watch_forever(self.settings.gpuops_policy_check_seconds)
            )
        )
        tick = self.settings.gpuops_schedule_tick_seconds
        self._background.append(asyncio.create_task(self.workflow.scheduler.run_forever(tick)))
        every = self.settings.gpuops_digest_check_seconds
        self._background.append(asyncio.create_task(self.digest.run_forever(every)))

    def web_app(self, limits: HttpLimits | None = None) -> web.Application:
        app = web.Application(
            client_max_size=1024 * 1024,
            middlewares=limit_middlewares(limits or HttpLimits()),
        )
        endpoint = SlackEventsEndpoint(self.bolt, _signing_secret(self.settings))
        app.router.add_post("/slack/events", self._when_ready(endpoint.handle))
        if self.mcp is not None:
            self.mcp.install(app)
        add_ops_routes(app, self._healthy, self.readiness)
        return app

    def _when_ready(self, handler: Handler) -> Handler:
        async def gated(request: web.Request) -> web.StreamResponse:
            if not self.readiness.ready:  # the token is not checked yet: Slack retries
                return web.Response(status=503, text="gpuops is starting")
            return await handler(request)

        return gated

    async def _healthy(self) -> bool:
        return await self.store.healthy()

    async def close(self, *, grace: float = 0.0) -> None:
        """Stop; with ``grace``, first let changes being sent finish (a deploy must not turn
        them into ``unknown``). Stop accepting Slack requests before calling this."""
        if grace > 0:
            unfinished = await self.workflow.wait_for_executions(grace)
            if unfinished:
                log.warning(
                    "stopping with %d change(s) still being sent: %s",
                    len(unfinished),
                    ", ".join(sorted(unfinished)),
                )
        await self.watcher.finish_polls(WATCH_POLL_GRACE_SECONDS)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.workflow.close()
        await self.home_refresher.close()
        await self.registry.aclose()
        if self.workflow.deps.access.oncall is not None:
            await self.workflow.deps.access.oncall.roster.clients.aclose()
        await self.store.close()
        if self.web_client.session is not None:
            await self.web_client.session.close()


def _policy_readier(
    registry: AdapterRegistry, environment: Mapping[str, str]
) -> Callable[[Policy], None]:
    """Ready a reloaded policy before the holder swaps it in: its credentials must be set
    (and are redacted from then on). Every reader reads the holder; the watcher polls on
    the watch settings it started with until a restart."""

    def ready(policy: Policy) -> None:
        missing = registry.missing_for(policy)
        if missing:
            raise PolicyRejected("; ".join(str(m) for m in missing))
        for project in policy.projects.values():
            for variable in project.section.credential_variables():
                register_secret(environment.get(variable))

    return ready


def _signing_secret(settings: Settings) -> str | None:
    secret = settings.slack_signing_secret
    return secret.get_secret_value() if secret else None


def _provider_registry(
    settings: Settings,
    holder: PolicyHolder,
    environment: Mapping[str, str],
    http_transport: httpx.AsyncBaseTransport | None,
) -> AdapterRegistry:
    registry = AdapterRegistry(
        holder,
        env=environment,
        base_urls=settings.base_urls(holder.catalog),
        client_settings=settings.client_settings(),
        http_transport=http_transport,
    )
    for missing in registry.missing_credentials():
        raise missing
    for project in holder.current.projects.values():
        for variable in project.section.credential_variables():
            register_secret(environment.get(variable))
    return registry
