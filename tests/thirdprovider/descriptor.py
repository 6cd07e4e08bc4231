"""Lumen as the catalog knows it: what the ``gpuops.providers`` entry point names."""

from __future__ import annotations

from typing import Literal

from bot.providers.base import ChangePlan, ClusterState
from bot.providers.descriptor import (
    Connection,
    EnvName,
    ProviderDescriptor,
    ProviderSection,
    SizeChange,
    whole,
)
from bot.providers.http import ProviderTransport
from tests.thirdprovider.adapter import CHANGES, LumenAdapter
from tests.thirdprovider.client import PROVIDER, LumenClient, build_lumen_transport


class LumenSection(ProviderSection):
    """A Lumen project's own keys in the policy: its region and its token's variable."""

    provider: Literal["lumen"]
    region: str
    token_env: EnvName = "LUMEN_TOKEN"

    def credential_variables(self) -> list[str]:
        return [self.token_env]

    def detail(self) -> str:
        return f"lumen ({self.region})"


def connect(connection: Connection) -> LumenAdapter:
    section = connection.section
    if not isinstance(section, LumenSection):
        raise TypeError(f"not a Lumen project: {connection.project}")
    token = connection.secrets[section.token_env]

    def build() -> ProviderTransport:
        return build_lumen_transport(
            token, connection.base_url, connection.client_settings, connection.http_transport
        )

    client = LumenClient(connection.transport(build, token), section.region)
    return LumenAdapter(client, connection.project)


def size(state: ClusterState, plan: ChangePlan) -> SizeChange:
    before = whole(state.current.get("gpus"))
    return SizeChange(gpus_before=before, gpus_after=whole(plan.body.get("gpus", before)))


DESCRIPTOR = ProviderDescriptor(
    name=PROVIDER,
    title="Lumen",
    changes=CHANGES,
    kinds=("grow", "shrink"),
    approval_by_default=frozenset({"shrink"}),
    section=LumenSection,
    default_base_url="https://api.lumen.invalid/v2",
    healthy_statuses=frozenset({"active"}),
    connect=connect,
    size=size,
    size_limit="max_gpus",
    form_title="Resize cluster",
)
