"""The weekly spend digest (SPEC §13): at the policy's ``digest`` weekday and hour (in its
time zone), once across replicas (an alert key per week), each team's and project's
month-to-date, projection, GPU-hours and the week's spend, from the ledger — and a chart of
the month day by day against each budget."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from bot.core.access import Access
from bot.core.notifier import NotDelivered
from bot.core.policy.guardrails import WEEKDAYS
from bot.core.policy.spend import Digest
from bot.core.spend.book import Scope, Standing, project_scope, team_scope
from bot.core.spend.chart import Series, spend_chart
from bot.core.spend.notifier import SpendNotifier
from bot.core.spend.rates import usd
from bot.core.spend.report import bands_text, dollars, hours, pct
from bot.core.store import StoreUnavailable
from bot.core.store.watch import AlertClaim, WatchStore

log = logging.getLogger(__name__)

LATE_BY_AT_MOST = timedelta(hours=24)  # a digest missed for longer waits for next week


def slot_of(digest: Digest, now: datetime) -> datetime:
    """The latest digest time at or before ``now`` (its weekday and hour, in its zone)."""
    zone = ZoneInfo(digest.time_zone)
    local = now.astimezone(zone)
    back = (local.weekday() - WEEKDAYS.index(digest.weekday)) % 7
    day = local.date() - timedelta(days=back)
    slot = datetime(day.year, day.month, day.day, digest.hour, tzinfo=zone)
    if slot > now:
        slot -= timedelta(days=7)
    return slot


def digest_scopes(access: Access) -> list[Scope]:
    """The teams, then every project, in name order."""
    policy = access.policy
    return [team_scope(policy, t) for t in sorted(policy.teams)] + [
        project_scope(policy, p) for p in sorted(policy.projects)
    ]


def scope_line(standing: Standing, week: Decimal, now: datetime) -> str:
    line = f"*{standing.scope.title}*: month-to-date {dollars(standing.spent)}"
    share = standing.percent(standing.spent)
    if share is not None:
        line += f" ({pct(share)})"
    if standing.estimated:
        line += f", estimated {dollars(standing.estimated)}"
    line += f" · this week {dollars(week)} · {hours(standing.gpu_hours)} GPU-hours"
    if standing.month.start <= now < standing.month.end:
        line += f" · projected {dollars(standing.projection(now))}"
    return f"{line} · {bands_text(standing.scope)}"


class DigestRunner:
    """Posts the digest when it is due (every replica looks; one posts)."""

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

    async def run_forever(self, every_seconds: float) -> None:
        while True:
            try:
                await self.post_if_due()
            except StoreUnavailable as exc:
                log.warning("the spend digest waits for the store: %s", exc.reason)
            except Exception:
                log.exception("the spend digest failed")
            await asyncio.sleep(every_seconds)

    async def post_if_due(self) -> bool:
        """Post this week's digest if it is due and not posted; True when this call did."""
        digest = self.access.policy.digest
        if digest is None:
            return False
        now = self.clock()
        slot = slot_of(digest, now)
        if now - slot > LATE_BY_AT_MOST:
            return False
        claim = await self.store.claim_alert(f"spend-digest:{slot.isoformat()}", digest.channel)
        if not isinstance(claim, AlertClaim):
            return False
        try:
            scopes, chart = await self.compose(slot, now)
            ts = await self.notifier.digest(digest.channel, scopes, chart, "spend.png")
        except NotDelivered as exc:
            log.warning("the spend digest was not posted: %s", exc.reason)
            await self.store.forget_alert(claim)
            return False
        except BaseException:
            await self.store.forget_alert(claim)
            raise
        await self.store.alert_posted(claim, ts)
        return True

    async def compose(self, slot: datetime, now: datetime) -> tuple[list[list[str]], bytes]:
        """The digest's lines (a title, then a line per scope) and chart, from the ledger
        as it is ``now``."""
        lines = [f":bar_chart: *Weekly spend digest* — the week to {slot:%Y-%m-%d %H:%M %Z}"]
        series: list[Series] = []
        label = ""
        for scope in digest_scopes(self.access):
            standing = await self.access.spend.standing(scope, now)
            week = await self._spent(scope, slot - timedelta(days=7), now)
            lines.append(scope_line(standing, week, now))
            label = standing.month.label
            if scope.kind == "team" or scope.name not in self._teamed():
                series.append(await self._series(standing, now))
        return [lines], spend_chart(label, series)

    def _teamed(self) -> set[str]:
        return {p for team in self.access.policy.teams.values() for p in team.projects}

    async def _spent(self, scope: Scope, start: datetime, end: datetime) -> Decimal:
        policy = self.access.policy
        rows = await self.access.spend.usage.by_cluster(scope.projects, start, end)
        return sum((usd(policy, r.cost, r.currency) or Decimal(0) for r in rows), Decimal(0))

    async def _series(self, standing: Standing, now: datetime) -> Series:
        policy = self.access.policy
        month = standing.month
        zone = ZoneInfo(month.time_zone)
        rows = await self.access.spend.usage.by_bucket(
            standing.scope.projects, month.start, min(month.end, now)
        )
        by_day: dict[date, Decimal] = {}
        for row in rows:
            assert row.bucket_start is not None
            day = row.bucket_start.astimezone(zone).date()
            amount = usd(policy, row.cost, row.currency) or Decimal(0)
            by_day[day] = by_day.get(day, Decimal(0)) + amount
        days = sorted(by_day)
        running = Decimal(0)
        cumulative = []
        for day in days:
            running += by_day[day]
            cumulative.append(running)
        budget = standing.scope.budget
        return Series(
            standing.scope.title,
            tuple(days),
            tuple(cumulative),
            None if budget is None else budget.monthly_usd,
        )
