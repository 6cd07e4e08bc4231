"""The answers to the person who acted, from the core's Reply: notices and errors,
help, the audit listing and ``/gpu policy``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from bot.core.api import (
    AuditListing,
    ClusterCard,
    ClusterListing,
    HelpCard,
    Notice,
    Page,
    PolicyCard,
    Reply,
    Role,
    SpendCard,
    example_run_at,
)
from bot.providers.base import ProviderChanges, example_time
from bot.slack.render.clusters import cluster_list, cluster_summary
from bot.slack.render.primitives import (
    _AUDIT_ROW_MAX,
    _MESSAGE_TEXT_BUDGET,
    _SECTION_TEXT_MAX,
    Block,
    SlackMessage,
    _paged,
    context,
    error,
    escape,
    notice,
    section,
    user_ref,
)
from bot.slack.render.spend import spend_card
from bot.slack.text import fit_lines, shorten


class AuditLine(Protocol):
    """What a line of ``/gpu audit`` shows of an audit entry (the store's ``AuditEntry``)."""

    @property
    def at(self) -> datetime: ...
    @property
    def actor(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def project(self) -> str | None: ...
    @property
    def cluster_id(self) -> str | None: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def detail(self) -> Mapping[str, object]: ...


def audit_list(entries: Sequence[AuditLine], page: Page | None = None) -> SlackMessage:
    """Audit entries, newest first, one per line: one page, with its context line."""
    if not entries:
        return notice("No audit entries match.")
    budget = min(_AUDIT_ROW_MAX, _MESSAGE_TEXT_BUDGET // len(entries))
    return _paged([_audit_row(e, budget) for e in entries], page)


def _audit_mark(e: AuditLine) -> str:
    """A mark for what bypassed the usual safeguards: break glass (a requester's own
    approval) and an admin's freeze override, so they stand out in a page of entries."""
    detail = e.detail if isinstance(e.detail, dict) else {}
    if e.event == "break_glass" or (e.event == "approved" and detail.get("break_glass")):
        return ":rotating_light: *BREAK GLASS*"
    if e.event == "freeze_override":
        return ":snowflake: *FREEZE OVERRIDE*"
    return ""


def _audit_row(e: AuditLine, budget: int) -> str:
    """One entry in ``budget`` characters: the reason gives way to who, what and where."""
    when = e.at.strftime("%Y-%m-%d %H:%M:%SZ")
    parts = [f"`{when}`", user_ref(e.actor) if e.actor else "—", f"*{shorten(e.event, 60)}*"]
    mark = _audit_mark(e)
    if mark:
        parts.append(mark)
    short_hash = getattr(e, "short_hash", "")
    if short_hash:  # the entry's place in the hash chain (gpuops audit verify)
        parts.insert(1, f"`#{short_hash}`")
    if e.request_id:
        parts.append(f"`{escape(e.request_id)}`")
    if e.project:
        parts.append(escape(e.project) + (f"/{escape(e.cluster_id)}" if e.cluster_id else ""))
    if e.outcome:
        parts.append(shorten(e.outcome, 120))
    row = " ".join(parts)
    reason = e.detail.get("reason") if isinstance(e.detail, dict) else None
    if reason:
        row += f" — {shorten(reason, max(budget - len(row) - 3, 16))}"
    return row


# -- modals -------------------------------------------------------------------------------


def _change_help(changes: ProviderChanges) -> str:
    """The help line of one provider's change command, from what the provider says it takes."""
    single = changes.actions == (changes.command,)
    usage = f"/gpu {changes.command} <project> <cluster_id>" + ("" if single else " [<action>]")
    names = changes.field_names() if single else list(changes.actions)
    form = "no fields: a form" if single else "missing: a form"
    return (
        f'• `{usage} [field=value …] [reason="…"]` — {changes.title}: {", ".join(names)} ({form})'
    )


def help_message(card: HelpCard) -> SlackMessage:
    """What the person may do, by their highest role, and their projects."""
    top = max(card.roles.values())
    lines = [
        "*What you can do here*",
        "• `/gpu help` — this help",
        "• `/gpu list [project] [page=N]` — clusters you can see (only you see the answer;"
        " long lists end with the command for the next page)",
        "• `/gpu show <project> <cluster_id>` — post a cluster summary here",
        "• `/gpu timeline [since]` — this channel's record as a Markdown file, one line per"
        " event (`30m`, `2h`, `1d` or an RFC 3339 time; default 24 h, at most 7 days);"
        " `@gpuops timeline` in a thread puts it there",
        "• `/gpu policy [project]` — approvals, limits, prices and freezes that apply to you",
        "• `/gpu spend [project|team] [month=YYYY-MM]` — spend this month against the budget,"
        " projected to the month's end, per cluster",
    ]
    if top >= Role.operator:
        lines += [_change_help(changes) for changes in card.changes]
        lines.append(
            "  Risky changes wait for approval in the thread; during a freeze an admin may "
            'add `override="why"`.'
        )
        lines.append(
            f"  Add `at={example_run_at()}` or `in=30m` (`3h`, `2d`) to run it later: "
            "1 minute to 14 days ahead; a done change's result has a Revert button."
        )
    if top >= Role.approver:
        lines.append("• Approve or deny others' requests with the buttons in their thread")
    if top >= Role.admin:
        lines.append("• `/gpu audit [project] [limit] [page=N]` — the audit trail, newest first")
    lines.append(
        "Values: integers as digits, lists comma-separated (`ssh_key_ids=11,12`), "
        f"times RFC 3339 (`reservation_end_time={example_time()}`)."
    )
    lines.append(
        "Your projects: "
        + ", ".join(f"{escape(p)} ({r.name})" for p, r in sorted(card.roles.items()))
    )
    text = "\n".join(lines)
    return SlackMessage(text=text, blocks=[section(text)])


def notice_message(content: Notice) -> SlackMessage:
    if content.error:
        return error(content.text, mentions=content.mentions)
    return notice(content.text, content.mentions)


def reply_message(reply: Reply) -> SlackMessage:
    """The Slack message for a core answer."""
    content = reply.content
    if isinstance(content, Notice):
        return notice_message(content)
    if isinstance(content, ClusterCard):
        return cluster_summary(content.summary, shown_by=content.shown_by)
    if isinstance(content, ClusterListing):
        return cluster_list(content.groups, content.page, content.as_of_seconds)
    if isinstance(content, AuditListing):
        return audit_list(content.entries, content.page)
    if isinstance(content, PolicyCard):
        return policy_message(content)
    if isinstance(content, SpendCard):
        return spend_card(content)
    return help_message(content)


_POLICY_PROJECTS_MAX = 45  # a section each, within a message's 50 blocks


def policy_message(card: PolicyCard) -> SlackMessage:
    """``/gpu policy``: a section per project; past the block budget, where to ask."""
    names = sorted(card.projects)
    shown, rest = names[:_POLICY_PROJECTS_MAX], names[_POLICY_PROJECTS_MAX:]
    sections = [
        f"*{escape(name)}*\n" + "\n".join(f"• {escape(line)}" for line in card.projects[name])
        for name in shown
    ]
    blocks: list[Block] = [
        section(fit_lines(text.split("\n"), _SECTION_TEXT_MAX)) for text in sections
    ]
    if rest:
        blocks.append(
            context(
                f"{len(rest)} more projects: ask for one with `/gpu policy <project>` "
                f"({escape(', '.join(rest[:20]))}{'…' if len(rest) > 20 else ''})"
            )
        )
    text = "gpuops policy: " + "; ".join(
        f"{escape(name)}: {escape(' · '.join(card.projects[name]))}" for name in shown
    )
    return SlackMessage(text=text, blocks=blocks)
