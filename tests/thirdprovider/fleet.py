"""Lumen on the core harness (tests/support/core_script.py): its clusters in memory and what
Lumen does with a resize; the rules are its descriptor's own adapter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from bot.core.policy import ProjectCommon
from bot.providers.base import ApplyOutcome, ChangePlan, ClusterState, ClusterSummary
from bot.providers.errors import ProviderNotFound
from tests.support.core_script import Fleet
from tests.thirdprovider.adapter import to_summary
from tests.thirdprovider.client import PROVIDER, LumenCluster
from tests.thirdprovider.simulator import seed_clusters


class LumenFleet(Fleet[dict[str, LumenCluster]]):
    """A Lumen project's clusters, by id; a resize takes effect at once."""

    def __init__(self, project: str, clusters: dict[str, LumenCluster]) -> None:
        self.project = project
        self.clusters = clusters

    def _cluster(self, cluster_id: str) -> LumenCluster:
        cluster = self.clusters.get(cluster_id)
        if cluster is None:
            raise ProviderNotFound(f"cluster {cluster_id} not found", provider=PROVIDER, status=404)
        return cluster

    def listed(self) -> list[ClusterSummary]:
        return [to_summary(cluster, self.project) for cluster in self.clusters.values()]

    def state(self, cluster_id: str) -> ClusterState:
        cluster = self._cluster(cluster_id)
        return ClusterState(
            summary=to_summary(cluster, self.project), current={"gpus": cluster.gpus}
        )

    def applied(self, plan: ChangePlan) -> ApplyOutcome:
        resized = self._cluster(plan.cluster_id).model_copy(update={"gpus": plan.body["gpus"]})
        self.clusters[plan.cluster_id] = resized
        return ApplyOutcome(message="Lumen is resizing", summary=to_summary(resized, self.project))


def lumen_fleets(
    projects: Mapping[str, ProjectCommon], now: Callable[[], datetime]
) -> dict[str, Fleet[Any]]:
    """Lumen's two seed clusters for each Lumen project of the policy."""
    return {name: LumenFleet(name, seed_clusters()) for name in projects}
