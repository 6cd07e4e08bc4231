"""After a change: poll the cluster until it is steady, updating its summary.

One replica polls a request, under a lease. Polling goes on through a store outage: it
needs the provider and Slack, and only the replica that sent the change starts it."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.core.requests.settle import RequestDeps
from bot.core.store import ChangeRequestRecord, StoreUnavailable
from bot.providers.base import ClusterSummary
from bot.providers.errors import ProviderError

log = logging.getLogger(__name__)

_FAILURES_BEFORE_GIVING_UP = 5


class FollowUp:
    """Follows a changed cluster until it is steady or the follow-up time is up."""

    def __init__(self, deps: RequestDeps) -> None:
        self.deps = deps

    async def follow_up(self, record: ChangeRequestRecord) -> None:
        lease = f"poll:{record.id}"
        ttl = max(self.deps.poll_seconds * 3, 10.0)
        if not await self._hold(lease, ttl):
            return
        try:
            await self._poll_until_steady(record, lease, ttl)
        finally:
            try:
                await self.deps.store.release_lease(lease, self.deps.instance_id)
            except StoreUnavailable as exc:
                log.warning("could not release %s (it lapses by itself): %s", lease, exc)

    async def _hold(self, lease: str, ttl: float) -> bool:
        """Take or renew the poll lease; True too when the store cannot say (keep polling)."""
        try:
            return await self.deps.store.acquire_lease(lease, self.deps.instance_id, ttl)
        except StoreUnavailable as exc:
            log.warning("following without the %s lease: %s", lease, exc)
            return True

    async def _poll_until_steady(self, record: ChangeRequestRecord, lease: str, ttl: float) -> None:
        deps = self.deps
        adapter = deps.access.adapter_for(record.project)
        deadline = deps.clock() + timedelta(minutes=deps.followup_minutes)
        last_status: str | None = None
        failures = 0
        while deps.clock() < deadline:
            await asyncio.sleep(deps.poll_seconds)
            await self._hold(lease, ttl)
            try:
                summary = (await adapter.get_cluster(record.cluster_id)).summary
            except ProviderError as exc:
                failures += 1
                if failures >= _FAILURES_BEFORE_GIVING_UP:
                    await deps.notifier.follow_up_note(
                        record,
                        f"Stopped following {record.cluster_id}: {exc.user_message}",
                        "warning",
                    )
                    return
                continue
            failures = 0
            if summary.status != last_status:
                last_status = summary.status
                await self._show_status(record, summary)
            if summary.steady:
                await deps.notifier.follow_up_note(
                    record, f"{summary.name} is {summary.status}.", "good"
                )
                return
        await deps.notifier.follow_up_note(
            record,
            f"{record.cluster_id} is still {last_status} after {deps.followup_minutes:g} "
            "minutes; stopped following.",
            "warning",
        )

    async def _show_status(self, record: ChangeRequestRecord, summary: ClusterSummary) -> None:
        try:
            fresh = await self.deps.store.get_request(record.id) or record
        except StoreUnavailable:
            fresh = record
        await self.deps.notifier.status(fresh, summary, self.deps.clock())
        try:  # the channel's timeline lists each status the follow-up showed
            await self.deps.access.audit(
                "gpuops",
                "status",
                project=record.project,
                cluster_id=record.cluster_id,
                request_id=record.id,
                outcome=summary.status,
                steady=summary.steady,
            )
        except StoreUnavailable as exc:
            log.warning("could not audit a status of %s: %s", record.id, exc)
