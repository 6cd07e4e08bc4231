"""``gpuops check-config``: validate the environment and the policy, show who may do what
where, and with ``--online`` ask Slack and each provider. Prints names of variables only,
never their values. The offline checks are ``offline``, the report of the policy ``report``,
the checks against Slack and the providers ``online``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from bot.check_config.offline import check_offline
from bot.check_config.online import online_checks
from bot.check_config.report import print_policy
from bot.config import Settings
from bot.providers.catalog import Catalog


def run_check_config(
    settings: Settings, catalog: Catalog, out: TextIO, now: datetime | None = None
) -> int:
    """Check everything, print a report to ``out`` (freezes as of ``now``, default the
    present); 0 when all is well, else 1."""
    checked = check_offline(settings, catalog)
    if checked.policy is not None:
        print_policy(settings, checked.policy, out, now or datetime.now(UTC))
    return _print_errors(checked.errors, out)


async def run_check_config_online(settings: Settings, catalog: Catalog, out: TextIO) -> int:
    """The offline check, then one line per check against Slack and the providers."""
    checked = check_offline(settings, catalog)
    if checked.policy is not None:
        print_policy(settings, checked.policy, out, datetime.now(UTC))
    print("\nonline checks:", file=out)
    failed = 0
    for check in await online_checks(settings, checked.policy):
        print(f"  {'ok  ' if check.ok else 'FAIL'}  {check.what}: {check.detail}", file=out)
        failed += not check.ok
    errors = checked.errors + ([f"{failed} online check(s) failed"] if failed else [])
    return _print_errors(errors, out)


def _print_errors(errors: Sequence[str], out: TextIO) -> int:
    if errors:
        print(f"\n{len(errors)} error(s):", file=out)
        for error in errors:
            print(f"  error: {error}", file=out)
        return 1
    print("\nconfiguration OK", file=out)
    return 0
