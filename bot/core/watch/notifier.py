"""The watcher's outbound port: what it tells the notify channel about remediations and
cluster health.

Chat-neutral: Slack implements it (bot.slack.watch_notifier). The remediation methods get
the stored record, whose ``channel`` and ``ts`` say where its message is; the health ones
get the channel and, after the first, the id of the incident's root message."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from bot.core.store.watch import RemediationRecord
from bot.core.watch.health import HealthEvent
from bot.providers.base import ClusterSummary
from bot.providers.remediations import Remediation


@dataclass(frozen=True)
class ReservationReminder:
    """A reservation ends soon: ``remaining`` says how soon ("in 23 h")."""

    project: str
    summary: ClusterSummary
    end_time: datetime
    horizon: str
    remaining: str


DecisionOutcome = Literal["approved", "rejected", "already_decided", "failed", "unknown"]


class WatchNotifier(Protocol):
    async def remediation_pending(self, record: RemediationRecord, remediation: Remediation) -> str:
        """Post the remediation awaiting approval, with its buttons; returns its message id.
        Raises ``bot.core.notifier.NotDelivered`` when it could not be posted."""
        ...

    async def remediation_decided(
        self,
        record: RemediationRecord,
        outcome: DecisionOutcome,
        detail: str,
        remediation: Remediation | None = None,
    ) -> None:
        """A click decided it (or tried to): edit the message (buttons gone unless it is
        back to awaiting; with ``remediation``, still saying why) and say the result in its
        thread."""
        ...

    async def remediation_left_elsewhere(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        """It left PENDING_APPROVAL outside gpuops: edit the message, buttons removed."""
        ...

    async def remediation_reopened(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        """A decision whose answer was lost turned out not taken: the buttons are back."""
        ...

    async def remediation_gone(self, record: RemediationRecord, had_buttons: bool) -> None:
        """Together no longer has it (purged, or its cluster deleted): a reply in its
        thread, and the root edited without its buttons if it still had them."""
        ...

    async def remediation_progress(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        """Its state moved (PENDING, RUNNING, SUCCEEDED, FAILED, …): a reply in its thread."""
        ...

    async def incident_opened(self, project: str, channel: str, event: HealthEvent) -> str:
        """Post an incident's root (the cluster's summary, the next steps as buttons);
        returns its message id. Raises NotDelivered when it could not be posted."""
        ...

    async def incident_changed(
        self, project: str, channel: str, root: str, event: HealthEvent
    ) -> None:
        """Still unhealthy, another status (or gone): edit the root."""
        ...

    async def incident_recovered(
        self, project: str, channel: str, root: str, event: HealthEvent
    ) -> str:
        """Healthy again: a reply in the root's thread (its id returned), the root edited.
        Raises NotDelivered when the reply could not be posted."""
        ...

    async def reservation_reminder(self, channel: str, reminder: ReservationReminder) -> str:
        """Post a reminder with a button to extend the reservation; returns its id.
        Raises NotDelivered when it could not be posted."""
        ...
