"""The built-in providers' catalog, as the tests hand it to what takes one (production
builds its own at start, in the composition root), and the policy read against it."""

from __future__ import annotations

from pathlib import Path

from bot.core import policy
from bot.core.policy import Policy, ProjectCommon
from bot.providers.catalog import Catalog
from bot.providers.installed import built_in_catalog

CATALOG: Catalog = built_in_catalog()
CHANGES = tuple(CATALOG.provider_changes().values())


def load_policy(path: Path) -> Policy:
    """The policy file at ``path``, validated against the built-in providers."""
    return policy.load_policy(path, CATALOG)


def parse_policy(text: str, path: Path) -> Policy:
    """The policy ``text`` (read from ``path``), validated against the built-in providers."""
    return policy.parse_policy(text, path, CATALOG)


def policy_model() -> type[Policy]:
    """The policy model of the built-in providers."""
    return policy.policy_schema(CATALOG).model


def project_model(provider: str) -> type[ProjectCommon]:
    """The policy model of a built-in provider's projects."""
    return policy.policy_schema(CATALOG).project_model(provider)
