"""Health incidents in the notify channel (SPEC §7.2): one root message per incident with
the cluster's summary, the root edited while it stays unhealthy, and its recovery as a
reply in the thread (root edited too).

What the watcher remembers of each cluster's health is stored after every poll, and every
root and reply has an alert key, so a restart or a failover neither repeats a message nor
misses a transition that outlasted two polls. A message that could not be posted leaves
the cluster's memory as it was, so the next poll tries again."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from bot.core.notifier import NotDelivered
from bot.core.store import RequestState
from bot.core.store.watch import AlertClaim, Held
from bot.core.watch.desk import WatchDesk
from bot.core.watch.health import ClusterHealth, EventKind, HealthEvent, observe
from bot.core.watch.keys import incident_key, recovery_key
from bot.metrics import WATCH_ALERTS
from bot.providers.base import ClusterSummary

log = logging.getLogger(__name__)

# A cluster provisioning after a change gpuops made is not an incident: the change is in
# flight, or it ended this recently (Together accepts an update at once, then provisions).
_CHANGE_STATES = [
    RequestState.APPROVED.value,
    RequestState.EXECUTING.value,
    RequestState.SUCCEEDED.value,
    RequestState.UNKNOWN.value,
]
PROVISIONING_AFTER_CHANGE = timedelta(minutes=30)


def memory_name(project: str) -> str:
    return f"health:{project}"


class IncidentDesk(WatchDesk):
    """Health transitions of the watched projects' clusters, as messages."""

    async def poll(self, project: str, channel: str, clusters: list[ClusterSummary]) -> None:
        await self.backlog.flush()
        allowed = [
            c for c in clusters if self.access.authorizer.cluster_allowed(project, c.cluster_id)
        ]
        stored = await self.store.recall(memory_name(project))
        remembered = {key: ClusterHealth.model_validate(value) for key, value in stored.items()}
        changing = await self._changing_by_gpuops(project)
        memory, events = observe(remembered, allowed, changing, catalog=self.access.catalog)
        for event in events:
            if not await self._tell(project, channel, event):
                previous = remembered.get(event.cluster_id)
                if previous is None:
                    memory.pop(event.cluster_id, None)
                else:
                    memory[event.cluster_id] = previous
        data = {key: value.model_dump(mode="json") for key, value in memory.items()}
        if data != stored:  # most polls change nothing: no write
            await self.store.remember(memory_name(project), data)

    async def _changing_by_gpuops(self, project: str) -> frozenset[str]:
        since = datetime.now(UTC) - PROVISIONING_AFTER_CHANGE
        return await self.store.clusters_changed_since(project, since, _CHANGE_STATES)

    async def _tell(self, project: str, channel: str, event: HealthEvent) -> bool:
        """Post, edit or reply for one event; False if it must be tried again next poll."""
        root_key = incident_key(project, event.cluster_id, event.incident)
        if event.kind is EventKind.OPENED:
            return await self._open(project, channel, root_key, event)
        root_ts = await self.store.alert_ts(root_key)
        if root_ts is None:
            # Its root was never posted (it failed for good): a change is news of its own,
            # a recovery of an incident nobody was told of is not.
            if event.kind is EventKind.RECOVERED:
                return True
            return await self._open(project, channel, root_key, event)
        if event.kind is EventKind.CHANGED:
            await self.notifier.incident_changed(project, channel, root_ts, event)
            return True
        reply_key = recovery_key(project, event.cluster_id, event.incident)
        recovered = functools.partial(
            self.notifier.incident_recovered, project, channel, root_ts, event
        )
        return await self._post_once(
            project, channel, reply_key, event, recovered, ("a recovery", "recovery", "recovered")
        )

    async def _open(self, project: str, channel: str, key: str, event: HealthEvent) -> bool:
        """Post an incident's root once. A claim held but never posted is tried again at
        the next poll (False: the cluster's memory stays), until it is posted or taken
        over."""
        opened = functools.partial(self.notifier.incident_opened, project, channel, event)
        return await self._post_once(
            project, channel, key, event, opened, ("an incident", "health", "opened")
        )

    async def _post_once(
        self,
        project: str,
        channel: str,
        key: str,
        event: HealthEvent,
        post: Callable[[], Awaitable[str]],
        said: tuple[str, str, str],
    ) -> bool:
        """Post one alert under its key's claim (``post``: the message's ts), counted and
        audited; True when it is posted, here or before, False when it must be tried again
        next poll. ``said``: what it is in the log, its alert label, its audit outcome."""
        what, label, outcome = said
        claim = await self.store.claim_alert(key, channel)
        if isinstance(claim, Held):
            return claim is Held.POSTED
        try:
            ts = await post()
        except NotDelivered as exc:
            log.warning("could not post %s of %s: %s", what, event.cluster_id, exc.reason)
            await self._give_back(claim)
            return False
        await self._posted(claim, ts)
        WATCH_ALERTS.labels(label).inc()
        await self._audit(project, event, outcome)
        return True

    async def _give_back(self, claim: AlertClaim) -> None:
        await self.backlog.attempt(
            f"giving back alert {claim.key}", functools.partial(self.store.forget_alert, claim)
        )

    async def _posted(self, claim: AlertClaim, ts: str) -> None:
        await self.backlog.attempt(
            f"recording where alert {claim.key} is",
            functools.partial(self.store.alert_posted, claim, ts),
        )

    async def _audit(self, project: str, event: HealthEvent, outcome: str) -> None:
        await self.access.audit(
            "gpuops",
            "health_alert",
            project=project,
            cluster_id=event.cluster_id,
            outcome=outcome,
            status=event.status,
            previous_status=event.previous_status,
            incident=event.incident,
        )
