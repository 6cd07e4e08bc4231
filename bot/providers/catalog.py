"""Every provider's changes in one place, by provider name: for help text and for matching a
command word to a provider, without building an adapter (which needs a credential)."""

from __future__ import annotations

from bot.providers import e2e, together
from bot.providers.base import ProviderChanges, ProviderName

PROVIDER_CHANGES: dict[ProviderName, ProviderChanges] = {
    "together": together.CHANGES,
    "e2e": e2e.CHANGES,
}
