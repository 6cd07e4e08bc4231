"""SlackWatchNotifier: the watcher's port (bot.core.watch.notifier) in Slack — a
remediation's or a health incident's root message in the notify channel, edits to it and
replies in its thread."""

from __future__ import annotations

import contextlib
import logging

from bot.core.api import RemediationDecision, RemediationRecord
from bot.core.notifier import NotDelivered
from bot.core.policy import PolicyHolder
from bot.core.watch.health import HealthEvent
from bot.core.watch.notifier import DecisionOutcome, ReservationReminder
from bot.providers.descriptor import ProviderDescriptor
from bot.providers.remediations import Remediation
from bot.slack.messenger import Messenger, SlackDeliveryError
from bot.slack.render import watch as render
from bot.slack.render.primitives import SlackMessage

log = logging.getLogger(__name__)


class SlackWatchNotifier:
    def __init__(self, messenger: Messenger, holder: PolicyHolder) -> None:
        self.messenger = messenger
        self.holder = holder  # the policy in force: each project's provider, as it is named

    def _provider(self, event: HealthEvent) -> ProviderDescriptor | None:
        summary = event.summary
        return None if summary is None else self.holder.catalog.descriptor(summary.provider)

    def _title(self, record: RemediationRecord) -> str:
        return self.holder.current.provider_title(record.project)

    async def remediation_pending(self, record: RemediationRecord, remediation: Remediation) -> str:
        message = render.remediation_pending(record, remediation, self._title(record))
        try:
            return await self.messenger.post(record.channel, message)
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc

    async def remediation_decided(
        self,
        record: RemediationRecord,
        outcome: DecisionOutcome,
        detail: str,
        remediation: Remediation | None = None,
    ) -> None:
        if record.ts is None:
            return
        provider = self._title(record)
        if record.decision is not RemediationDecision.AWAITING:
            decided = render.remediation_decided(record, outcome, provider, remediation)
            await self._edit(record, decided)
        await self._reply(record, render.decision_note(record, outcome, detail, provider))

    async def remediation_left_elsewhere(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        status = render.elsewhere_status(remediation)
        closed = render.remediation_closed(record, remediation, status, self._title(record))
        await self._edit(record, closed)

    async def remediation_reopened(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        provider = self._title(record)
        await self._edit(record, render.remediation_pending(record, remediation, provider))
        await self._reply(record, render.reopened_note(provider))

    async def remediation_gone(self, record: RemediationRecord, had_buttons: bool) -> None:
        provider = self._title(record)
        if had_buttons:
            await self._edit(record, render.remediation_gone(record, provider))
        await self._reply(record, render.gone_note(provider))

    async def remediation_progress(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        await self._reply(record, render.progress_note(remediation))

    async def incident_opened(self, project: str, channel: str, event: HealthEvent) -> str:
        try:
            message = render.incident_open(project, event, self._provider(event))
            return await self.messenger.post(channel, message)
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc

    async def incident_changed(
        self, project: str, channel: str, root: str, event: HealthEvent
    ) -> None:
        with contextlib.suppress(SlackDeliveryError):
            message = render.incident_open(project, event, self._provider(event))
            await self.messenger.update(channel, root, message)

    async def incident_recovered(
        self, project: str, channel: str, root: str, event: HealthEvent
    ) -> str:
        try:
            ts = await self.messenger.post(channel, render.recovery_note(event), thread_ts=root)
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc
        with contextlib.suppress(SlackDeliveryError):
            await self.messenger.update(channel, root, render.incident_closed(project, event))
        return ts

    async def reservation_reminder(self, channel: str, reminder: ReservationReminder) -> str:
        try:
            return await self.messenger.post(channel, render.reservation_reminder(reminder))
        except SlackDeliveryError as exc:
            raise NotDelivered(exc.code, exc.user_message) from exc

    async def _edit(self, record: RemediationRecord, message: SlackMessage) -> None:
        if record.ts is None:
            return
        with contextlib.suppress(SlackDeliveryError):
            await self.messenger.update(record.channel, record.ts, message)

    async def _reply(self, record: RemediationRecord, message: SlackMessage) -> None:
        if record.ts is None:
            return
        try:
            await self.messenger.post(record.channel, message, thread_ts=record.ts)
        except SlackDeliveryError as exc:
            log.warning("could not reply under remediation %s: %s", record.id, exc.code)
