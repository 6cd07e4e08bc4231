"""check-config's offline checks: the environment and the policy, and the credentials each
project's provider section names."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import ConfigError, Settings
from bot.core.policy import (
    Policy,
    PolicyError,
    ProjectCommon,
    load_policy,
)
from bot.providers.catalog import Catalog


@dataclass(frozen=True)
class Checked:
    """Everything the offline check found: the errors, and the policy when it loaded."""

    errors: list[str]
    policy: Policy | None


def check_offline(settings: Settings, catalog: Catalog) -> Checked:
    """The environment and the policy (validated against ``catalog``'s providers)."""
    errors: list[str] = []
    try:
        settings.require_for("check")
    except ConfigError as exc:
        errors += exc.problems
    policy: Policy | None = None
    try:
        policy = load_policy(settings.gpuops_policy, catalog)
    except PolicyError as exc:
        errors += exc.problems
    if policy is not None:
        errors += _missing_credentials(settings, policy)
    return Checked(errors, policy)


def credential_variables(project: ProjectCommon) -> list[str]:
    """The environment variables a project's provider credentials are read from (its
    provider's section says which)."""
    return project.section.credential_variables()


def _missing_credentials(settings: Settings, policy: Policy) -> list[str]:
    return [
        f"{variable} is not set (credentials of project {name})"
        for name, project in policy.projects.items()
        for variable in credential_variables(project)
        if settings.credential(variable) is None
    ]
