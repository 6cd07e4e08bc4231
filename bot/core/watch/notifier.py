"""The watcher's outbound port: what it tells the notify channel about remediations.

Chat-neutral: Slack implements it (bot.slack.watch_notifier). Every method gets the stored
record, whose ``channel`` and ``ts`` say where the remediation's message is."""

from __future__ import annotations

from typing import Literal, Protocol

from bot.core.store.watch import RemediationRecord
from bot.providers.together.remediations import Remediation

DecisionOutcome = Literal["approved", "rejected", "already_decided", "failed", "unknown"]


class WatchNotifier(Protocol):
    async def remediation_pending(self, record: RemediationRecord, remediation: Remediation) -> str:
        """Post the remediation awaiting approval, with its buttons; returns its message id.
        Raises ``bot.core.notifier.NotDelivered`` when it could not be posted."""
        ...

    async def remediation_decided(
        self, record: RemediationRecord, outcome: DecisionOutcome, detail: str
    ) -> None:
        """A click decided it (or tried to): edit the message (buttons gone unless it is
        back to awaiting) and say the result in its thread."""
        ...

    async def remediation_left_elsewhere(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        """It left PENDING_APPROVAL outside gpuops: edit the message, buttons removed."""
        ...

    async def remediation_progress(
        self, record: RemediationRecord, remediation: Remediation
    ) -> None:
        """Its state moved (PENDING, RUNNING, SUCCEEDED, FAILED, …): a reply in its thread."""
        ...
