"""How long the watcher waits before polling a project again (SPEC §7: it backs off on
429 and 5xx). A success returns to the interval; a 429 waits at least its Retry-After;
a 5xx, timeout or connection failure doubles the wait per failure in a row, up to a cap;
other errors (auth, not found) keep the interval, as repeating sooner would not help."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.providers.errors import (
    ProviderConnectionError,
    ProviderError,
    ProviderMalformedReply,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
)

_TRANSIENT = (ProviderServerError, ProviderTimeout, ProviderConnectionError, ProviderMalformedReply)


@dataclass
class PollBackoff:
    """The delay before the next poll of one project, from the outcome of the last one."""

    every_seconds: float
    max_seconds: float = 900.0
    jitter: float = 0.1  # ± this fraction, so replicas' projects do not poll in step
    rand: Callable[[], float] = field(default=random.random, repr=False)
    failures: int = 0

    def after_success(self) -> float:
        self.failures = 0
        return self._spread(self.every_seconds)

    def after_error(self, error: ProviderError) -> float:
        if isinstance(error, ProviderRateLimited):
            self.failures += 1
            wanted = max(error.retry_after or 0.0, self._doubled())
            return min(max(wanted, self.every_seconds), self._cap(error.retry_after))
        if isinstance(error, _TRANSIENT):
            self.failures += 1
            return self._spread(self._doubled())
        self.failures = 0
        return self._spread(self.every_seconds)

    def _doubled(self) -> float:
        return min(self.every_seconds * 2.0 ** min(self.failures, 16), self._cap(None))

    def _cap(self, retry_after: float | None) -> float:
        # A Retry-After longer than the cap is honoured: polling sooner only earns more 429s.
        return max(self.max_seconds, self.every_seconds, retry_after or 0.0)

    def _spread(self, seconds: float) -> float:
        return seconds * (1 + self.jitter * (2 * self.rand() - 1))
