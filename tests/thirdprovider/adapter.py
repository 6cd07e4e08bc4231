"""Lumen behind the provider-neutral adapter: one action, ``resize``, with one field,
``gpus`` (a multiple of 4); growing is ``grow``, shrinking ``shrink``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.providers.base import (
    ApplyOutcome,
    ChangeInputError,
    ChangePlan,
    ClusterState,
    ClusterSummary,
    FieldSpec,
    Inverse,
    PreviewLine,
    ProviderChanges,
    parse_whole_number,
    same_value,
)
from bot.providers.errors import RuleViolation
from tests.thirdprovider.client import PROVIDER, LumenClient, LumenCluster

ACTION = "resize"
GPUS = FieldSpec(
    name="gpus", label="GPUs", kind="int", required=True, hint="a multiple of 4, from 4"
)
CHANGES = ProviderChanges(
    provider=PROVIDER, title="Lumen", command=ACTION, actions=(ACTION,), fields={ACTION: (GPUS,)}
)


def to_summary(cluster: LumenCluster, project: str) -> ClusterSummary:
    return ClusterSummary(
        provider=PROVIDER,
        project=project,
        cluster_id=cluster.id,
        name=cluster.name,
        status=cluster.status,
        steady=cluster.status != "resizing",
        gpu_type=cluster.gpu_type,
        size=f"{cluster.gpus} GPUs",
        details={"gpus": cluster.gpus},
    )


class LumenAdapter:
    provider = PROVIDER

    def __init__(self, client: LumenClient, project: str) -> None:
        self.client = client
        self.project = project

    async def list_clusters(self) -> list[ClusterSummary]:
        return [to_summary(c, self.project) for c in await self.client.list_clusters()]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        cluster = await self.client.get_cluster(cluster_id)
        return ClusterState(
            summary=to_summary(cluster, self.project), current={"gpus": cluster.gpus}
        )

    def actions(self) -> list[str]:
        return [ACTION]

    def fields_for(self, action: str) -> list[FieldSpec]:
        self._require(action)
        return [GPUS]

    def fingerprint(self, state: ClusterState) -> dict[str, Any]:
        return {"gpus": state.current.get("gpus")}

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, Any]) -> ChangePlan:
        self._require(action)
        try:
            gpus = parse_whole_number(raw.get("gpus"))
        except ValueError as exc:
            raise ChangeInputError({"gpus": str(exc)}) from None
        before = state.current.get("gpus")
        if gpus < 4 or gpus % 4:
            raise RuleViolation("gpus must be a multiple of 4, from 4", field="gpus")
        if gpus == before:
            raise RuleViolation(f"the cluster has {gpus} GPUs already", field="gpus")
        return ChangePlan(
            provider=PROVIDER,
            project=self.project,
            cluster_id=state.summary.cluster_id,
            cluster_name=state.summary.name,
            action=ACTION,
            body={"gpus": gpus},
            kinds=["grow" if isinstance(before, int) and gpus > before else "shrink"],
            lines=[PreviewLine(field="gpus", before=str(before), after=str(gpus))],
            fingerprint=self.fingerprint(state),
        )

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        cluster = await self.client.resize(plan.cluster_id, int(plan.body["gpus"]))
        return ApplyOutcome(message="Lumen is resizing", summary=to_summary(cluster, self.project))

    def inverse(self, plan: ChangePlan, prior: Mapping[str, Any]) -> Inverse | None:
        before = prior.get("gpus")
        return None if before is None else Inverse(action=ACTION, inputs={"gpus": str(before)})

    def shows(self, plan: ChangePlan, state: ClusterState) -> bool:
        return same_value(state.current.get("gpus"), plan.body["gpus"])

    async def aclose(self) -> None:
        await self.client.aclose()

    @staticmethod
    def _require(action: str) -> None:
        if action != ACTION:
            raise ChangeInputError({"action": f"Lumen has only the '{ACTION}' action"})
