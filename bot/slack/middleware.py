"""Bolt middleware, one class per concern: drop unreadable payloads, ignore repeated
deliveries, remember the request's team, hand the listeners the services they use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.core.api import StoreUnavailable
from bot.slack.bolt_context import (
    Deadline,
    Services,
    deadline,
    mark_store_unavailable,
    put_delivery_key,
    put_services,
)
from bot.slack.usergroups import REQUEST_TEAM

log = logging.getLogger(__name__)

Next = Callable[[], Awaitable[BoltResponse]]
_ACK_MARGIN = 0.5  # seconds left for the listener to ack after a de-dup write gave up
# Payload types whose answer Slack reads nothing from (a click, an event): acknowledged
# before their de-duplication write.
ANSWERED_EMPTY = frozenset({"block_actions", "event_callback"})


class DeliveryLog(Protocol):
    async def remember_delivery(self, key: str) -> bool: ...


def delivery_key(body: Mapping[str, object], headers: Mapping[str, object]) -> str | None:
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


def malformed_interaction(body: Mapping[str, object]) -> str | None:
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


def _acknowledged() -> BoltResponse:
    # A new response: the ``resp`` an earlier middleware passed on may be None.
    return BoltResponse(status=200, body="")


class DropMalformedPayloads(AsyncMiddleware):
    """Answer 200 to a signed payload no listener could read, instead of a 500."""

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Next
    ) -> BoltResponse | None:
        problem = malformed_interaction(req.body)
        if problem is not None:
            kind = str(req.body.get("type"))[:32]
            log.warning("ignored a malformed %s payload: %s", kind, problem)
            return _acknowledged()
        return await next()


class DeduplicateDeliveries(AsyncMiddleware):
    """Act once on a Slack request delivered twice (retries, replicas behind one URL).

    The de-dup write stays off the ack path where the answer carries nothing: a slash
    command's handler checks the key after its ack, clicks and events are acknowledged
    here before the write. A submission's answer can carry errors or a view: its write
    comes first, bounded by the deadline."""

    def __init__(self, deliveries: DeliveryLog) -> None:
        self.deliveries = deliveries
        self._late: set[asyncio.Task[bool]] = set()

    async def _remember(self, key: str, due: Deadline | None) -> bool:
        """The de-dup write, given up on (left to finish alone) before the answer is due:
        cancelling a query on a silent database would itself wait on it."""
        task = asyncio.ensure_future(self.deliveries.remember_delivery(key))
        done, _ = await asyncio.wait({task}, timeout=_before_deadline(due))
        if task in done:
            return task.result()
        self._late.add(task)
        task.add_done_callback(self._late_done)
        raise TimeoutError("the state store gave no answer before the Slack deadline")

    def _late_done(self, task: asyncio.Task[bool]) -> None:
        self._late.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("a late de-dup write failed too: %s", type(task.exception()).__name__)

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Next
    ) -> BoltResponse | None:
        key = delivery_key(req.body, req.headers)
        if key is not None and req.body.get("command"):
            # A slash command's ack carries nothing, so its handler acks first and checks
            # the key right after (handlers.commands): the write stays off the ack path.
            put_delivery_key(req.context, key)
            return await next()
        if req.body.get("type") in ANSWERED_EMPTY:
            # Slack reads nothing in these answers: send it now, the write comes after.
            await req.context.ack()
        if key is None:
            return await next()
        try:
            first = await self._remember(key, deadline(req.context))
        except (StoreUnavailable, TimeoutError) as exc:
            # Listeners answer "the store is unavailable, nothing was changed" and act not.
            log.warning("could not check a delivery for repeats: %s", exc)
            mark_store_unavailable(req.context)
            return await next()
        if not first:
            log.info("ignored a repeated delivery of %s", key.split(":", 1)[0])
            return _acknowledged()
        return await next()


def _before_deadline(due: Deadline | None) -> float | None:
    """Seconds the de-dup write may take: up to half a second before the answer is due."""
    if due is None:
        return None
    return max(0.1, due.remaining() - _ACK_MARGIN)


class InjectServices(AsyncMiddleware):
    """Give the listeners their services: one typed value (bot.slack.bolt_context)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Next
    ) -> BoltResponse | None:
        put_services(req.context, self.services)
        return await next()


class RememberTeam(AsyncMiddleware):
    """Note the Slack team the request comes from for the listener and every task it
    starts (user-group lookups need it under an org-wide install)."""

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Next
    ) -> BoltResponse | None:
        token = REQUEST_TEAM.set(req.context.team_id)
        try:
            return await next()
        finally:
            REQUEST_TEAM.reset(token)
