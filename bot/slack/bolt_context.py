"""What gpuops keeps in Bolt's context, each under one key and read through one typed
accessor here (as bolt-python's AsyncBoltContext puts a typed property over each of its own
keys): the listeners' services, the request's answer and its deadline, a slash command's
delivery key, and whether the store could check the delivery for repeats. No other module
reads or writes a key of the context (``tests/unit/test_listener_types.py`` checks it)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.context.respond.async_respond import AsyncRespond

from bot.core.api import BuilderSteps, CommandService, HomeActions, HomeRefresher, RemediationDesk
from bot.errors import GpuopsError
from bot.slack.messenger import Messenger

ANSWER_BUDGET_SECONDS = 2.5  # Slack shows people an error after 3 s; keep a margin

_SERVICES = "gpuops_services"
_DEADLINE = "deadline"
_DELIVERY_KEY = "delivery_key"
_STORE_UNAVAILABLE = "store_unavailable"
# Bolt's own keys, which its context reads through properties but never lets one set.
_ACK = "ack"
_RESPOND = "respond"


@dataclass(frozen=True)
class Services:
    """The services every listener may use, built once by the composition root."""

    ops: CommandService
    messenger: Messenger
    home: HomeActions
    home_refresher: HomeRefresher
    desk: RemediationDesk
    steps: BuilderSteps


class ServicesMissing(GpuopsError):
    """A listener ran on an app whose middleware did not give it the services."""


@dataclass(frozen=True)
class Deadline:
    """When the answer to one Slack request is due; listeners read it (``deadline``) to
    bound the work they do before ``ack()``."""

    arrived: float = field(default_factory=time.monotonic)
    budget: float = ANSWER_BUDGET_SECONDS

    def remaining(self) -> float:
        return max(0.0, self.arrived + self.budget - time.monotonic())

    def passed(self) -> bool:
        return self.remaining() <= 0.0


def put_services(context: AsyncBoltContext, services: Services) -> None:
    context[_SERVICES] = services


def services(context: AsyncBoltContext) -> Services:
    """The listener's services (ServicesMissing if the app was built without them)."""
    found = find_services(context)
    if found is None:
        raise ServicesMissing("no services in the listener's context (InjectServices)")
    return found


def find_services(context: Mapping[str, object]) -> Services | None:
    """The services, or None where they may be missing (the app's error handler)."""
    found = context.get(_SERVICES)
    return found if isinstance(found, Services) else None


def put_answer(context: AsyncBoltContext, ack: AsyncAck, deadline: Deadline) -> None:
    """The request's ``ack()`` (which writes the answer at once) and when it is due."""
    context[_ACK] = ack
    context[_DEADLINE] = deadline


def deadline(context: Mapping[str, object]) -> Deadline | None:
    """When the answer is due; None for a request dispatched without one."""
    found = context.get(_DEADLINE)
    return found if isinstance(found, Deadline) else None


def put_respond(context: AsyncBoltContext, respond: AsyncRespond) -> None:
    context[_RESPOND] = respond


def put_delivery_key(context: AsyncBoltContext, key: str) -> None:
    """A slash command's de-dup key, for its handler to check after its ack."""
    context[_DELIVERY_KEY] = key


def delivery_key(context: AsyncBoltContext) -> str | None:
    found = context.get(_DELIVERY_KEY)
    return found if isinstance(found, str) else None


def mark_store_unavailable(context: AsyncBoltContext) -> None:
    """The delivery could not be checked for repeats: listeners that act refuse to."""
    context[_STORE_UNAVAILABLE] = True


def store_unavailable(context: AsyncBoltContext) -> bool:
    return context.get(_STORE_UNAVAILABLE) is True
