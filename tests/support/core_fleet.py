"""The scripted provider side of the core harness: adapters with the real providers' rules
(plan, fingerprint, inverse, shows) whose I/O — list, get, apply — is answered from
in-memory clusters and a script of failures, hangs and latency, recording every call."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from bot.local.simulators.together import seed_clusters
from bot.providers.base import ApplyOutcome, ChangePlan, ClusterState, ClusterSummary
from bot.providers.e2e import E2EAdapter, E2EClient
from bot.providers.e2e.adapter import _current_of
from bot.providers.e2e.models import E2EClusterDetail
from bot.providers.e2e.summary import to_summary as e2e_summary
from bot.providers.errors import ProviderNotFound
from bot.providers.together import TogetherAdapter, TogetherClient
from bot.providers.together.models import TogetherCluster
from bot.providers.together.summary import cluster_state, to_summary
from tests.support.transaction_guard import note


class _NoClient:
    """Stands where the real adapter keeps its HTTP client: the harness never calls it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the core harness has no provider client (asked for {name!r})")


@dataclass(frozen=True)
class Call:
    """One call the core made to a provider: ``op`` is list_clusters, get_cluster or apply."""

    op: str
    cluster_id: str | None = None
    action: str | None = None
    body: dict[str, Any] | None = None


@dataclass
class Hang:
    """A scripted call that waits: ``entered`` is set once the core has made it; it goes on
    (with the rest of its step) when ``release`` is called."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class Step:
    """What the next call of an operation does: wait, hang, then raise or answer."""

    error: BaseException | None = None
    latency: float = 0.0
    hang: Hang | None = None
    answer: Any = None


class Script:
    """Per operation, the steps its next calls take (a call with no step left behaves)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._steps: dict[str, deque[Step]] = {}
        self.called = asyncio.Event()

    def add(self, op: str, step: Step, times: int = 1) -> None:
        self._steps.setdefault(op, deque()).extend(step for _ in range(times))

    def fail(self, op: str, error: BaseException, *, times: int = 1) -> None:
        self.add(op, Step(error=error), times)

    def delay(self, op: str, seconds: float, *, times: int = 1) -> None:
        self.add(op, Step(latency=seconds), times)

    def hang(self, op: str, *, then: BaseException | None = None) -> Hang:
        hang = Hang()
        self.add(op, Step(hang=hang, error=then))
        return hang

    def answer(self, op: str, value: Any) -> None:
        self.add(op, Step(answer=value))

    def of(self, op: str) -> list[Call]:
        return [c for c in self.calls if c.op == op]

    async def enter(self, call: Call) -> Step | None:
        """Record ``call`` and play its step: the answer to give, or None to behave."""
        note(f"provider {call.op}")
        self.calls.append(call)
        self.called.set()
        queue = self._steps.get(call.op)
        step = queue.popleft() if queue else None
        if step is None:
            return None
        if step.latency:
            await asyncio.sleep(step.latency)
        if step.hang is not None:
            step.hang.entered.set()
            await step.hang.released.wait()
        if step.error is not None:
            raise step.error
        return step if step.answer is not None else None


class ScriptedTogether(TogetherAdapter):
    """A Together project's adapter over ``clusters`` (Together's JSON, by cluster id)."""

    def __init__(
        self,
        project: str,
        project_id: str | None,
        clusters: dict[str, dict[str, Any]],
        now: Callable[[], datetime],
    ) -> None:
        super().__init__(cast(TogetherClient, _NoClient()), project, now)
        self.project_id = project_id
        self.clusters = clusters
        self.script = Script()

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

    async def list_clusters(self) -> list[ClusterSummary]:
        step = await self.script.enter(Call("list_clusters"))
        if step is not None:
            return cast(list[ClusterSummary], step.answer)
        return [
            to_summary(TogetherCluster.model_validate(raw), self.project)
            for raw in self.clusters.values()
            if self._ours(raw)
        ]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        step = await self.script.enter(Call("get_cluster", cluster_id))
        if step is not None:
            return cast(ClusterState, step.answer)
        return cluster_state(self._cluster(cluster_id), self.project)

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        step = await self.script.enter(Call("apply", plan.cluster_id, plan.action, plan.body))
        if step is not None:
            return cast(ApplyOutcome, step.answer)
        self._cluster(plan.cluster_id)
        self.clusters[plan.cluster_id].update(plan.body)
        summary = to_summary(self._cluster(plan.cluster_id), self.project)
        return ApplyOutcome(message="Together accepted the update", summary=summary)

    async def aclose(self) -> None:
        return None


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


class ScriptedE2E(E2EAdapter):
    """An E2E project's adapter over ``clusters`` (see e2e_cluster), by cluster id text."""

    def __init__(self, project: str, location: str, clusters: dict[str, dict[str, Any]]) -> None:
        super().__init__(cast(E2EClient, _NoClient()), project)
        self.location = location
        self.clusters = clusters
        self.script = Script()

    def _detail(self, cluster_id: str) -> E2EClusterDetail:
        cluster = self.clusters.get(cluster_id)
        if cluster is None:
            raise ProviderNotFound(f"cluster {cluster_id} not found", provider="e2e", status=404)
        return E2EClusterDetail.model_validate(e2e_detail(cluster, self.location))

    def _state(self, cluster_id: str) -> ClusterState:
        detail = self._detail(cluster_id)
        summary = e2e_summary(detail, self.project, location=self.location)
        return ClusterState(summary=summary, current=_current_of(detail))

    async def list_clusters(self) -> list[ClusterSummary]:
        step = await self.script.enter(Call("list_clusters"))
        if step is not None:
            return cast(list[ClusterSummary], step.answer)
        return [self._state(cluster_id).summary for cluster_id in self.clusters]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        step = await self.script.enter(Call("get_cluster", cluster_id))
        if step is not None:
            return cast(ClusterState, step.answer)
        return self._state(cluster_id)

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        step = await self.script.enter(Call("apply", plan.cluster_id, plan.action, plan.body))
        if step is not None:
            return cast(ApplyOutcome, step.answer)
        self._detail(plan.cluster_id)
        message = apply_e2e(self.clusters[plan.cluster_id], plan.body)
        return ApplyOutcome(message=message, summary=self._state(plan.cluster_id).summary)

    async def aclose(self) -> None:
        return None


ScriptedAdapter = ScriptedTogether | ScriptedE2E


def together_seed(now: datetime) -> dict[str, dict[str, Any]]:
    """The demo's Together clusters (the simulator's seed data, used as data only)."""
    return seed_clusters(now)
