"""Budget warnings (SPEC §13): after each poll's accrual, each ``warn_at`` of a budget that
the projected month-end spend (month-to-date + the rate now x hours left) has reached is
announced once a month in the notify channels of the scope's projects, and audited as
``budget_warning``. An alert key per crossing and channel makes it once across replicas
and restarts (bot.core.store.watch)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from bot.core.access import Access
from bot.core.guardrails.budget import figures
from bot.core.notifier import NotDelivered
from bot.core.spend.book import Scope, scopes_of
from bot.core.spend.notifier import SpendNotifier
from bot.core.spend.report import pct
from bot.core.store.watch import AlertClaim, WatchStore

log = logging.getLogger(__name__)


def channels_of(access: Access, scope: Scope) -> list[str]:
    """The notify channels of the scope's projects, each once."""
    found: list[str] = []
    for project in scope.projects:
        config = access.policy.projects.get(project)
        if config is not None and config.notify_channel and config.notify_channel not in found:
            found.append(config.notify_channel)
    return found


class BudgetWarnings:
    def __init__(
        self,
        access: Access,
        store: WatchStore,
        notifier: SpendNotifier,
        clock: Callable[[], datetime],
    ) -> None:
        self.access = access
        self.store = store
        self.notifier = notifier
        self.clock = clock

    async def after_poll(self, project: str) -> None:
        """Announce the warnings the project's and its team's budgets have reached."""
        if project not in self.access.policy.projects:
            return
        for scope in scopes_of(self.access.policy, project):
            if scope.budget is not None and scope.budget.warn_at:
                await self._judge(scope)

    async def _judge(self, scope: Scope) -> None:
        assert scope.budget is not None
        now = self.clock()
        standing = await self.access.spend.standing(scope, now)
        share = standing.percent(standing.projection(now))
        if share is None:
            return
        for mark in sorted(scope.budget.warn_at):
            if share < mark:
                break
            text = (
                f":warning: Budget warning: {pct(mark)} of {scope.title}'s budget for "
                f"{standing.month.label} reached — {figures(standing, Decimal(0), now)}."
            )
            crossing = f"budget-warning:{scope.kind}:{scope.name}:{standing.month.label}:{mark}"
            for channel in channels_of(self.access, scope):
                key = f"{crossing}:{channel}"
                claim = await self.store.claim_alert(key, channel)
                if isinstance(claim, AlertClaim):
                    await self._announce(claim, scope, channel, text, str(mark))

    async def _announce(
        self, claim: AlertClaim, scope: Scope, channel: str, text: str, mark: str
    ) -> None:
        try:
            ts = await self.notifier.announce(channel, text)
        except NotDelivered as exc:
            log.warning("budget warning for %s not posted: %s", scope.title, exc.reason)
            await self.store.forget_alert(claim)
            return
        await self.store.alert_posted(claim, ts)
        await self.access.audit(
            "gpuops",
            "budget_warning",
            project=scope.projects[0] if scope.kind == "project" else None,
            outcome=mark,
            scope=scope.title,
            channel=channel,
            text=text,
        )
