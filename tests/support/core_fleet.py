"""The core harness's Together and E2E fleets (tests/support/core_script.py): their clusters
in memory — the demo's seed clusters, Together's as its JSON, E2E's as small dicts shown as
E2E's detail JSON — and what each provider does with a change."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from bot.core.policy import ProjectCommon
from bot.local.simulators.together import seed_clusters
from bot.providers.base import (
    ApplyOutcome,
    ChangePlan,
    ClusterState,
    ClusterSummary,
    ProviderAdapter,
)
from bot.providers.descriptor import Connection, ProviderDescriptor
from bot.providers.e2e.adapter import _current_of
from bot.providers.e2e.models import E2EClusterDetail
from bot.providers.e2e.summary import to_summary as e2e_summary
from bot.providers.errors import ProviderNotFound
from bot.providers.together import TogetherAdapter
from bot.providers.together.models import TogetherCluster
from bot.providers.together.summary import cluster_state, to_summary
from tests.support.core_script import Fleet, FleetMaker

Clusters = dict[str, dict[str, Any]]  # by cluster id: Together's JSON, or an e2e_cluster


class TogetherFleet(Fleet[Clusters]):
    """A Together project's view of the account's clusters (Together's JSON, by id)."""

    def __init__(
        self, project: str, project_id: str | None, clusters: Clusters, now: Callable[[], datetime]
    ) -> None:
        self.project = project
        self.project_id = project_id
        self.clusters = clusters
        self.now = now

    def rules(self, descriptor: ProviderDescriptor, connection: Connection) -> ProviderAdapter:
        """The descriptor's adapter on the harness's clock (a reservation's end must be in
        the future): its own connect reads the wall clock."""
        built = descriptor.connect(connection)
        assert isinstance(built, TogetherAdapter)
        return TogetherAdapter(built.client, connection.project, self.now)

    def _ours(self, raw: dict[str, Any]) -> bool:
        """The key reaches every project; the policy project is only its own."""
        return self.project_id is None or raw["project_id"] == self.project_id

    def _cluster(self, cluster_id: str) -> TogetherCluster:
        raw = self.clusters.get(cluster_id)
        if raw is None or not self._ours(raw):
            raise ProviderNotFound(
                f"cluster {cluster_id} not found in project {self.project_id}", provider="together"
            )
        return TogetherCluster.model_validate(raw)

    def listed(self) -> list[ClusterSummary]:
        return [
            to_summary(TogetherCluster.model_validate(raw), self.project)
            for raw in self.clusters.values()
            if self._ours(raw)
        ]

    def state(self, cluster_id: str) -> ClusterState:
        return cluster_state(self._cluster(cluster_id), self.project)

    def applied(self, plan: ChangePlan) -> ApplyOutcome:
        self._cluster(plan.cluster_id)
        self.clusters[plan.cluster_id].update(plan.body)
        summary = to_summary(self._cluster(plan.cluster_id), self.project)
        return ApplyOutcome(message="Together accepted the update", summary=summary)


def together_fleets(
    projects: Mapping[str, ProjectCommon], now: Callable[[], datetime]
) -> dict[str, Fleet[Any]]:
    """One account's seed clusters, seen by each Together project of the policy."""
    clusters = together_seed(now())
    return {
        name: TogetherFleet(name, getattr(project, "project_id", None), clusters, now)
        for name, project in projects.items()
    }


# -- E2E: a cluster is a small dict (see e2e_cluster), shown as E2E's detail JSON ----------

SKUS: dict[str, dict[str, Any]] = {
    "H100": {"name": "GDC.8xH10080-208.2000GB_SXM_v1", "gpu": 8, "cpu": 208, "memory": 2000},
    "A100": {"name": "GDC.8xA10080-128.1000GB_SXM_v1", "gpu": 8, "cpu": 128, "memory": 1000},
}
HOURLY = {"H100": 1995.2, "A100": 1270.0}
IMAGES = {2: "v2-slurm25.11-ubuntu24.04", 3: "v3-slurm25.11-ubuntu24.04-cuda12.8", 5: "v5-nemo"}


def e2e_cluster(
    cluster_id: int,
    name: str,
    status: str = "Running",
    nodes: int = 1,
    *,
    sku: str = "H100",
    plan: str = "hourly",
    image_version_id: int = 2,
    ssh_key_ids: tuple[int, ...] = (1001,),
    security_group_ids: tuple[int, ...] = (601,),
) -> dict[str, Any]:
    """An E2E cluster as the harness keeps it (tests edit these keys in place)."""
    return {
        "id": cluster_id,
        "name": name,
        "status": status,
        "nodes": nodes,
        "sku": sku,
        "plan": plan,
        "image_version_id": image_version_id,
        "ssh_key_ids": list(ssh_key_ids),
        "security_group_ids": list(security_group_ids),
        "reserved_ip_ids": [],
    }


def e2e_seed() -> dict[str, dict[str, Any]]:
    """The demo's E2E Delhi clusters (the ids and shapes the integration tests use)."""
    clusters = [
        e2e_cluster(101, "train-h100-a", nodes=2),
        e2e_cluster(102, "train-h100-b", "Creating", 4),
        e2e_cluster(103, "train-a100-small", sku="A100"),
        e2e_cluster(104, "train-h100-c", plan="none"),
        e2e_cluster(105, "eval-h100", nodes=2, image_version_id=3),
        e2e_cluster(106, "train-a100-big", nodes=4, sku="A100", plan="committed"),
    ]
    return {str(c["id"]): c for c in clusters}


def e2e_detail(cluster: dict[str, Any], location: str) -> dict[str, Any]:
    """E2E's DETAIL JSON of a harness cluster (the fields the adapter reads)."""
    sku, nodes = SKUS[cluster["sku"]], cluster["nodes"]
    details: dict[str, Any] = {
        "specs": {"name": sku["name"], "gpu": sku["gpu"], "cpu": sku["cpu"]},
    }
    details["specs"]["gpu_card_type"] = cluster["sku"]
    if cluster["plan"] != "none":
        committed = cluster["plan"] == "committed"
        details["plan"] = {
            "sku_type": "committed" if committed else "hourly",
            "committed_days": 30 if committed else 0,
            "unit_price": 850000.0 if committed else HOURLY[cluster["sku"]],
            "currency": "INR",
            "location": location,
        }
    return {
        "id": cluster["id"],
        "name": cluster["name"],
        "status": cluster["status"],
        "no_of_nodes": nodes,
        "sku_details": details,
        "image_version": {
            "id": cluster["image_version_id"],
            "name": "Ubuntu Slurm",
            "version": IMAGES.get(cluster["image_version_id"], "v?"),
        },
        "total_gpu": sku["gpu"] * nodes,
        "total_cpu": sku["cpu"] * nodes,
        "total_memory": f"{sku['memory'] * nodes} GB",
        "ssh_keys": [{"pk": key, "label": f"key-{key}"} for key in cluster["ssh_key_ids"]],
        "security_groups": [{"id": g, "name": f"sg-{g}"} for g in cluster["security_group_ids"]],
        "has_floating_ip": bool(cluster["reserved_ip_ids"]),
    }


_E2E_MESSAGES = {
    "update_ssh_keys": "SSH keys updated",
    "update_image": "Image update started",
    "restart_workers": "Restart started",
    "restart_cluster": "Restart started",
    "attach_ip": "Reserved IP attached",
    "detach_ip": "Reserved IP detached",
}


def apply_e2e(cluster: dict[str, Any], body: dict[str, Any]) -> str:
    """What E2E does with an action (its status stays: tests script a transition)."""
    action = body["action"]
    if action == "update_ssh_keys":
        cluster["ssh_key_ids"] = list(body["ssh_key_ids"])
    elif action == "update_image":
        cluster["image_version_id"] = body["image_version_id"]
    elif action == "scale_cluster":
        cluster["nodes"] += body["additional_nodes"]
        return f"Adding {body['additional_nodes']} node(s)"
    elif action == "attach_ip":
        cluster["reserved_ip_ids"].append(body["reserved_ip_id"])
    elif action == "detach_ip":
        cluster["reserved_ip_ids"].remove(body["reserved_ip_id"])
    elif action == "add_security_group":
        groups = cluster["security_group_ids"]
        groups += [g for g in body["security_groups_ids"] if g not in groups]
    elif action == "remove_security_group":
        cluster["security_group_ids"].remove(body["security_group_id"])
    return _E2E_MESSAGES.get(action, "Success")


class E2EFleet(Fleet[Clusters]):
    """An E2E project's clusters (see e2e_cluster), by cluster id text."""

    def __init__(self, project: str, location: str, clusters: Clusters) -> None:
        self.project = project
        self.location = location
        self.clusters = clusters

    def _detail(self, cluster_id: str) -> E2EClusterDetail:
        cluster = self.clusters.get(cluster_id)
        if cluster is None:
            raise ProviderNotFound(f"cluster {cluster_id} not found", provider="e2e", status=404)
        return E2EClusterDetail.model_validate(e2e_detail(cluster, self.location))

    def listed(self) -> list[ClusterSummary]:
        return [self.state(cluster_id).summary for cluster_id in self.clusters]

    def state(self, cluster_id: str) -> ClusterState:
        detail = self._detail(cluster_id)
        summary = e2e_summary(detail, self.project, location=self.location)
        return ClusterState(summary=summary, current=_current_of(detail))

    def applied(self, plan: ChangePlan) -> ApplyOutcome:
        self._detail(plan.cluster_id)
        message = apply_e2e(self.clusters[plan.cluster_id], plan.body)
        return ApplyOutcome(message=message, summary=self.state(plan.cluster_id).summary)


def e2e_fleets(
    projects: Mapping[str, ProjectCommon], now: Callable[[], datetime]
) -> dict[str, Fleet[Any]]:
    """The demo's E2E clusters for each E2E project of the policy."""
    return {
        name: E2EFleet(name, str(getattr(project, "location", "")), e2e_seed())
        for name, project in projects.items()
    }


def together_seed(now: datetime) -> Clusters:
    """The demo's Together clusters (the simulator's seed data, used as data only)."""
    return seed_clusters(now)


# The built-in providers' fleets, by provider name (core_harness's default).
FLEETS: Mapping[str, FleetMaker] = {"together": together_fleets, "e2e": e2e_fleets}
