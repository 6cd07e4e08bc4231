"""check-config's report of a loaded policy: its projects, grants, approval rules and
freezes as tables (names of variables only, never their values)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TextIO

from bot.check_config.offline import credential_variables
from bot.check_config.spend import print_spend
from bot.config import Settings
from bot.core.guardrails.freezes import current_or_next, when
from bot.core.policy import (
    Policy,
    describe_grants,
    unmeetable_rules,
)
from bot.core.policy.guardrails import Freeze
from bot.core.policy.watch import WatchConfig
from bot.providers.descriptor import ProviderDescriptor


def print_policy(settings: Settings, policy: Policy, out: TextIO, now: datetime) -> None:
    print(f"policy: {settings.gpuops_policy}", file=out)
    print("\nprojects:", file=out)
    project_rows = [
        [
            name,
            project.section.detail(),
            ", ".join(credential_variables(project)),
            project.notify_channel or "-",
            _watch_detail(project.watch, project.descriptor),
        ]
        for name, project in sorted(policy.projects.items())
    ]
    _print_table(["PROJECT", "PROVIDER", "CREDENTIALS", "NOTIFY", "WATCH"], project_rows, out)

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
    _print_rules(policy, out)
    for warning in unmeetable_rules(policy):
        print(f"  warning: {warning}", file=out)
    _print_freezes(policy, now, out)
    print_spend(policy, out, _print_table)


def _print_rules(policy: Policy, out: TextIO) -> None:
    """The approval rules, in the order they are tried (the first match decides)."""
    rules = policy.approvals.rules
    if not rules:
        print("  rules: none (a change that needs approval needs one approver)", file=out)
        return
    print("  rules (the first that matches decides; no match: one approver):", file=out)
    rows = [
        [
            ", ".join(rule.projects),
            ", ".join(rule.kinds),
            str(rule.approvers),
            ", ".join(rule.usergroups) or "anyone",
        ]
        for rule in rules
    ]
    _print_table(["PROJECTS", "KINDS", "APPROVERS", "GROUPS"], rows, out)


def _print_freezes(policy: Policy, now: datetime, out: TextIO) -> None:
    if not policy.freezes:
        print("\nfreezes: none", file=out)
        return
    print(f"\nfreezes (as of {when(now)}):", file=out)
    rows = [
        [
            freeze.name,
            ", ".join(freeze.projects),
            ", ".join(freeze.kinds),
            _freeze_window(freeze),
            _freeze_state(freeze, now),
        ]
        for freeze in policy.freezes
    ]
    _print_table(["NAME", "PROJECTS", "KINDS", "WINDOW", "NOW"], rows, out)


def _freeze_window(freeze: Freeze) -> str:
    """``2026-12-24 00:00 UTC to 2027-01-02 00:00 UTC`` or ``weekly sat, sun 00:00-24:00
    Europe/Berlin``."""
    if freeze.weekly is None:
        assert freeze.start is not None and freeze.end is not None  # the model checks it
        return f"{when(freeze.start)} to {when(freeze.end)}"
    weekly = freeze.weekly
    return f"weekly {', '.join(weekly.days)} {weekly.start}-{weekly.end} {weekly.timezone}"


def _freeze_state(freeze: Freeze, now: datetime) -> str:
    """``ACTIVE until …``, ``next …`` (a weekly freeze's next occurrence) or ``over``."""
    window = current_or_next(freeze, now)
    if window is None:
        return "over"
    if window.start <= now:
        return f"ACTIVE until {when(window.end)}"
    if freeze.weekly is None:
        return "upcoming"
    return f"next {when(window.start)} to {when(window.end)}"


def _watch_detail(watch: WatchConfig | None, provider: ProviderDescriptor) -> str:
    """``every 60 s: status, remediations, reminders 24h/1h`` or ``off``: what the watcher
    will do, so only what the provider has (its descriptor's capabilities) besides status."""
    if watch is None:
        return "off"
    parts = ["status"] if watch.status else []
    if watch.remediations and provider.has("remediations"):
        parts.append("remediations")
    if watch.reservation_reminders and provider.has("reservations"):
        parts.append("reminders " + "/".join(watch.reservation_reminders))
    return f"every {watch.every_seconds} s: {', '.join(parts) or 'nothing'}"


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    for line in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  " + "  ".join(cells).rstrip(), file=out)
