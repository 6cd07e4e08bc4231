"""Reservation reminders in the notify channel (SPEC §7.2): for each cluster of a provider
with reservations (SupportsReservations) whose reservation field is set, one reminder per
horizon of the policy's ``reservation_reminders``, with a button that opens the update form
on that field.

Each horizon's alert key is stored once posted (or skipped, when a tighter one fell due at
the same poll), so a restart or a failover never repeats a reminder; a new end time is a
new reservation end with reminders of its own."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.core.notifier import NotDelivered
from bot.core.policy.watch import Horizon
from bot.core.store.watch import Held
from bot.core.watch.desk import WatchDesk
from bot.core.watch.keys import reminder_key
from bot.core.watch.notifier import ReservationReminder
from bot.core.watch.reminders import due, remaining_text
from bot.metrics import WATCH_ALERTS
from bot.providers.base import ClusterSummary

log = logging.getLogger(__name__)


def reservation_end(summary: ClusterSummary, field: str) -> datetime | None:
    """When the cluster's reservation ends, from its ``field`` detail (RFC 3339)."""
    raw = summary.details.get(field)
    if not isinstance(raw, str) or not raw:
        return None
    try:
        end = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return end if end.tzinfo is not None else end.replace(tzinfo=UTC)


class ReminderDesk(WatchDesk):
    """Reminders before a watched cluster's reservation ends, as messages."""

    async def poll(
        self,
        project: str,
        channel: str,
        clusters: list[ClusterSummary],
        horizons: Sequence[Horizon],
        field: str,
        now: datetime | None = None,
    ) -> None:
        """Post the reminders due now; ``field`` is the provider's reservation field."""
        await self.backlog.flush()
        moment = now or datetime.now(UTC)
        ending = [
            (summary, end)
            for summary in clusters
            if (end := reservation_end(summary, field)) is not None
            and self.access.authorizer.cluster_allowed(project, summary.cluster_id)
        ]
        keys = {
            summary.cluster_id: {
                h.text: reminder_key(project, summary.cluster_id, end, h.text) for h in horizons
            }
            for summary, end in ending
        }
        claimed = await self.store.claimed([k for each in keys.values() for k in each.values()])
        for summary, end in ending:
            cluster_keys = keys[summary.cluster_id]
            done = [text for text, key in cluster_keys.items() if key in claimed]
            await self._remind(project, channel, summary, end, horizons, moment, done)

    async def _remind(
        self,
        project: str,
        channel: str,
        summary: ClusterSummary,
        end: datetime,
        horizons: Sequence[Horizon],
        now: datetime,
        done: list[str],
    ) -> None:
        keys = {h.text: reminder_key(project, summary.cluster_id, end, h.text) for h in horizons}
        reminders = due(end, now, horizons, done)
        for skipped in reminders.skip:
            await self.store.claim_alert(keys[skipped.text], channel)
        if reminders.post is None:
            return
        claim = await self.store.claim_alert(keys[reminders.post.text], channel)
        if isinstance(claim, Held):
            return
        reminder = ReservationReminder(
            project=project,
            summary=summary,
            end_time=end,
            horizon=reminders.post.text,
            remaining=remaining_text(end, now),
        )
        try:
            ts = await self.notifier.reservation_reminder(channel, reminder)
        except NotDelivered as exc:
            log.warning("could not post a reminder for %s: %s", summary.cluster_id, exc.reason)
            give_back = functools.partial(self.store.forget_alert, claim)
            await self.backlog.attempt(f"giving back reminder {claim.key}", give_back)
            return
        posted = functools.partial(self.store.alert_posted, claim, ts)
        await self.backlog.attempt(f"recording where reminder {claim.key} is", posted)
        WATCH_ALERTS.labels("reminder").inc()
        await self.access.audit(
            "gpuops",
            "reservation_reminder",
            project=project,
            cluster_id=summary.cluster_id,
            outcome="posted",
            horizon=reminders.post.text,
            reservation_end_time=end.isoformat(),
        )
