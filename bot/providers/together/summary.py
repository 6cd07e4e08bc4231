"""Together AI Instant Clusters: the provider-neutral summary and state of a fetched cluster."""

from __future__ import annotations

from bot.providers.base import (
    ClusterState,
    ClusterSummary,
    Detail,
    Fact,
    count_text,
)
from bot.providers.together.models import (
    CURRENT_SOURCE,
    PROVIDER,
    UPDATE_FIELDS,
    TogetherCluster,
    rfc3339,
)


# -- summaries -----------------------------------------------------------------------------
def to_summary(cluster: TogetherCluster, project: str) -> ClusterSummary:
    end = cluster.reservation_end_time
    end_text = rfc3339(end) if end is not None else None
    details: dict[str, Detail] = {
        "cluster_type": cluster.cluster_type,
        "num_gpus": cluster.num_gpus,
        "num_reserved_gpus": cluster.num_reserved_gpus,
        "desired_preemptible_gpus": cluster.desired_preemptible_gpus,
        "allocated_preemptible_gpus": cluster.allocated_preemptible_gpus,
        "num_capacity_pool_gpus": cluster.num_capacity_pool_gpus,
        "capacity_pool_id": cluster.capacity_pool_id or None,
        "reservation_end_time": end_text,
        # Worker nodes not Ready (deleted ones aside): a steady cluster with any is not
        # proven healthy (a staged step waits for none, SPEC §14).
        "nodes_not_ready": sum(
            1
            for node in cluster.gpu_worker_nodes
            if node.status != "Ready" and node.deleted_at is None
        ),
    }
    return ClusterSummary(
        provider=PROVIDER,
        project=project,
        cluster_id=cluster.cluster_id,
        name=cluster.cluster_name,
        status=cluster.status,
        steady=cluster.steady,
        gpu_type=cluster.gpu_type,
        region=cluster.region,
        billing=cluster.billing_type,
        size=f"{cluster.num_gpus} GPUs",
        facts=_facts(cluster, end_text),
        details=details,
    )


def _facts(cluster: TogetherCluster, end_text: str | None) -> tuple[Fact, ...]:
    pool = count_text(cluster.num_capacity_pool_gpus)
    if cluster.capacity_pool_id:
        pool += f" ({cluster.capacity_pool_id})"
    billing = cluster.billing_type or "—"
    if end_text:
        billing += f" · ends {end_text}"
    return (
        Fact(label="GPU type", value=cluster.gpu_type or "—"),
        Fact(
            label="GPUs",
            value=f"{count_text(cluster.num_gpus)} total · "
            f"{count_text(cluster.num_reserved_gpus)} reserved",
        ),
        Fact(
            label="Preemptible",
            value=f"{count_text(cluster.desired_preemptible_gpus)} desired · "
            f"{count_text(cluster.allocated_preemptible_gpus)} allocated",
        ),
        Fact(label="Capacity pool", value=pool),
        Fact(label="Type", value=cluster.cluster_type or "—"),
        Fact(label="Region", value=cluster.region or "—"),
        Fact(label="Billing", value=billing),
    )


def current_values(cluster: TogetherCluster) -> dict[str, object]:
    """The current value of each settable field (JSON-ready)."""
    values: dict[str, object] = {
        name: getattr(cluster, CURRENT_SOURCE[name]) for name in UPDATE_FIELDS
    }
    end = cluster.reservation_end_time
    values["reservation_end_time"] = rfc3339(end) if end is not None else None
    return values


def cluster_state(cluster: TogetherCluster, project: str) -> ClusterState:
    """The ClusterState the adapter hands out: summary plus the six current values."""
    return ClusterState(summary=to_summary(cluster, project), current=current_values(cluster))
