"""The running bot: builds the core from settings and policy, wires the Bolt app and its
handlers, and serves ``POST /slack/events``, ``GET /healthz`` and ``GET /metrics``."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

import handlers.actions
import handlers.commands
import handlers.mentions
import handlers.modals
from bot.config import Settings
from bot.core.policy import Authorizer, Policy, load_policy
from bot.core.requests.workflow import ChangeWorkflow
from bot.core.service import GpuOps
from bot.core.store.db import Store
from bot.metrics import render_metrics
from bot.providers.registry import AdapterRegistry
from bot.redact import install_log_redaction, register_secret
from bot.slack.messenger import Messenger, build_web_client, slack_http_session
from bot.slack.usergroups import SlackUserGroupResolver

log = logging.getLogger(__name__)


def delivery_key(body: Mapping[str, Any], headers: Mapping[str, Any]) -> str | None:
    """A key that is the same for a redelivery of one Slack request and differs otherwise."""
    if isinstance(body.get("event_id"), str):
        return f"event:{body['event_id']}"
    kind = body.get("type") or ("command" if body.get("command") else None)
    trigger = body.get("trigger_id")
    if isinstance(trigger, str) and trigger:
        actions = body.get("actions")
        action_ts = ""
        if isinstance(actions, list) and actions and isinstance(actions[0], dict):
            action_ts = str(actions[0].get("action_ts", ""))
        return f"{kind}:{trigger}:{action_ts}"
    return None


def malformed_interaction(body: Mapping[str, Any]) -> str | None:
    """What makes an interaction payload unreadable to Bolt's listener matchers (which
    index ``actions[0]["action_id"]`` and ``view["callback_id"]`` unguarded), or None."""
    kind = body.get("type")
    for key in ("view", "event"):  # Bolt's logging and matching call .get on them
        if key in body and not isinstance(body[key], dict):
            return f"its {key} is not an object"
    if kind == "block_actions":
        actions = body.get("actions")
        if not isinstance(actions, list) or not actions:
            return "no actions"
        if not all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions):
            return "an action without an action_id"
    if kind in ("view_submission", "view_closed"):
        view = body.get("view")
        if not isinstance(view, dict) or not isinstance(view.get("callback_id"), str):
            return "no view callback_id"
    return None


@dataclass
class Runtime:
    settings: Settings
    policy: Policy
    store: Store
    registry: AdapterRegistry
    web_client: AsyncWebClient
    messenger: Messenger
    workflow: ChangeWorkflow
    ops: GpuOps
    bolt: AsyncApp
    _background: list[asyncio.Task[Any]] = field(default_factory=list)

    @classmethod
    async def create(
        cls,
        settings: Settings,
        *,
        env: Mapping[str, str] | None = None,
        http_transport: httpx.AsyncBaseTransport | None = None,
        instance_id: str | None = None,
    ) -> Runtime:
        install_log_redaction()
        for secret in settings.secret_values():
            register_secret(secret)
        environment = dict(settings.environment() if env is None else env)
        policy = load_policy(settings.gpuops_policy)
        registry = AdapterRegistry(
            policy,
            env=environment,
            together_base_url=settings.together_base_url,
            e2e_base_url=settings.e2e_base_url,
            client_settings=settings.client_settings(),
            http_transport=http_transport,
        )
        for missing in registry.missing_credentials():
            raise missing
        for name in {p.api_key_env for p in policy.projects.values()} | {
            getattr(p, "auth_token_env", "") for p in policy.projects.values()
        }:
            register_secret(environment.get(name))
        store = await Store.open(settings.gpuops_database_url)
        token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else ""
        web_client = build_web_client(token, settings.slack_api_url, slack_http_session())
        messenger = Messenger(web_client)
        authorizer = Authorizer(
            policy,
            SlackUserGroupResolver(web_client, ttl_seconds=settings.gpuops_usergroup_cache_seconds),
        )
        workflow = ChangeWorkflow(
            policy=policy,
            authorizer=authorizer,
            store=store,
            adapter_for=registry,
            messenger=messenger,
            instance_id=instance_id or settings.gpuops_instance_id or socket.gethostname(),
            poll_seconds=settings.gpuops_poll_seconds,
            followup_minutes=settings.gpuops_followup_minutes,
        )
        ops = GpuOps(policy=policy, authorizer=authorizer, store=store, workflow=workflow)
        bolt = build_bolt_app(settings, web_client, ops, messenger, store)
        return cls(settings, policy, store, registry, web_client, messenger, workflow, ops, bolt)

    async def start_background(self) -> None:
        recovered = await self.workflow.recover_interrupted()
        if recovered:
            log.warning("marked %d interrupted change(s) as unknown", recovered)
        await self.workflow.refresh_pending_gauge()
        self._background.append(
            asyncio.create_task(self.workflow.sweep_forever(self.settings.gpuops_sweep_seconds))
        )

    def web_app(self) -> web.Application:
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post("/slack/events", self._slack_events)
        add_ops_routes(app, self._healthy)
        return app

    async def _slack_events(self, request: web.Request) -> web.Response:
        # Bolt (its built-in middleware too) indexes some payload fields unguarded
        # (view.type, event.type …): such a payload gets an answer, not a 500 — after the
        # signature check Bolt did not get to.
        try:
            bolt_request = await to_bolt_request(request)
            problem = malformed_interaction(bolt_request.body)
            if problem is None:
                bolt_response = await self.bolt.async_dispatch(bolt_request)
        except Exception as exc:
            problem = type(exc).__name__
        if problem is not None:
            if not self._signed(await request.text(), request.headers):
                return web.Response(status=401)
            log.warning("ignored a Slack request Bolt could not read (%s)", problem)
            return web.Response(status=200)
        if bolt_response.status == 404:
            # Signed, but no listener wants it (an event type or a button of an older
            # version): acknowledge it, or Slack retries events and shows people an error.
            bolt_response = BoltResponse(status=200, body="")
        return await to_aiohttp_response(bolt_response)

    def _signed(self, body: str, headers: Mapping[str, str]) -> bool:
        secret = self.settings.slack_signing_secret
        if secret is None:
            return False
        return SignatureVerifier(secret.get_secret_value()).is_valid_request(body, dict(headers))

    async def _healthy(self) -> bool:
        try:
            await self.store.list_requests(limit=1)
        except Exception:
            return False
        return True

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
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.workflow.close()
        await self.registry.aclose()
        await self.store.close()
        if self.web_client.session is not None:
            await self.web_client.session.close()


def add_ops_routes(app: web.Application, healthy: Callable[[], Awaitable[bool]]) -> None:
    async def healthz(_: web.Request) -> web.Response:
        ok = await healthy()
        return web.json_response({"ok": ok}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=render_metrics(),
            content_type="text/plain",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)


def build_bolt_app(
    settings: Settings, client: AsyncWebClient, ops: GpuOps, messenger: Messenger, store: Store
) -> AsyncApp:
    signing = (
        settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None
    )
    app = AsyncApp(
        client=client,
        signing_secret=signing or "socket-mode-has-no-signing-secret",
        request_verification_enabled=True,
        raise_error_for_unhandled_request=False,
    )

    async def inject(context: Any, next: Callable[[], Awaitable[None]]) -> None:
        context["gpuops"] = ops
        context["messenger"] = messenger
        await next()

    async def deduplicate(
        body: dict[str, Any],
        req: Any,
        resp: BoltResponse,
        context: Any,
        next: Callable[[], Awaitable[None]],
    ) -> BoltResponse | None:
        key = delivery_key(body, req.headers)
        if key is not None and body.get("command"):
            # A slash command's ack carries nothing, so its handler acks first and checks
            # the key right after (handlers.commands): the write stays off the ack path.
            context["delivery_key"] = key
            await next()
            return None
        if key is not None and not await store.remember_delivery(key):
            log.info("ignored a repeated delivery of %s", key.split(":", 1)[0])
            # A new response: the ``resp`` an earlier middleware passed on may be None.
            return BoltResponse(status=200, body="")
        await next()
        return None

    async def drop_malformed(
        body: dict[str, Any], next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        problem = malformed_interaction(body)
        if problem is not None:
            log.warning("ignored a malformed %s payload: %s", str(body.get("type"))[:32], problem)
            return BoltResponse(status=200, body="")
        await next()
        return None

    app.use(drop_malformed)
    app.use(deduplicate)
    app.use(inject)
    for module in (handlers.commands, handlers.actions, handlers.modals, handlers.mentions):
        module.register(app)

    @app.error
    async def on_error(error: Exception, logger: logging.Logger) -> None:
        logger.error("unhandled error in a handler: %s", type(error).__name__)

    return app
