"""E2E as the catalog knows it: its policy section, how its adapter is built, its change
kinds (one per action) and which need approval by default, its healthy statuses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bot.providers.base import ChangePlan, ClusterState
from bot.providers.descriptor import (
    Connection,
    EnvName,
    ProviderDescriptor,
    ProviderSection,
    SizeChange,
    whole,
)
from bot.providers.e2e.adapter import CHANGES, E2EAdapter
from bot.providers.e2e.client import E2E_DEFAULT_BASE_URL, E2EClient, build_e2e_transport
from bot.providers.e2e.models import ACTIONS, PROVIDER, RUNNING
from bot.providers.http import ProviderTransport

KINDS = ACTIONS  # each action is its own change kind


class E2ESection(ProviderSection):
    """An E2E project's own keys in the policy."""

    provider: Literal["e2e"]
    project_id: int = Field(gt=0)
    location: Literal["Delhi", "Chennai"]
    api_key_env: EnvName = "E2E_API_KEY"
    auth_token_env: EnvName = "E2E_AUTH_TOKEN"  # noqa: S105 - a variable name, not a token
    active_iam: int | None = None

    def credential_variables(self) -> list[str]:
        return [self.api_key_env, self.auth_token_env]

    def detail(self) -> str:
        return f"e2e ({self.location}, project {self.project_id})"


def connect(connection: Connection) -> E2EAdapter:
    section = connection.section
    if not isinstance(section, E2ESection):
        raise TypeError(f"not an E2E project: {connection.project}")
    key = connection.secrets[section.api_key_env]
    token = connection.secrets[section.auth_token_env]

    def build() -> ProviderTransport:
        return build_e2e_transport(
            key,
            token,
            connection.base_url,
            connection.client_settings,
            transport=connection.http_transport,
        )

    client = E2EClient(
        connection.transport(build, key, token),
        project_id=section.project_id,
        location=section.location,
        active_iam=section.active_iam,
    )
    return E2EAdapter(client, connection.project)


def size(state: ClusterState, plan: ChangePlan) -> SizeChange:
    nodes = whole(state.current.get("no_of_nodes"))
    added = whole(plan.body.get("additional_nodes")) if plan.action == "scale_cluster" else None
    after = nodes + added if nodes is not None and added is not None else nodes
    return SizeChange(nodes_before=nodes, nodes_after=after)


DESCRIPTOR = ProviderDescriptor(
    name=PROVIDER,
    title="E2E",
    article="an",
    changes=CHANGES,
    kinds=KINDS,
    approval_by_default=frozenset(KINDS) - {"attach_ip", "add_security_group"},
    section=E2ESection,
    default_base_url=E2E_DEFAULT_BASE_URL,
    healthy_statuses=frozenset({"running"}),
    actionable_statuses=frozenset({RUNNING.lower()}),  # rules.require_running
    connect=connect,
    size=size,
    size_limit="max_nodes",
    capabilities=frozenset({"probe"}),
    form_title="Cluster action",
)
