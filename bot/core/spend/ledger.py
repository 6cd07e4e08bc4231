"""The usage ledger's feed (SPEC §13): each watcher poll records every cluster it saw,
priced by the policy and plans in force then, and accrues the time since the last record
(bot.core.store.usage makes each interval count once)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from bot.core.policy import Policy
from bot.core.spend.rates import observe
from bot.core.store.usage import Accrued, UsageStore
from bot.metrics import LEDGER_ACCRUALS
from bot.providers.base import ClusterSummary

log = logging.getLogger(__name__)

# An interval longer than this many poll intervals is a gap in polling: accrued at the
# last known size, and counted as estimated.
GAP_POLLS = 2.5


class Ledger:
    def __init__(
        self,
        usage: UsageStore,
        policy: Callable[[], Policy],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.usage = usage
        self.policy = policy
        self.clock = clock

    async def record(
        self, project: str, clusters: Sequence[ClusterSummary], every_seconds: float
    ) -> list[Accrued]:
        """Record a poll of ``project``; StoreUnavailable when the store is away (the next
        record accrues the time since, as estimated)."""
        config = self.policy().projects.get(project)
        if config is None:
            return []
        observations = [observe(project, config, summary) for summary in clusters]
        gap = timedelta(seconds=every_seconds * GAP_POLLS)
        accrued = await self.usage.accrue(observations, self.clock(), gap)
        for item in accrued:
            if item.ms:
                LEDGER_ACCRUALS.labels("estimated" if item.estimated else "polled").inc()
        return accrued
