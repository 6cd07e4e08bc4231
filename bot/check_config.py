"""``gpuops check-config``: validate the environment and the policy, and show who may do
what where. Prints names of variables only, never their values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from bot.config import ConfigError, Settings
from bot.core.policy import (
    E2EProject,
    Policy,
    PolicyError,
    TogetherProject,
    describe_grants,
    load_policy,
)


def run_check_config(settings: Settings, out: TextIO) -> int:
    """Check everything, print a report to ``out``; 0 when all is well, else 1."""
    errors: list[str] = []
    try:
        settings.require_for("check")
    except ConfigError as exc:
        errors += exc.problems

    policy: Policy | None = None
    try:
        policy = load_policy(settings.gpuops_policy)
    except PolicyError as exc:
        errors += exc.problems

    if policy is not None:
        errors += _missing_credentials(settings, policy)
        _print_policy(settings, policy, out)

    if errors:
        print(f"\n{len(errors)} error(s):", file=out)
        for error in errors:
            print(f"  error: {error}", file=out)
        return 1
    print("\nconfiguration OK", file=out)
    return 0


def credential_variables(project: TogetherProject | E2EProject) -> list[str]:
    """The environment variables a project's provider credentials are read from."""
    if isinstance(project, E2EProject):
        return [project.api_key_env, project.auth_token_env]
    return [project.api_key_env]


def _missing_credentials(settings: Settings, policy: Policy) -> list[str]:
    return [
        f"{variable} is not set (credentials of project {name})"
        for name, project in policy.projects.items()
        for variable in credential_variables(project)
        if settings.credential(variable) is None
    ]


def _print_policy(settings: Settings, policy: Policy, out: TextIO) -> None:
    print(f"policy: {settings.gpuops_policy}", file=out)
    print("\nprojects:", file=out)
    project_rows = [
        [name, _project_detail(project), ", ".join(credential_variables(project))]
        for name, project in sorted(policy.projects.items())
    ]
    _print_table(["PROJECT", "PROVIDER", "CREDENTIALS"], project_rows, out)

    print("\ngrants:", file=out)
    grant_rows = [
        [row.principal, row.project, str(row.role), ", ".join(row.channels or ()) or "any"]
        for row in describe_grants(policy)
    ]
    if grant_rows:
        _print_table(["WHO", "PROJECT", "ROLE", "CHANNELS"], grant_rows, out)
    else:
        print("  (none: nobody may do anything)", file=out)

    ungranted = sorted(p for p in policy.projects if not any(g.covers(p) for g in policy.grants))
    for project in ungranted:
        print(f"  warning: no grant names {project}; nobody can use it", file=out)

    approvals = policy.approvals
    print(
        f"\napprovals: expire after {approvals.expire_after_minutes} min; "
        f"break glass {'on' if approvals.break_glass else 'off'}",
        file=out,
    )


def _project_detail(project: TogetherProject | E2EProject) -> str:
    if isinstance(project, E2EProject):
        return f"e2e ({project.location}, project {project.project_id})"
    if project.project_id:
        return f"together (project {project.project_id})"
    return "together"


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    for line in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  " + "  ".join(cells).rstrip(), file=out)
