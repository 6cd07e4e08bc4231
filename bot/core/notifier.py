"""The core's outbound port: what it tells people about change requests.

In chat-neutral terms: Slack implements it (bot.slack.notifier); the demo console and App
Home are other readers of the same events. Answers to whoever acted are return values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from bot.core.store import ChangeRequestRecord
from bot.errors import GpuopsError
from bot.providers.base import ClusterSummary

EventKind = Literal[
    "withdrawn",  # gpuops withdrew it before anyone could act (it could not be shown)
    "approved",
    "approval_added",  # one more approval of several needed; still pending
    "rule_changed",  # a policy reload changed what approving it takes; still pending
    "break_glass",  # an admin approved their own request, with a reason
    "denied",
    "cancelled",
    "refused",  # it could not go on (stale preview, requester revoked, cluster busy)
    "expired",
    "executing",
    "finished",  # the provider answered, or did not: see the record's state
    "interrupted",  # its executor is gone: ended without being (re)sent
    "revert_requested",  # someone asked to undo it: the text names the new request
    "confirmed",  # its requester confirmed an agent's proposal (SPEC §15)
]
Tone = Literal["good", "warning"]


@dataclass(frozen=True)
class RequestEvent:
    """Why a request changed state: what happened, who did it, and the words for it."""

    kind: EventKind
    actor: str  # a user id, or "gpuops"
    text: str | None = None  # why, or what the provider said
    left_pending: bool = False  # it was waiting for a decision: the approval prompt is done
    # finished: the cluster summary comes next (``Notifier.result``) and tells the result
    # (``record.result_message``), so the text need not be told apart from it.
    summary_follows: bool = False


class NotDelivered(GpuopsError):
    """The surface could not show something; ``user_message`` says what a person can do."""

    def __init__(self, reason: str, user_message: str) -> None:
        self.reason = reason
        self.user_message = user_message
        super().__init__(reason)


class Notifier(Protocol):
    """What the core tells people about a change request, wherever they read it."""

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        """Show a new request where it was asked for; its handle. Raises NotDelivered."""
        ...

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        """Ask approvers to decide; the prompt's handle. Raises NotDelivered."""
        ...

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        """The request moved to ``record.state`` because of ``event``."""
        ...

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        """A line in the request's thread about its cluster: another request open on it,
        or after the change (steady, or no longer followed)."""
        ...

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        """The cluster after the change, with the result (``record.result_message``); the
        summary's handle, None if it was not shown."""
        ...

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        """The cluster's status changed while it is followed: update the shown summary."""
        ...

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        """Repeat the request in the project's notify channel: where the copy was posted,
        None if it failed."""
        ...

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        """Show the request's current state in its first copy in ``channel`` (``ts``), as
        its thread's root shows it; a failure is logged, not raised."""
        ...

    async def policy_kept(self, channel: str, text: str) -> None:
        """Tell a notify channel that a policy file was refused and the policy in force
        stays (``text`` says why); a failure is logged, not raised."""
        ...


class QuietNotifier:
    """A Notifier that shows nothing: a reader that reacts to a few events (App Home, the
    Workflow Builder step) derives from it and overrides those."""

    async def request_opened(self, record: ChangeRequestRecord) -> str:
        return ""

    async def approval_requested(self, record: ChangeRequestRecord, expire_minutes: int) -> str:
        return ""

    async def request_changed(self, record: ChangeRequestRecord, event: RequestEvent) -> None:
        return None

    async def follow_up_note(self, record: ChangeRequestRecord, text: str, tone: Tone) -> None:
        return None

    async def result(self, record: ChangeRequestRecord, summary: ClusterSummary) -> str | None:
        return None

    async def status(
        self, record: ChangeRequestRecord, summary: ClusterSummary, as_of: datetime
    ) -> None:
        return None

    async def mirror(self, record: ChangeRequestRecord, headline: str, channel: str) -> str | None:
        return None

    async def mirror_edit(self, record: ChangeRequestRecord, channel: str, ts: str) -> None:
        return None

    async def policy_kept(self, channel: str, text: str) -> None:
        return None
