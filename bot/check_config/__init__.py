"""``gpuops check-config``: validate the environment and the policy, show who may do what
where, and with ``--online`` ask Slack and each provider. Prints names of variables only,
never their values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ConfigError, Settings
from bot.core.guardrails.freezes import current_or_next, when
from bot.core.policy import (
    Policy,
    PolicyError,
    PolicyHolder,
    ProjectCommon,
    describe_grants,
    load_policy,
    unmeetable_rules,
)
from bot.core.policy.guardrails import ApprovalRule, Freeze
from bot.core.policy.watch import WatchConfig
from bot.core.registry import AdapterRegistry
from bot.providers.base import SupportsProbe
from bot.providers.catalog import Catalog
from bot.providers.descriptor import ProviderDescriptor
from bot.providers.errors import ProviderError
from bot.providers.probe import differences
from bot.redact import redact, register_secret
from bot.slack.messenger import build_web_client, slack_http_session
from bot.slack.startup import BotIdentity, TokenRefused, auth_test_once


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


def run_check_config(
    settings: Settings, catalog: Catalog, out: TextIO, now: datetime | None = None
) -> int:
    """Check everything, print a report to ``out`` (freezes as of ``now``, default the
    present); 0 when all is well, else 1."""
    checked = check_offline(settings, catalog)
    if checked.policy is not None:
        _print_policy(settings, checked.policy, out, now or datetime.now(UTC))
    return _print_errors(checked.errors, out)


async def run_check_config_online(settings: Settings, catalog: Catalog, out: TextIO) -> int:
    """The offline check, then one line per check against Slack and the providers."""
    checked = check_offline(settings, catalog)
    if checked.policy is not None:
        _print_policy(settings, checked.policy, out, datetime.now(UTC))
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


# -- online --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnlineCheck:
    ok: bool
    what: str
    detail: str


async def online_checks(settings: Settings, policy: Policy | None) -> list[OnlineCheck]:
    """auth.test, the bot's membership of each notify_channel, one read per project."""
    for secret in settings.secret_values():
        register_secret(secret)
    checks = await _slack_checks(settings, policy)
    if policy is not None:
        checks += await _provider_checks(settings, policy)
    return checks


async def _slack_checks(settings: Settings, policy: Policy | None) -> list[OnlineCheck]:
    if settings.slack_bot_token is None:
        return [OnlineCheck(False, "Slack auth.test", "not tried: SLACK_BOT_TOKEN is not set")]
    session = slack_http_session()
    client = build_web_client(
        settings.slack_bot_token.get_secret_value(), settings.slack_api_url, session
    )
    try:
        try:
            identity = await auth_test_once(client)
        except TokenRefused as refused:
            return [OnlineCheck(False, "Slack auth.test", str(refused))]
        if not isinstance(identity, BotIdentity):
            return [OnlineCheck(False, "Slack auth.test", identity)]
        checks = [
            OnlineCheck(
                True,
                "Slack auth.test",
                f"the bot is {identity.user_id} in team {identity.team_id}",
            )
        ]
        for channel, projects in _notify_channels(policy).items():
            checks.append(await _membership(client, channel, projects))
        if policy is not None:
            checks += await _group_rule_checks(client, policy, identity.team_id)
        return checks
    finally:
        await session.close()


def _notify_channels(policy: Policy | None) -> dict[str, list[str]]:
    channels: dict[str, list[str]] = {}
    for name, project in sorted((policy.projects if policy else {}).items()):
        if project.notify_channel:
            channels.setdefault(project.notify_channel, []).append(name)
    return channels


async def _membership(client: AsyncWebClient, channel: str, projects: list[str]) -> OnlineCheck:
    what = f"notify_channel {channel} ({', '.join(projects)})"
    invite = "invite the bot there with /invite @gpuops"
    try:
        answer = await client.conversations_info(channel=channel)
    except SlackApiError as exc:
        code = str(exc.response.get("error") or exc.response.status_code)
        if code == "channel_not_found":
            return OnlineCheck(False, what, f"the bot cannot see it (channel_not_found): {invite}")
        if code == "missing_scope":
            needed = exc.response.get("needed") or "channels:read, groups:read"
            return OnlineCheck(
                False, what, f"the app lacks the scope {needed}: reinstall it from manifest.yml"
            )
        return OnlineCheck(False, what, f"Slack answered conversations.info with {code}")
    except Exception as exc:  # a connection failure is this check's result, not a crash
        return OnlineCheck(False, what, f"Slack unreachable ({type(exc).__name__})")
    info = answer.get("channel") or {}
    if info.get("is_archived"):
        return OnlineCheck(False, what, "the channel is archived")
    if not info.get("is_member"):
        return OnlineCheck(False, what, f"the bot is not a member: {invite}")
    return OnlineCheck(True, what, "the bot is a member")


