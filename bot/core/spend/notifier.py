"""The spend features' outbound port: announcements in a notify channel (a budget's
warning) and the weekly digest with its chart. Chat-neutral: Slack implements it
(bot.slack.spend_notifier)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class SpendNotifier(Protocol):
    async def announce(self, channel: str, text: str) -> str:
        """Post ``text`` (gpuops's own words, user text escaped) in ``channel``; returns
        its message id. Raises ``bot.core.notifier.NotDelivered`` when it was not posted."""
        ...

    async def digest(
        self, channel: str, scopes: Sequence[Sequence[str]], chart: bytes, filename: str
    ) -> str:
        """Post the digest's lines (a title, then per scope) and share its chart (a PNG)
        in its thread in ``channel``; returns the message id. Raises NotDelivered when the
        digest was not posted."""
        ...
