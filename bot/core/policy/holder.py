"""The one policy in force: a holder every reader is given and reads at each use (never a
copy kept), which a reload swaps in one step."""

from __future__ import annotations

from bot.core.policy.model import Policy
from bot.errors import GpuopsError
from bot.providers.catalog import Catalog


class ForeignPolicy(GpuopsError, ValueError):
    """A policy validated against another catalog than the one in force."""


class PolicyHolder:
    """Holds the policy in force; ``swap`` puts another in its place for every reader at
    once (a single assignment: no reader sees half of either)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    @property
    def current(self) -> Policy:
        """The policy in force now."""
        return self._policy

    @property
    def catalog(self) -> Catalog:
        """The providers the policy in force (and any policy swapped in) is built from."""
        return self._policy.catalog

    def swap(self, policy: Policy) -> Policy:
        """Put ``policy`` in force; the one it replaces."""
        if policy.catalog is not self.catalog:
            raise ForeignPolicy("a policy of another provider catalog cannot be swapped in")
        previous, self._policy = self._policy, policy
        return previous