async def _group_rule_checks(
    client: AsyncWebClient, policy: Policy, team: str | None
) -> list[OnlineCheck]:
    """Each approval rule drawing its approvers from user groups: whether the groups have
    as many members as the rule needs approvers (``usergroups.users.list``, with the team:
    an org-level token needs it)."""
    checks = []
    members: dict[str, frozenset[str] | str] = {}  # a group's members, or why unknown
    for i, rule in enumerate(policy.approvals.rules):
        if not rule.usergroups:
            continue
        for group in rule.usergroups:
            if group not in members:
                members[group] = await _group_members(client, group, team)
        found = [(g, members[g]) for g in rule.usergroups]
        checks.append(_group_rule_verdict(i, rule, found))
    return checks


def _group_rule_verdict(
    index: int, rule: ApprovalRule, found: list[tuple[str, frozenset[str] | str]]
) -> OnlineCheck:
    what = (
        f"approvals.rules[{index}] ({rule.approvers} approvers from {', '.join(rule.usergroups)})"
    )
    unknown = [f"{g}: {m}" for g, m in found if isinstance(m, str)]
    if unknown:
        return OnlineCheck(False, what, "; ".join(unknown))
    count = len({u for _, m in found if not isinstance(m, str) for u in m})
    if count < rule.approvers:
        return OnlineCheck(
            False,
            what,
            f"the groups have {count} member(s): no request it matches can ever be approved "
            "(add members or lower approvers)",
        )
    return OnlineCheck(
        True,
        what,
        f"the groups have {count} member(s) (a member's own request has one fewer: the "
        "requester cannot approve it, and this count does not leave them out)",
    )


async def _group_members(
    client: AsyncWebClient, group: str, team: str | None
) -> frozenset[str] | str:
    """A user group's members, or what Slack answered instead."""
    try:
        answer = await client.usergroups_users_list(usergroup=group, team_id=team)
    except SlackApiError as exc:
        code = str(exc.response.get("error") or exc.response.status_code)
        if code == "missing_scope":
            return "the app lacks the scope usergroups:read: reinstall it from manifest.yml"
        return f"Slack answered usergroups.users.list with {code}"
    except Exception as exc:  # a connection failure is this check's result, not a crash
        return f"Slack unreachable ({type(exc).__name__})"
    users = answer.get("users")
    return frozenset(str(u) for u in users) if isinstance(users, list) else frozenset()


async def _provider_checks(settings: Settings, policy: Policy) -> list[OnlineCheck]:
    environment = settings.environment()
    registry = AdapterRegistry(
        PolicyHolder(policy),
        env=environment,
        base_urls=settings.base_urls(policy.catalog),
        client_settings=settings.client_settings(),
    )
    missing = {m.project: m.variable for m in registry.missing_credentials()}
    checks = []
    try:
        for name, project in sorted(policy.projects.items()):
            for variable in credential_variables(project):
                register_secret(environment.get(variable))
            what = f"{name} ({project.provider}): one read"
            if name in missing:
                checks.append(OnlineCheck(False, what, f"not tried: {missing[name]} is not set"))
                continue
            checks.append(await _one_read(registry, name, what))
    finally:
        await registry.aclose()
    return checks


async def _one_read(registry: AdapterRegistry, name: str, what: str) -> OnlineCheck:
    adapter = registry.get(name)
    try:
        if not isinstance(adapter, SupportsProbe):
            clusters = await adapter.list_clusters()
            return OnlineCheck(True, what, f"listed {len(clusters)} cluster(s)")
        replies = await adapter.probe_replies()
    except ProviderError as exc:
        return OnlineCheck(False, what, exc.user_message)
    except Exception as exc:  # any other failure is this check's result, not a crash
        return OnlineCheck(False, what, redact(f"{type(exc).__name__}: {exc}"))
    listed = len(replies) // 2
    found = differences(replies)
    detail = f"listed {listed} cluster(s) and read each"
    if found.unknown:
        detail += f"; fields the models do not know: {', '.join(found.unknown)}"
    if found.missing:
        detail += f"; fields the models expect but the replies lack: {', '.join(found.missing)}"
    return OnlineCheck(True, what, redact(detail))


# -- offline -------------------------------------------------------------------------------


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


def _print_policy(settings: Settings, policy: Policy, out: TextIO, now: datetime) -> None:
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
