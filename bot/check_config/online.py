"""check-config ``--online``: one check per line against Slack (auth.test, each notify
channel's membership, each approval rule's user groups) and one read per project."""

from __future__ import annotations

from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.check_config.offline import credential_variables
from bot.config import Settings
from bot.core.oncall import OnCallClients, OnCallRoster
from bot.core.oncall.report import oncall_report
from bot.core.policy import (
    Policy,
    PolicyHolder,
)
from bot.core.policy.guardrails import ApprovalRule
from bot.core.registry import AdapterRegistry
from bot.providers.base import SupportsProbe
from bot.providers.errors import ProviderError
from bot.providers.probe import differences
from bot.redact import redact, register_secret
from bot.slack.directory import SlackEmailDirectory
from bot.slack.messenger import build_web_client, slack_http_session
from bot.slack.startup import BotIdentity, TokenRefused, auth_test_once


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
    if policy is not None and policy.oncall is not None:
        checks += await _oncall_checks(settings, policy)
    return checks


async def _oncall_checks(settings: Settings, policy: Policy) -> list[OnlineCheck]:
    """Each on-call schedule read once (SPEC §16), and each person on call on it with the
    mapping that makes them a Slack user; an unmapped one fails the check, named."""
    assert policy.oncall is not None
    for source in (policy.oncall.pagerduty, policy.oncall.opsgenie):
        if source is not None:
            register_secret(settings.credential(source.token_env))
    clients = OnCallClients(
        settings.credential,
        settings.gpuops_oncall_base_urls,
        deadline=settings.gpuops_oncall_deadline,
    )
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else ""
    session = slack_http_session()
    directory = SlackEmailDirectory(build_web_client(token, settings.slack_api_url, session))
    try:
        roster = OnCallRoster(PolicyHolder(policy), clients, directory if token else None)
        lines = await oncall_report(roster)
    finally:
        await clients.aclose()
        await session.close()
    checks = []
    for line in lines:
        what, _, detail = line.text.partition(": ")
        if line.level == "warning":
            detail += ": add them to oncall.people"
        checks.append(OnlineCheck(line.level == "ok", what, detail))
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
    if policy is not None and policy.digest is not None:  # SPEC §13: the bot posts there
        channels.setdefault(policy.digest.channel, []).append("the spend digest")
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
