"""Health transitions of watched clusters (SPEC §7.2), as a pure step function.

Each poll gives the clusters a project lists now; ``observe`` compares them with what the
watcher remembered (``ClusterHealth`` per cluster, stored between polls) and says which
messages are due: an incident opens when a cluster leaves the healthy set or disappears,
its root is edited when the unhealthy status changes, and it closes when the cluster is
healthy again. Incidents are numbered per cluster so that each gets its own alert key
(the alert says "Incident 2 of this cluster": the number counts nothing wider).

Not unhealthy: a cluster provisioning (not steady) while gpuops has a change in flight on
it, and a cluster never yet seen healthy that is still provisioning (being created).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from bot.providers.base import ClusterSummary, ProviderName
from bot.providers.catalog import Catalog

GONE = "(gone)"  # the status recorded for a cluster that is no longer listed


def is_healthy(catalog: Catalog, provider: ProviderName, status: str) -> bool:
    """Whether a status is in the provider's healthy set (case and spaces ignored)."""
    return status.strip().lower() in catalog.descriptor(provider).healthy_statuses


class Condition(enum.StrEnum):
    HEALTHY = "healthy"
    CHANGING = "changing"  # provisioning after a change gpuops made, or being created
    UNHEALTHY = "unhealthy"
    GONE = "gone"


class ClusterHealth(BaseModel):
    """What the watcher remembers about one cluster between polls (stored as JSON)."""

    model_config = ConfigDict(frozen=True)

    cluster_id: str
    status: str
    condition: Condition
    seen_healthy: bool = False
    incident: int = 0  # the number of the latest incident; 0 = never had one
    open: bool = False  # whether that incident is still open


class EventKind(enum.StrEnum):
    OPENED = "opened"  # post a root message
    CHANGED = "changed"  # edit the root: still unhealthy, another status (or gone)
    RECOVERED = "recovered"  # reply in the thread and edit the root


@dataclass(frozen=True)
class HealthEvent:
    kind: EventKind
    cluster_id: str
    incident: int
    status: str  # the status now (GONE when the cluster disappeared)
    previous_status: str
    summary: ClusterSummary | None  # None when the cluster disappeared


def condition_of(
    catalog: Catalog, summary: ClusterSummary, *, changing_by_gpuops: bool, seen_healthy: bool
) -> Condition:
    if is_healthy(catalog, summary.provider, summary.status):
        return Condition.HEALTHY
    if not summary.steady and (changing_by_gpuops or not seen_healthy):
        return Condition.CHANGING
    return Condition.UNHEALTHY


def observe(
    remembered: Mapping[str, ClusterHealth],
    clusters: Iterable[ClusterSummary],
    changing_by_gpuops: frozenset[str] = frozenset(),
    *,
    catalog: Catalog,
) -> tuple[dict[str, ClusterHealth], list[HealthEvent]]:
    """The new memory and the events of one poll. ``changing_by_gpuops`` holds the ids of
    clusters with a gpuops change in flight; ``catalog`` says each provider's healthy
    statuses."""
    memory: dict[str, ClusterHealth] = {}
    events: list[HealthEvent] = []
    for summary in clusters:
        before = remembered.get(summary.cluster_id)
        after, event = _step(catalog, before, summary, summary.cluster_id in changing_by_gpuops)
        memory[summary.cluster_id] = after
        if event is not None:
            events.append(event)
    for cluster_id, before in remembered.items():
        if cluster_id not in memory:
            memory[cluster_id], event = _vanish(before)
            if event is not None:
                events.append(event)
    return memory, events


def _step(
    catalog: Catalog, before: ClusterHealth | None, summary: ClusterSummary, changing: bool
) -> tuple[ClusterHealth, HealthEvent | None]:
    seen_healthy = before.seen_healthy if before is not None else False
    condition = condition_of(
        catalog, summary, changing_by_gpuops=changing, seen_healthy=seen_healthy
    )
    incident = before.incident if before is not None else 0
    was_open = before.open if before is not None else False
    previous = before.status if before is not None else ""
    after = ClusterHealth(
        cluster_id=summary.cluster_id,
        status=summary.status,
        condition=condition,
        seen_healthy=seen_healthy or condition is Condition.HEALTHY,
        incident=incident,
        open=was_open,
    )

    def event(kind: EventKind, number: int) -> HealthEvent:
        return HealthEvent(kind, summary.cluster_id, number, summary.status, previous, summary)

    if condition is Condition.UNHEALTHY:
        if not was_open:
            after = after.model_copy(update={"incident": incident + 1, "open": True})
            return after, event(EventKind.OPENED, incident + 1)
        if previous != summary.status:
            return after, event(EventKind.CHANGED, incident)
        return after, None
    if condition is Condition.HEALTHY and was_open:
        return after.model_copy(update={"open": False}), event(EventKind.RECOVERED, incident)
    return after, None


def _vanish(before: ClusterHealth) -> tuple[ClusterHealth, HealthEvent | None]:
    """A remembered cluster that is no longer listed: an incident of its own, once."""
    if before.condition is Condition.GONE:
        return before, None
    if before.open:
        after = before.model_copy(update={"status": GONE, "condition": Condition.GONE})
        return after, HealthEvent(
            EventKind.CHANGED, before.cluster_id, before.incident, GONE, before.status, None
        )
    number = before.incident + 1
    after = before.model_copy(
        update={"status": GONE, "condition": Condition.GONE, "incident": number, "open": True}
    )
    return after, HealthEvent(
        EventKind.OPENED, before.cluster_id, number, GONE, before.status, None
    )
