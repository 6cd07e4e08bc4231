"""Keeping people's Home tabs current: a Notifier reader that republishes the Home of whoever
a request's change concerns (its requester, who acted, approvers who have it listed), at most
once per person per interval (trailing edge), and a fan-out that lets it read the same events
as the chat surface without ever breaking a change."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime

from bot.core.notifier import Notifier, QuietNotifier, RequestEvent, Tone
from bot.core.store import ChangeRequestRecord
from bot.metrics import HOME_PUBLISHES
from bot.providers.base import ClusterSummary
from bot.redact import redact

log = logging.getLogger(__name__)

Publish = Callable[[str], Awaitable[None]]
MayApprove = Callable[[str, ChangeRequestRecord], Awaitable[bool]]


class HomeRefresher(QuietNotifier):
    """Republishes Home tabs when requests change; implements the Notifier port as a reader
    (it shows nothing in a channel: its handles are empty).

    A burst of events for one person ends in one publish ``delay`` after the first, and two
    publishes for a person are at least ``interval`` apart; what is published is built when
    it is sent, so it shows the latest state. A failed publish is logged and counted."""

    def __init__(
        self,
        publish: Publish,
        may_approve: MayApprove,
        *,
        interval: float = 5.0,
        delay: float = 1.0,
        viewers_kept: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self._may_approve = may_approve
        self.interval = interval
        self.delay = delay
        self._clock = clock
        self._viewers_kept = viewers_kept
        # People who opened their Home lately (an approver's tab is refreshed only if seen).
        self._viewers: OrderedDict[str, None] = OrderedDict()
        self._last: dict[str, float] = {}
        self._scheduled: dict[str, asyncio.Task[None]] = {}
        # Finding the approvers to refresh (authorization checks) runs beside the change.
        self._lookups: set[asyncio.Task[None]] = set()

    # -- scheduling -------------------------------------------------------------------------
    def opened(self, user: str) -> None:
        """The person opened their Home: publish it now (or as soon as the interval allows)."""
        self._viewers[user] = None
        self._viewers.move_to_end(user)
        while len(self._viewers) > self._viewers_kept:
            self._viewers.popitem(last=False)
        self.schedule(user, delay=0.0)

    def schedule(self, user: str, *, delay: float | None = None) -> None:
        """Publish the person's Home once, after ``delay`` and the interval since the last."""
        if user in self._scheduled:
            return  # the publish already scheduled will show this change too
        wait = self.delay if delay is None else delay
        last = self._last.get(user)
        if last is not None:
            wait = max(wait, last + self.interval - self._clock())
        self._scheduled[user] = asyncio.create_task(self._publish_after(user, wait))

    async def _publish_after(self, user: str, wait: float) -> None:
        try:
            if wait > 0:
                await asyncio.sleep(wait)
        finally:
            self._scheduled.pop(user, None)
        self._last[user] = self._clock()
        try:
            await self._publish(user)
        except Exception as exc:  # a Home that cannot be shown never breaks a change
            HOME_PUBLISHES.labels("failed").inc()
            log.warning("home: publishing for %s failed: %s", user, redact(str(exc)))
            return
        HOME_PUBLISHES.labels("ok").inc()

    async def drain(self) -> None:
        """Wait for the lookups and publishes scheduled now (tests, shutdown)."""
        while self._scheduled or self._lookups:
            pending = [*self._lookups, *self._scheduled.values()]
            await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        tasks = [*self._lookups, *self._scheduled.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- who a change concerns --------------------------------------------------------------
    def _refresh(self, users: Iterable[str]) -> None:
        # Only tabs people have opened: building one lists every granted project's clusters,
        # and a tab nobody looks at is published fresh when its owner opens it.
        for user in dict.fromkeys(users):
            if user in self._viewers:
                self.schedule(user)

    def _refresh_approvers(self, record: ChangeRequestRecord) -> None:
        """Refresh the tabs of people who opened theirs and may decide this request."""
        task = asyncio.create_task(self._look_up_approvers(record))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    async def _look_up_approvers(self, record: ChangeRequestRecord) -> None:
        try:
            approvers = [u for u in list(self._viewers) if await self._may_approve(u, record)]
        except Exception as exc:  # e.g. a user group that cannot be read now
            HOME_PUBLISHES.labels("failed").inc()
            log.warning("home: finding approvers of %s failed: %s", record.id, redact(str(exc)))
            return
        self._refresh(approvers)

    # -- the Notifier port ------------------------------------------------------------------
    async def request_opened(self, record: ChangeRequestRecord) -> str:
        self._refresh([record.requester])
        return ""

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        self._refresh([record.requester])
        self._refresh_approvers(record)
        return ""

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        self._refresh([record.requester, event.actor])
        if event.left_pending:  # it leaves the approvers' lists
            self._refresh_approvers(record)

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        self._refresh([record.requester])
        return None


class FanOutNotifier:
    """Tells a primary Notifier (whose handles and NotDelivered count) and readers the same
    events; a reader's failure is logged and never reaches the change."""

    def __init__(self, primary: Notifier, readers: Sequence[Notifier]) -> None:
        self.primary = primary
        self.readers = list(readers)

    async def _tell_readers(self, what: str, call: Callable[[Notifier], Awaitable[object]]) -> None:
        for reader in self.readers:
            try:
                await call(reader)
            except Exception as exc:
                log.warning("notifier reader %s failed on %s: %s", reader, what, redact(str(exc)))

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        handle = await self.primary.request_opened(record)
        await self._tell_readers("request_opened", lambda r: r.request_opened(record))
        return handle

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        handle = await self.primary.approval_requested(record, expire_minutes)
        await self._tell_readers(
            "approval_requested", lambda r: r.approval_requested(record, expire_minutes)
        )
        return handle

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        await self.primary.request_changed(record, event)
        await self._tell_readers("request_changed", lambda r: r.request_changed(record, event))

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        await self.primary.follow_up_note(record, text, tone)
        await self._tell_readers("follow_up_note", lambda r: r.follow_up_note(record, text, tone))

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        handle = await self.primary.result(record, summary)
        await self._tell_readers("result", lambda r: r.result(record, summary))
        return handle

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        await self.primary.status(record, summary, as_of)
        await self._tell_readers("status", lambda r: r.status(record, summary, as_of))

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        shown = await self.primary.mirror(record, headline, channel)
        await self._tell_readers("mirror", lambda r: r.mirror(record, headline, channel))
        return shown

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        await self.primary.mirror_edit(record, channel, ts)
        await self._tell_readers("mirror_edit", lambda r: r.mirror_edit(record, channel, ts))

    async def policy_kept(self, channel: str, text: str) -> None:
        await self.primary.policy_kept(channel, text)
        await self._tell_readers("policy_kept", lambda r: r.policy_kept(channel, text))
