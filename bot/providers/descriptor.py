"""The descriptor a provider package exports: everything gpuops knows about a provider in
one place (its words, its changes, its policy section, how to build its adapter and count a
change's size), and what building an adapter is handed. The adapter protocol and the neutral
models it speaks in are bot.providers.base."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

from bot.providers.base import (
    Capability,
    ChangePlan,
    ClusterState,
    ProviderAdapter,
    ProviderChanges,
)
from bot.providers.http import ClientSettings, ProviderTransport


class SizeChange(BaseModel):
    """A cluster's size before and after a planned change, in GPUs or nodes (whichever the
    provider counts), for the policy's limits and the price line."""

    model_config = ConfigDict(frozen=True)

    gpus_before: int | None = None
    gpus_after: int | None = None
    nodes_before: int | None = None
    nodes_after: int | None = None


def whole(value: Any) -> int | None:
    """A count from a provider's values: an int, else unknown (None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def _env_name(value: str) -> str:
    # Refusing lowercase also catches a key pasted here in place of the variable's name;
    # the message never repeats the value.
    if not _ENV_NAME.fullmatch(value):
        raise PydanticCustomError(
            "env_name",
            "must be the NAME of an environment variable (A-Z, 0-9, _), not the secret itself",
        )
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]  # a credential's variable, never its value


class ProviderSection(BaseModel):
    """A provider's own keys in a policy project (``provider: …``, its credentials'
    variable names, its ids). The core adds the keys every project has (``base_url``,
    ``clusters``, ``watch``, ``limits``, ``require_approval``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str  # narrowed by each provider to its own name (the policy's discriminator)

    def credential_variables(self) -> list[str]:
        """The environment variables that hold this project's credentials."""
        return []

    def detail(self) -> str:
        """One line for ``check-config``: ``together (project proj-1)``."""
        return self.provider


@dataclass(frozen=True)
class Connection:
    """What a descriptor needs to build one project's adapter: the project's policy
    section, its base URL and credentials, and the shared HTTP transports."""

    project: str
    section: ProviderSection
    base_url: str
    secrets: Mapping[str, str]  # credential variable → its value (each one set)
    client_settings: ClientSettings
    shared: Callable[[tuple[str, ...], Callable[[], ProviderTransport]], ProviderTransport]
    http_transport: httpx.AsyncBaseTransport | None = None

    def transport(
        self, build: Callable[[], ProviderTransport], *credentials: str
    ) -> ProviderTransport:
        """One transport per (provider, base URL, credentials), built on first use."""
        return self.shared((self.section.provider, self.base_url, *credentials), build)


@dataclass(frozen=True)
class ProviderDescriptor:
    """One provider as gpuops knows it. A provider package exports one; the catalog lists
    them (the built-ins and those of the ``gpuops.providers`` entry point group), and the
    policy, the command grammar, the forms, help and ``check-config`` are built from them.

    The inverse of a change (SPEC §9) is its adapter's ``inverse``; a price (SPEC §8) is the
    plan's ``node_price`` when the provider has a price API, or the policy's ``prices``
    table per GPU-hour when ``price_table`` says it has none."""

    name: str
    title: str  # how people name it: "Together"
    changes: ProviderChanges  # its change verb, actions and their fields
    kinds: tuple[str, ...]  # every change kind its plans carry
    approval_by_default: frozenset[str]  # the kinds that need approval unless the policy says
    section: type[ProviderSection]
    default_base_url: str
    healthy_statuses: frozenset[str]  # lower case
    connect: Callable[[Connection], ProviderAdapter]
    size: Callable[[ClusterState, ChangePlan], SizeChange]
    size_limit: str  # the key of the policy's ``limits`` that caps its size: "max_gpus"
    price_table: bool = False
    article: str = "a"  # "a Together project", "an E2E project"
    # What its adapter can do beyond changes (known without building one: check-config).
    capabilities: frozenset[Capability] = frozenset()
    form_title: str = "Change cluster"  # its change form's title ("Update cluster")
    # The statuses (lower case) its actions run in; None when its adapter refuses none.
    actionable_statuses: frozenset[str] | None = None

    @property
    def verb(self) -> str:
        """The /gpu word that asks for its changes."""
        return self.changes.command

    @property
    def base_url_variable(self) -> str:
        """The environment variable that overrides its default base URL."""
        return f"{self.name.upper().replace('-', '_')}_BASE_URL"

    def has(self, capability: Capability) -> bool:
        """Whether its adapter has that optional feature."""
        return capability in self.capabilities

    def acts_on(self, status: str) -> bool:
        """Whether any of its actions can run on a cluster in ``status``."""
        allowed = self.actionable_statuses
        return allowed is None or status.strip().lower() in allowed

    def single_action(self) -> str | None:
        """Its one action when the verb is it (``update``); None when the verb takes an
        action word (``action … scale_cluster``)."""
        actions = self.changes.actions
        return actions[0] if actions == (self.changes.command,) else None
