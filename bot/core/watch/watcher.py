"""The watcher: one per deployment (a lease in the store), polling each watched project
every ``every_seconds`` in a background task of its own (SPEC §7).

The holder renews its lease every half interval with a time to live of one and a half, so
when it dies another replica holds the lease within two intervals. Each project's poll
runs as a task of its own, so a slow provider delays neither the lease nor the others, and
none of it takes a pacer slot: people's acks and forms never wait behind a poll. What is
posted is decided by alert keys in the store, so even two pollers (a lease that lapsed
mid-poll) post nothing twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bot.core.fleet import FleetSnapshots
from bot.core.policy import Policy, PolicyHolder
from bot.core.policy.watch import WatchConfig
from bot.core.spend.ledger import Ledger
from bot.core.store import Store, StoreUnavailable
from bot.core.watch.backoff import PollBackoff
from bot.core.watch.incidents import IncidentDesk
from bot.core.watch.remediations import RemediationDesk
from bot.core.watch.reservations import ReminderDesk
from bot.metrics import WATCH_POLLS
from bot.providers.base import (
    ClusterSummary,
    ProviderAdapter,
    SupportsRemediations,
    SupportsReservations,
)
from bot.providers.errors import ProviderError

log = logging.getLogger(__name__)

LEASE_NAME = "gpuops-watcher"


@dataclass
class WatchedProject:
    name: str
    provider: str
    channel: str
    config: WatchConfig
    every_seconds: float
    backoff: PollBackoff
    due: float = 0.0  # time.monotonic() of the next poll
    polling: asyncio.Task[None] | None = field(default=None, repr=False)


def watched_projects(policy: Policy, every_override: float | None) -> list[WatchedProject]:
    """The projects whose policy has ``watch`` (with their notify channel)."""
    found = []
    for name, project in sorted(policy.projects.items()):
        if project.watch is None or project.notify_channel is None:
            continue
        every = every_override or float(project.watch.every_seconds)
        found.append(
            WatchedProject(
                name=name,
                provider=project.provider,
                channel=project.notify_channel,
                config=project.watch,
                every_seconds=every,
                backoff=PollBackoff(every),
            )
        )
    return found


class Watcher:
    def __init__(
        self,
        *,
        holder: PolicyHolder,
        store: Store,
        adapter_for: Callable[[str], ProviderAdapter],
        remediations: RemediationDesk,
        incidents: IncidentDesk,
        reminders: ReminderDesk,
        instance_id: str,
        every_override: float | None = None,
        fleet: FleetSnapshots | None = None,
        ledger: Ledger | None = None,
        after_poll: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.holder = holder
        self.store = store
        self.adapter_for = adapter_for
        self.remediations = remediations
        self.incidents = incidents
        self.reminders = reminders
        self.instance_id = instance_id
        self.ledger = ledger  # SPEC §13: every poll records each cluster's size and price
        self.after_poll = after_poll  # budget warnings, judged on what the poll accrued
        # What to poll and how often: the start-up policy's ``watch`` (until a restart).
        self.projects = watched_projects(holder.current, every_override)
        # Each poll refreshes the project's fleet snapshot, which the list and Home share.
        self.fleet = fleet or FleetSnapshots(adapter_for)
        for watched in self.projects:
            self.fleet.watched(watched.name, watched.every_seconds)
        interval = min((p.every_seconds for p in self.projects), default=60.0)
        self.tick_seconds = interval / 2
        self.lease_seconds = interval * 1.5
        self.holding = False
        self.stopping = False  # no new polls once a shutdown began

    @property
    def policy(self) -> Policy:
        """The policy in force (its holder's)."""
        return self.holder.current

    async def run_forever(self) -> None:
        """Hold the lease (or wait for it) and poll what is due, until cancelled."""
        if not self.projects:
            return
        try:
            while True:
                await self.tick()
                await asyncio.sleep(self.tick_seconds)
        finally:
            await self._stop_polls()
            if self.holding:
                with contextlib.suppress(Exception):
                    await self.store.release_lease(LEASE_NAME, self.instance_id)

    async def tick(self) -> None:
        await self._write_backlogs()
        try:
            held = await self.store.acquire_lease(LEASE_NAME, self.instance_id, self.lease_seconds)
        except Exception as exc:  # the store is down: stop polling until it is back
            log.warning("watcher lease unavailable: %s", type(exc).__name__)
            held = False
        if held and not self.holding:
            log.info("watcher: %s now watches %d project(s)", self.instance_id, len(self.projects))
        if not held and self.holding:
            # Polls in flight finish (no new one starts): one cancelled between posting a
            # message and storing where it is would leave that message without its edits,
            # and alert keys keep a second poller from posting anything twice.
            log.warning("watcher: %s lost the watch lease", self.instance_id)
        self.holding = held
        if not held or self.stopping:
            return
        now = time.monotonic()
        for project in self.projects:
            idle = project.polling is None or project.polling.done()
            if idle and now >= project.due:
                project.polling = asyncio.create_task(self._poll(project))

    async def _write_backlogs(self) -> None:
        """What this replica did in Slack while the store was away (a decision's outcome
        above all) is written on every replica, watching or not."""
        for backlog in (self.remediations.backlog, self.incidents.backlog):
            try:
                await backlog.flush()
            except StoreUnavailable as exc:
                log.info("watch backlog of %d kept: %s", len(backlog), exc.reason)

    async def _poll(self, project: WatchedProject) -> None:
        try:
            await self.poll_once(project)
        except ProviderError as exc:
            WATCH_POLLS.labels(project.provider, exc.kind).inc()
            delay = project.backoff.after_error(exc)
            log.warning(
                "watch poll of %s failed (%s); next in %.0f s", project.name, exc.kind, delay
            )
        except StoreUnavailable as exc:  # expected during an outage: one line, no trace
            WATCH_POLLS.labels(project.provider, "store").inc()
            log.warning("watch poll of %s skipped: %s", project.name, exc)
            delay = project.backoff.after_success()
        except Exception:
            WATCH_POLLS.labels(project.provider, "internal").inc()
            log.exception("watch poll of %s failed", project.name)
            delay = project.backoff.after_success()
        else:
            WATCH_POLLS.labels(project.provider, "ok").inc()
            delay = project.backoff.after_success()
        project.due = time.monotonic() + delay

    async def poll_once(self, project: WatchedProject) -> None:
        """One poll of one project: its clusters, then what the policy asks to watch."""
        adapter = self.adapter_for(project.name)
        clusters = list((await self.fleet.refresh(project.name)).clusters)
        await self._record_usage(project, clusters)
        if project.config.status:
            await self.incidents.poll(project.name, project.channel, clusters)
        if project.config.horizons and isinstance(adapter, SupportsReservations):
            horizons = project.config.horizons
            await self.reminders.poll(
                project.name, project.channel, clusters, horizons, adapter.reservation_field
            )
        if project.config.remediations and isinstance(adapter, SupportsRemediations):
            await self.remediations.poll(project.name, project.channel, clusters)

    async def _record_usage(self, project: WatchedProject, clusters: list[ClusterSummary]) -> None:
        """The ledger's record of this poll; a store away loses none of it (the next
        record accrues the time since, as estimated) and stops nothing else."""
        if self.ledger is None:
            return
        try:
            await self.ledger.record(project.name, clusters, project.every_seconds)
        except StoreUnavailable as exc:
            log.warning("usage of %s not recorded this poll: %s", project.name, exc.reason)
            return
        if self.after_poll is not None:
            try:
                await self.after_poll(project.name)
            except StoreUnavailable as exc:
                log.warning("budgets of %s not judged this poll: %s", project.name, exc.reason)

    async def finish_polls(self, within: float) -> None:
        """Let the polls in flight finish (at most ``within`` s) before a shutdown cancels
        them: a poll cut off between posting a message and storing where it is would
        leave that message without its edits and replies."""
        self.stopping = True
        running = [p.polling for p in self.projects if p.polling is not None]
        if running:
            await asyncio.wait(running, timeout=within)

    async def _stop_polls(self) -> None:
        running = [p.polling for p in self.projects if p.polling is not None]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for project in self.projects:
            project.polling = None
