"""What every part of the change workflow shares: the store, access, the notifier, the
clock and the background tasks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bot.core.access import Access
from bot.core.notifier import Notifier
from bot.core.policy import Policy
from bot.core.requests.tasks import BackgroundTasks, InFlight
from bot.core.store import Store


@dataclass
class RequestDeps:
    """What every part of the change workflow shares. ``clock`` may be replaced (tests)."""

    store: Store
    access: Access
    notifier: Notifier
    instance_id: str
    poll_seconds: float
    followup_minutes: float = 30.0
    exec_lease_seconds: float = 30.0
    # How long after it starts a change call may still reach the provider (its retries).
    max_call_seconds: float = 90.0
    # A scheduled change is sent only this long after its time; later, it expires.
    schedule_grace_seconds: float = 600.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    tasks: BackgroundTasks = field(default_factory=BackgroundTasks)
    in_flight: InFlight = field(default_factory=InFlight)

    @property
    def policy(self) -> Policy:
        """The policy in force now (a reload replaces it; every check reads it here)."""
        return self.access.policy
