"""After a change: poll the cluster until it is steady, updating its summary.

The store knows which requests are followed, and until when (``follow_until``), so a
follow-up outlives the process that began it: every replica's sweep resumes the ones no
live replica is polling, and the poll lease (compare-and-set) lets one replica poll each.
Polling goes on through a store outage: it needs the provider and Slack."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from bot.core.notifier import Tone
from bot.core.requests.deps import RequestDeps
from bot.core.store import ChangeRequestRecord, StoreUnavailable
from bot.providers.base import ClusterSummary
from bot.providers.errors import ProviderError

log = logging.getLogger(__name__)

_FAILURES_BEFORE_GIVING_UP = 5


def poll_lease(request_id: str) -> str:
    return f"poll:{request_id}"


class FollowUp:
    """Follows a changed cluster until it is steady or the follow-up time is up."""

    def __init__(self, deps: RequestDeps) -> None:
        self.deps = deps
        self._following: set[str] = set()  # the requests this process polls now

    async def begin(self, record: ChangeRequestRecord) -> None:
        """Note in the store until when ``record``'s cluster is followed, and which summary
        the follow-up edits (``record.summary_ts``, just posted), then follow it."""
        until = self.deps.clock() + timedelta(minutes=self.deps.followup_minutes)
        fields: dict[str, Any] = {"follow_until": until}
        if record.summary_ts:
            fields["summary_ts"] = record.summary_ts
        try:
            record = await self.deps.store.update_fields(record.id, **fields) or record
        except StoreUnavailable as exc:  # followed here all the same, just not resumable
            log.warning("change %s: follow-up not recorded: %s", record.id, exc)
            record = record.model_copy(update={"follow_until": until})
        self.deps.tasks.spawn(self.follow_up(record), f"follow-up-{record.id}")

    async def resume(self) -> int:
        """Follow the recorded follow-ups nobody here polls (a restart, a replica gone);
        the poll lease keeps a live replica's own. The number started."""
        if self.deps.poll_seconds <= 0:
            return 0
        started = 0
        for record in await self.deps.store.list_following(self.deps.clock()):
            if record.id not in self._following:
                self.deps.tasks.spawn(self.follow_up(record), f"follow-up-{record.id}")
                started += 1
        return started

    async def follow_up(self, record: ChangeRequestRecord) -> None:
        if record.id in self._following:
            return
        lease = poll_lease(record.id)
        ttl = max(self.deps.poll_seconds * 3, 10.0)
        self._following.add(record.id)
        try:
            if await self._hold(lease, ttl):
                await self._poll_and_end(record, lease, ttl)
        finally:
            self._following.discard(record.id)

    async def _poll_and_end(self, record: ChangeRequestRecord, lease: str, ttl: float) -> None:
        try:
            await self._poll_until_steady(record, lease, ttl)
        finally:
            try:
                await self.deps.store.release_lease(lease, self.deps.instance_id)
            except StoreUnavailable as exc:
                log.warning("could not release %s (it lapses by itself): %s", lease, exc)

    async def _finished(self, record: ChangeRequestRecord) -> None:
        try:
            await self.deps.store.update_fields(record.id, follow_until=None)
        except StoreUnavailable as exc:  # resumed later, it ends at once: steady or past due
            log.warning("change %s: follow-up end not recorded: %s", record.id, exc)

    async def _hold(self, lease: str, ttl: float) -> bool:
        """Take or renew the poll lease; True too when the store cannot say (keep polling)."""
        try:
            return await self.deps.store.acquire_lease(lease, self.deps.instance_id, ttl)
        except StoreUnavailable as exc:
            log.warning("following without the %s lease: %s", lease, exc)
            return True

    async def _poll_until_steady(self, record: ChangeRequestRecord, lease: str, ttl: float) -> None:
        """Poll and show until it ends, or until another replica took the poll lease over
        (it goes on)."""
        deps = self.deps
        adapter = deps.access.adapter_for(record.project)
        deadline = record.follow_until or deps.clock() + timedelta(minutes=deps.followup_minutes)
        last_status: str | None = None
        failures = 0
        while deps.clock() < deadline:
            await asyncio.sleep(deps.poll_seconds)
            if not await self._hold(lease, ttl):
                return
            try:
                summary = (await adapter.get_cluster(record.cluster_id)).summary
            except ProviderError as exc:
                failures += 1
                if failures >= _FAILURES_BEFORE_GIVING_UP:
                    why = exc.user_message
                    await self._end(record, f"Stopped following {record.cluster_id}: {why}")
                    return
                continue
            failures = 0
            if summary.status != last_status:
                last_status = summary.status
                await self._show_status(record, summary)
            if summary.steady:
                await self._end(record, f"{summary.name} is {summary.status}.", "good")
                return
        await self._end(
            record,
            f"{record.cluster_id} is still {last_status or 'not steady'} after "
            f"{deps.followup_minutes:g} minutes; stopped following.",
        )

    async def _end(self, record: ChangeRequestRecord, text: str, tone: Tone = "warning") -> None:
        # Recorded before it is said: a replica that resumes it must not say it again.
        await self._finished(record)
        await self.deps.notifier.follow_up_note(record, text, tone)

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
