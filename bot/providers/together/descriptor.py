"""Together as the catalog knows it: its policy section, how its adapter is built, its
change kinds and which need approval by default, its healthy statuses."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

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
from bot.providers.together.adapter import CHANGES, TogetherAdapter
from bot.providers.together.client import TogetherClient, build_together_transport
from bot.providers.together.models import PROVIDER

DEFAULT_BASE_URL = "https://api.together.ai/v1"


class TogetherSection(ProviderSection):
    """A Together project's own keys in the policy."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    provider: Literal["together"]
    api_key_env: EnvName = "TOGETHER_API_KEY"
    project_id: str | None = None

    def credential_variables(self) -> list[str]:
        return [self.api_key_env]

    def detail(self) -> str:
        return f"together (project {self.project_id})" if self.project_id else "together"


def connect(connection: Connection) -> TogetherAdapter:
    section = connection.section
    if not isinstance(section, TogetherSection):
        raise TypeError(f"not a Together project: {connection.project}")
    key = connection.secrets[section.api_key_env]

    def build() -> ProviderTransport:
        return build_together_transport(
            key,
            connection.base_url,
            connection.client_settings,
            transport=connection.http_transport,
        )

    transport = connection.transport(build, key)
    return TogetherAdapter(TogetherClient(transport, section.project_id), connection.project)


def size(state: ClusterState, plan: ChangePlan) -> SizeChange:
    before = whole(state.current.get("num_gpus"))
    return SizeChange(gpus_before=before, gpus_after=whole(plan.body.get("num_gpus", before)))


DESCRIPTOR = ProviderDescriptor(
    name=PROVIDER,
    title="Together",
    changes=CHANGES,
    kinds=("scale_up", "scale_down", "change_type", "extend_reservation", "decommission"),
    approval_by_default=frozenset({"scale_down", "change_type", "decommission"}),
    section=TogetherSection,
    default_base_url=DEFAULT_BASE_URL,
    healthy_statuses=frozenset({"ready", "paused", "ondemandcomputepaused"}),
    connect=connect,
    size=size,
    size_limit="max_gpus",
    price_table=True,  # Together has no price API (SPEC §8)
    capabilities=frozenset({"remediations", "reservations", "probe"}),
    form_title="Update cluster",
)
