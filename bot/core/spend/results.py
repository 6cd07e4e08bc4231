"""Every change's result in the usage ledger (SPEC §13): a reader of the change workflow's
notifications (bot.core.home_refresh.FanOutNotifier) that records the cluster as the result
or a later status shows it, so the time after a change accrues at its new size from the
moment it is known, not from the next poll. Only watched projects' clusters are in the
ledger; a reader's failure never reaches the change."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from bot.core.notifier import RequestEvent, Tone
from bot.core.spend.ledger import Ledger
from bot.core.store import ChangeRequestRecord
from bot.providers.base import ClusterSummary


class LedgerOnResults:
    """The Notifier port, recording results and statuses; everything else is nothing to it."""

    def __init__(self, ledger: Ledger, every_of: Callable[[str], float | None]) -> None:
        self.ledger = ledger
        self.every_of = every_of  # a watched project's poll interval; None: not watched

    async def _record(self, summary: ClusterSummary) -> None:
        every = self.every_of(summary.project)
        if every is not None:
            await self.ledger.record(summary.project, [summary], every)

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        await self._record(summary)
        return None

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        await self._record(summary)

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        return ""

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        return ""

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        return None

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        return None

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        return None

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        return None

    async def policy_kept(self, channel: str, text: str) -> None:
        return None
