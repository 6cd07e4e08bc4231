"""What a staged plan reads of its cluster (SPEC §14): whether a steady cluster is healthy
(its status, every node Ready) and its size in the plan's unit."""

from __future__ import annotations

from bot.core.staged import words
from bot.core.staged.plan import StagedPlan
from bot.providers.base import ClusterState
from bot.providers.catalog import Catalog


def unhealthy(catalog: Catalog, state: ClusterState) -> str | None:
    """Why a steady cluster is not healthy (its status, nodes not Ready), None if it is."""
    summary = state.summary
    descriptor = catalog.descriptor(summary.provider)
    if summary.status.strip().lower() not in descriptor.healthy_statuses:
        return words.left_steady(summary.status)
    not_ready = summary.details.get("nodes_not_ready")
    if isinstance(not_ready, int) and not_ready > 0:
        return words.nodes_not_ready(not_ready)
    return None


def size_of(staged: StagedPlan, state: ClusterState) -> int | None:
    """The cluster's size in the plan's unit; an additive field (nodes to add) has no
    current value, so the node count tells."""
    value = (
        state.summary.details.get("nodes")
        if staged.unit == "nodes"
        else state.current.get(staged.field)
    )
    return value if isinstance(value, int) else None
