"""Block Kit rendering. Every string that comes from a user or a provider goes through
``escape`` so it cannot mention, link or ping — in blocks and in the ``text`` fallback — and
long text is shortened by ``bot.slack.text`` (never mid-entity, never losing an id)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from bot.core.answers import (
    AuditListing,
    ClusterCard,
    ClusterListing,
    HelpCard,
    Notice,
    PolicyCard,
    Reply,
)
from bot.core.ask.forms import FormKind, FormMessage, FormView
from bot.core.ask.justification import MAX_JUSTIFICATION, MIN_JUSTIFICATION
from bot.core.fleet import age_text
from bot.core.paging import Page
from bot.core.policy import Role
from bot.core.requests.schedule import example_run_at, utc_text, when_text
from bot.core.requests.view import STATE_WORDS, RequestView
from bot.providers.base import ClusterSummary, FieldSpec, ProviderChanges, example_time
from bot.slack.text import clip, fit_lines, pack_lines, shorten, shorten_plain
from bot.slack.text import escape as escape  # surfaces escape through this module
from bot.slack.text import plain as plain

Block = dict[str, Any]

# Slack limits (characters) that we stay under.
_SECTION_TEXT_MAX = 2900
_FIELD_TEXT_MAX = 1900
_PLAIN_TEXT_MAX = 150
_FALLBACK_MAX = 3500
# What one listing message may hold in all (its sections' text): well inside what Slack
# accepts, so a page of rows always fits in one message.
_MESSAGE_TEXT_BUDGET = 12_000
_LIST_ROW_MAX = 240
_AUDIT_ROW_MAX = 560

STATE_ICONS = {
    "pending": ":hourglass_flowing_sand:",
    "approved": ":white_check_mark:",
    "executing": ":gear:",
    "succeeded": ":large_green_circle:",
    "failed": ":red_circle:",
    "unknown": ":warning:",
    "denied": ":no_entry_sign:",
    "expired": ":alarm_clock:",
    "cancelled": ":heavy_multiplication_x:",
}


def _clip(text: str, limit: int) -> str:
    """Plain text (titles, labels, options) in at most ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def user_ref(user_id: str) -> str:
    """A mention of a Slack user id we know is an id (never user-supplied free text)."""
    if user_id.isalnum() and user_id[:1] in ("U", "W"):
        return f"<@{user_id}>"
    return escape(user_id)


def channel_ref(channel_id: str) -> str:
    if channel_id.isalnum() and channel_id[:1] in ("C", "G"):
        return f"<#{channel_id}>"
    return escape(channel_id)


@dataclass(frozen=True)
class SlackMessage:
    text: str
    blocks: list[Block] = field(default_factory=list)

    def as_kwargs(self) -> dict[str, Any]:
        return {"text": clip(self.text, _FALLBACK_MAX), "blocks": self.blocks}


def section(mrkdwn: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(mrkdwn, _SECTION_TEXT_MAX)}}


def fields_section(pairs: Sequence[tuple[str, str]]) -> Block:
    return {
        "type": "section",
        "fields": [
            {"type": "mrkdwn", "text": clip(f"*{label}*\n{value}", _FIELD_TEXT_MAX)}
            for label, value in pairs[:10]
        ],
    }


def context(mrkdwn: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(mrkdwn, 2900)}]}


def header(text: str) -> Block:
    return {
        "type": "header",
        "text": {"type": "plain_text", "text": _clip(plain(text), _PLAIN_TEXT_MAX), "emoji": True},
    }


# A bare channel link ``<#C…>`` cannot ping anyone, carry a URL or a spoofed label, so the
# composed notices below let it through after escaping; everything else stays inert.
_ESCAPED_CHANNEL = re.compile(r"&lt;#([CG][A-Z0-9]{2,20})&gt;")


def composed_text(text: str, mentions: Iterable[str] = ()) -> str:
    """Escape a composed text, then let through bare channel links and the mentions of the
    given Slack user ids (ids the bot knows, never free text)."""
    safe = _ESCAPED_CHANNEL.sub(r"<#\1>", escape(text))
    for user_id in set(mentions):
        if user_id.isalnum() and user_id[:1] in ("U", "W"):
            safe = safe.replace(f"&lt;@{user_id}&gt;", f"<@{user_id}>")
    return safe


def notice(text: str, mentions: Iterable[str] = ()) -> SlackMessage:
    """A message from plain text we composed, possibly embedding user text: all escaped
    but the mentions of ``mentions``."""
    safe = composed_text(text, mentions)
    return SlackMessage(text=safe, blocks=[section(safe)])


def error(text: str, *, mentions: Iterable[str] = ()) -> SlackMessage:
    safe = composed_text(text, mentions)
    return SlackMessage(text=safe, blocks=[section(f":x: {safe}")])


# -- cluster summary ----------------------------------------------------------------------


def summary_pairs(s: ClusterSummary) -> list[tuple[str, str]]:
    """Status and provider/project, then the provider's facts in the order it gave them."""
    pairs: list[tuple[str, str]] = [
        ("Status", escape(s.status) + ("" if s.steady else " (changing)")),
        ("Provider / project", f"{escape(s.provider)} / {escape(s.project)}"),
    ]
    pairs += [(escape(fact.label), escape(fact.value)) for fact in s.facts]
    return pairs


def cluster_summary(
    s: ClusterSummary,
    *,
    requested_by: str | None = None,
    approved_by: str | Sequence[str] | None = None,
    request_id: str | None = None,
    note: str | None = None,
    shown_by: str | None = None,
    revert_id: str | None = None,
    result: SlackMessage | None = None,
) -> SlackMessage:
    """The cluster card; after a change, ``result`` (a thread note: what the provider said)
    comes right under its header and ends its text fallback (a summary always starts with
    the cluster's name and id)."""
    blocks: list[Block] = [header(_titled(s.name, s.cluster_id, _PLAIN_TEXT_MAX))]
    if result is not None:
        blocks += result.blocks
    pairs = summary_pairs(s)
    blocks.append(fields_section(pairs[:10]))
    if len(pairs) > 10:
        blocks.append(fields_section(pairs[10:]))
    who = []
    if request_id:
        who.append(f"request `{escape(request_id)}`")
    if requested_by:
        who.append(f"requested by {user_ref(requested_by)}")
    if approved_by:
        approvers = [approved_by] if isinstance(approved_by, str) else list(approved_by)
        who.append("approved by " + " and ".join(user_ref(u) for u in approvers))
    if shown_by:
        who.append(f"shown for {user_ref(shown_by)}")
    if note:
        who.append(escape(note))
    if who:
        blocks.append(context(" · ".join(who)))
    if revert_id:
        revert = _button("Revert", "revert_request", revert_id, None)
        blocks.append({"type": "actions", "block_id": "revert", "elements": [revert]})
    text = (
        f"{shorten(s.name, 300)} ({escape(s.cluster_id)}) — {shorten(s.status, 100)} · "
        f"{escape(s.provider)}/{escape(s.project)}"
        + (f" · {shorten(s.size, 100)}" if s.size else "")
    )
    if result is not None:
        text += f"\n{result.text}"
    return SlackMessage(text=text, blocks=blocks)


def _titled(name: str, cluster_id: str, limit: int) -> str:
    """``name (id)`` in plain text within ``limit``: the name gives way, the id stays."""
    suffix = f" ({plain(cluster_id)})"
    return shorten_plain(name, max(limit - len(suffix), 1)) + suffix


def cluster_list(
    groups: Mapping[str, Sequence[ClusterSummary] | str],
    page: Page | None = None,
    as_of_seconds: float | None = None,
) -> SlackMessage:
    """Per project, its clusters (or an error text for a project that failed): one page,
    ending with where it sits, the command for the next page and, from a fleet snapshot
    that is not live, how old it is."""
    headers = [f"*{escape(project)}*" for project in groups]
    rows = sum(len(c) if not isinstance(c, str) and c else 1 for c in groups.values())
    room = _MESSAGE_TEXT_BUDGET - sum(len(h) + 1 for h in headers)
    budget = min(_LIST_ROW_MAX, room // max(rows, 1))
    lines: list[str] = []
    for title, content in zip(headers, groups.values(), strict=True):
        lines.append(title)
        if isinstance(content, str):
            lines.append(f":x: {shorten(content, budget - 4)}")
        elif not content:
            lines.append("_no clusters_")
        else:
            lines.extend(_list_row(s, budget) for s in content)
    if not lines:
        return notice("You have no projects you can view here.")
    return _paged(lines, page, age_text(as_of_seconds))


def _paged(lines: list[str], page: Page | None, as_of: str | None = None) -> SlackMessage:
    """Rows packed into sections, between a past-the-end note and the page's context line."""
    blocks = [section(text) for text in pack_lines(lines, _SECTION_TEXT_MAX)]
    head: list[str] = []
    if page is not None:
        if page.past_end:
            head.append(f":information_source: {escape(page.past_end)}")
            blocks.insert(0, context(head[-1]))
        head.append(escape(page.summary))
        blocks.append(context(head[-1]))
    if as_of is not None:
        head.append(f":clock3: {escape(as_of)}")
        blocks.append(context(head[-1]))
    # The rows are escaped already: escaping again would show "&lt;" to the reader.
    return SlackMessage(text=fit_lines([*head, *lines], _FALLBACK_MAX), blocks=blocks)


def _list_row(s: ClusterSummary, budget: int) -> str:
    """``• `id` name — status · size · GPU``: the name gives way, the id stays."""
    prefix = f"• `{escape(s.cluster_id)}` "
    suffix = (
        f" — {shorten(s.status, 40)} · {shorten(s.size or '—', 40)}"
        f" · {shorten(s.gpu_type or '—', 40)}"
    )
    return prefix + shorten(s.name, max(budget - len(prefix) - len(suffix), 8)) + suffix


# -- change requests -----------------------------------------------------------------------


def _state_line(r: RequestView) -> str:
    icon = STATE_ICONS.get(r.state, "")
    words = STATE_WORDS.get(r.state, r.state)
    line = f"{icon} *{words}*"
    if r.at_approval:  # it never ran: nobody's approval took effect
        line += f" · {r.at_approval}"
        line += f" · {user_ref(r.decided_by)} pressed Approve" if r.decided_by else ""
    elif r.decided_by and r.state in ("approved", "executing", "succeeded", "failed", "unknown"):
        approvers = list(r.counted) if r.decided_by in r.counted else [r.decided_by]
        who = " and ".join(user_ref(u) for u in approvers)
        line += f" · approved by {who}" if r.needs_approval else ""
    elif r.decided_by and r.state in ("denied", "cancelled"):
        line += f" by {user_ref(r.decided_by)}"
    if r.break_glass or (r.glass_by is not None and r.glass_by in r.approvers):
        line += " · :rotating_light: break glass"
    return line


def request_root(r: RequestView) -> SlackMessage:
    what = "update" if r.action == "update" else f"`{escape(r.action)}`"
    where = f"(`{escape(r.cluster_id)}`, {escape(r.provider)}/{escape(r.project)})"
    asks = f"{user_ref(r.requester)} asks for {what} on "
    name = shorten(r.cluster_name, max(_SECTION_TEXT_MAX - len(asks) - len(where) - 3, 16))
    preview_lines = [f"• `{shorten(line, 300)}`" for line in r.preview] or ["• (no fields)"]
    preview = fit_lines(preview_lines, _SECTION_TEXT_MAX)
    blocks: list[Block] = [section(f"{asks}*{name}* {where}"), section(preview)]
    if r.price_line:
        blocks.append(context(price_text(r.price_line)))
    if r.reason:
        blocks.append(section(f"_Reason:_ {escape(r.reason)}"))
    if r.override:
        blocks.append(context(override_text(r.override)))
    if r.revert_of:
        blocks.append(
            context(f":leftwards_arrow_with_hook: reverts request `{escape(r.revert_of)}`")
        )
    if r.run_at is not None:
        blocks.append(context(f":alarm_clock: {escape(scheduled_words(r))}"))
    blocks.append(context(f"{_state_line(r)} · request `{escape(r.id)}`"))
    if r.result_message and r.state in ("failed", "unknown", "succeeded"):
        blocks.append(context(escape(r.result_message)))
    text = (
        f"[{STATE_WORDS.get(r.state, r.state)}] {user_ref(r.requester)} asks for "
        f"{escape(r.action)} on {shorten(r.cluster_name, 200)} ({escape(r.cluster_id)}, "
        f"{escape(r.provider)}/{escape(r.project)}): {shorten('; '.join(r.preview), 1500)}"
        f" — {escape(r.id)}" + (f" · {escape(scheduled_words(r))}" if r.run_at is not None else "")
    )
    return SlackMessage(text=text, blocks=blocks)


def price_text(line: str) -> str:
    """A change's price line as shown under its preview (escaped)."""
    return f":moneybag: {escape(line)}"


def override_text(override: tuple[str, str, str]) -> str:
    freeze, by, reason = override
    return f":snowflake: freeze *{escape(freeze)}* overridden by {user_ref(by)}: {escape(reason)}"


def usergroup_ref(usergroup_id: str) -> str:
    """A Slack user-group mention for an id from the policy; anything else escaped."""
    if usergroup_id.isalnum() and usergroup_id.startswith("S"):
        return f"<!subteam^{usergroup_id}>"
    return escape(usergroup_id)


class Approvals(Protocol):
    """Where a request's approvals stand: a RequestView's, or a Home entry's."""

    @property
    def project(self) -> str: ...
    @property
    def approvers(self) -> tuple[str, ...]: ...
    @property
    def uncounted(self) -> tuple[str, ...]: ...
    @property
    def counted(self) -> tuple[str, ...]: ...
    @property
    def approvals_needed(self) -> int: ...
    @property
    def approval_groups(self) -> tuple[str, ...]: ...
    @property
    def approval_kinds(self) -> tuple[str, ...]: ...
    @property
    def approval_by_rule(self) -> bool: ...
    @property
    def glass_by(self) -> str | None: ...


def approval_why(r: Approvals) -> str:
    """``decommission needs 2 approvers from @oncall (approval rule) · 1 of 2: @bob``."""
    kinds = ", ".join(escape(k) for k in r.approval_kinds) or "this change"
    who = "approver" if r.approvals_needed == 1 else "approvers"
    line = f"{kinds} needs {r.approvals_needed} {who}"
    if r.approval_groups:
        line += " from " + " or ".join(usergroup_ref(g) for g in r.approval_groups)
    line += f" ({'approval rule' if r.approval_by_rule else 'default'} of {escape(r.project)})"
    if r.approvers or r.approvals_needed > 1:
        line += " · " + approval_progress(r)
    return line


def approval_progress(r: Approvals) -> str:
    """``1 of 2: @bob``; after a break glass ``break glass by @alice · 1 of 2: needs 1
    more from @oncall`` (the requester's own approval counts as one, never as all); after
    a reload took approvers' grant away ``0 of 1: none yet (no longer counted: @bob)``."""
    counted = r.counted
    progress = f"{len(counted)} of {r.approvals_needed}"
    gone = f" (no longer counted: {', '.join(user_ref(u) for u in r.uncounted)})"
    gone = gone if r.uncounted else ""
    others = [user_ref(u) for u in counted if u != r.glass_by]
    if r.glass_by is None or r.glass_by not in counted:
        return f"{progress}: {', '.join(others) or 'none yet'}{gone}"
    left = r.approvals_needed - len(counted)
    said = others + ([f"needs {left} more"] if left > 0 else [])
    if left > 0 and r.approval_groups:
        said[-1] += " from " + " or ".join(usergroup_ref(g) for g in r.approval_groups)
    return f"break glass by {user_ref(r.glass_by)} · {progress}: {', '.join(said)}{gone}"


def approval_prompt(r: RequestView, *, expire_minutes: int) -> SlackMessage:
    text = (
        f"Approval needed for {r.id}: an approver of {r.project} other than the requester "
        f"may approve or deny; expires in {expire_minutes} min."
    )
    asked = _asked(r)
    blocks: list[Block] = [
        section(
            f":raised_hand: *Approval needed* for `{escape(r.id)}` — an approver of "
            f"*{escape(r.project)}* other than {user_ref(r.requester)} may approve or deny. "
            f"Expires in {expire_minutes} min.{asked}"
        ),
        context(approval_why(r)),
        *([context(price_text(r.price_line))] if r.price_line else []),
        {
            "type": "actions",
            "block_id": "approval",
            "elements": [
                _button("Approve", "approve_request", r.id, "primary"),
                _button("Deny", "deny_request", r.id, "danger"),
                _button("Cancel", "cancel_request", r.id, None),
            ],
        },
    ]
    return SlackMessage(text=f"{escape(text)}{asked} {approval_why(r)}", blocks=blocks)


def _asked(r: RequestView) -> str:
    """`` Asking <@U02BOB>, <!subteam^S0PLATFORM>.``: the mentions that notify the eligible
    approvers ("" when none is known)."""
    named = [user_ref(u) for u in r.ask_users] + [usergroup_ref(g) for g in r.ask_groups]
    return f" Asking {', '.join(named)}." if named else ""


def approval_closed(r: RequestView) -> SlackMessage:
    """The prompt after a decision: the buttons are gone (but Cancel, while an approved
    scheduled change waits for its time)."""
    blocks: list[Block] = [context(f"Approval for `{escape(r.id)}`: {_state_line(r)}")]
    if r.state == "approved" and r.run_at is not None:
        blocks[0] = context(
            f"Approval for `{escape(r.id)}`: {_state_line(r)} · {escape(scheduled_words(r))}"
        )
        cancel = _button("Cancel", "cancel_request", r.id, None)
        blocks.append({"type": "actions", "block_id": "scheduled", "elements": [cancel]})
    return SlackMessage(
        text=f"Approval for {escape(r.id)}: {STATE_WORDS.get(r.state, r.state)}", blocks=blocks
    )


def scheduled_words(r: RequestView) -> str:
    """``scheduled for 2026-12-01 20:00 UTC, in 3 h`` (or ``… ran at its time``)."""
    assert r.run_at is not None
    if r.state in ("pending", "approved"):
        return f"scheduled for {when_text(r.run_at, datetime.now(UTC))}"
    return f"scheduled for {utc_text(r.run_at)}"


def _button(label: str, action_id: str, value: str, style: str | None) -> Block:
    button: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def thread_note(text: str, *, icon: str = "", mentions: Iterable[str] = ()) -> SlackMessage:
    """A note in a request's thread; ``<@id>`` of the given user ids stay mentions."""
    safe = composed_text(text, mentions)
    return SlackMessage(text=safe, blocks=[section(f"{icon} {safe}".strip())])


def rule_changed_note(r: RequestView, also: str | None = None) -> SlackMessage:
    """``The policy was reloaded: scale needs 2 approvers (approval rule of e2e-delhi) · 1
    of 2: @bob.`` — what approving the request takes now, and ``also`` (our text, whose
    mentions of the request's approvers stay mentions)."""
    said = f"The policy was reloaded: {approval_why(r)}"
    if also:
        said += f"; {composed_text(also, r.approvers)}"
    return SlackMessage(text=said + ".", blocks=[section(f":scroll: {said}.")])


def break_glass_note(r: RequestView) -> SlackMessage:
    """The thread's note for a requester's break glass that is one approval of several."""
    text = (
        f":rotating_light: {approval_progress(r)}. Their own request; reason: "
        f"{escape(r.glass_reason or '')}"
    )
    return SlackMessage(text=text, blocks=[section(text)])


def addressed(message: SlackMessage, user: str) -> SlackMessage:
    """``message`` with a mention of ``user`` (a Slack user id we know) before it, so that
    Slack notifies them: a message the bot posts in a thread the bot started notifies
    nobody otherwise."""
    to = user_ref(user)
    rest = list(message.blocks)
    first = rest.pop(0) if rest else section("")
    text = first.get("text", {}) if first.get("type") == "section" else {}
    if text.get("type") == "mrkdwn":
        first = section(f"{to} {text['text']}".strip())
    else:
        rest.insert(0, first)
        first = section(to)
    return SlackMessage(text=f"{to} {message.text}", blocks=[first, *rest])


def decision_note(icon: str, what: str, user: str, detail: str | None = None) -> SlackMessage:
    """``✅ Approved by @bob.`` — a real mention for a Slack user id, the rest escaped."""
    tail = f" {escape(detail)}" if detail else ""
    text = f"{icon} {escape(what)} by {user_ref(user)}.{tail}"
    return SlackMessage(text=text, blocks=[section(text)])


def audit_list(entries: Sequence[Any], page: Page | None = None) -> SlackMessage:
    """Audit entries, newest first, one per line: one page, with its context line."""
    if not entries:
        return notice("No audit entries match.")
    budget = min(_AUDIT_ROW_MAX, _MESSAGE_TEXT_BUDGET // len(entries))
    return _paged([_audit_row(e, budget) for e in entries], page)


def _audit_mark(e: Any) -> str:
    """A mark for what bypassed the usual safeguards: break glass (a requester's own
    approval) and an admin's freeze override, so they stand out in a page of entries."""
    detail = e.detail if isinstance(e.detail, dict) else {}
    if e.event == "break_glass" or (e.event == "approved" and detail.get("break_glass")):
        return ":rotating_light: *BREAK GLASS*"
    if e.event == "freeze_override":
        return ":snowflake: *FREEZE OVERRIDE*"
    return ""


def _audit_row(e: Any, budget: int) -> str:
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


def _option(value: str) -> Block:
    return {"text": {"type": "plain_text", "text": _clip(plain(value), 75)}, "value": value}


def _input_block(spec: FieldSpec, current: Any, *, required: bool) -> Block:
    element: Block
    if spec.kind == "choice":
        element = {
            "type": "static_select",
            "action_id": spec.name,
            "options": [_option(c) for c in spec.choices],
        }
        if current in spec.choices:
            element["initial_option"] = _option(str(current))
    else:
        element = {"type": "plain_text_input", "action_id": spec.name}
        if current not in (None, "", []):
            shown = ",".join(str(v) for v in current) if isinstance(current, list) else str(current)
            element["initial_value"] = shown
    hint = spec.hint
    if current not in (None, "", []):
        now = ",".join(map(str, current)) if isinstance(current, list) else str(current)
        hint = f"Now: {now}. {hint}"
    block: Block = {
        "type": "input",
        "block_id": spec.name,
        "optional": not required,
        "label": {"type": "plain_text", "text": _clip(spec.label, _PLAIN_TEXT_MAX)},
        "element": element,
    }
    if hint.strip():
        block["hint"] = {"type": "plain_text", "text": _clip(plain(hint.strip()), 150)}
    return block


def _reason_block(initial: object = None) -> Block:
    element: Block = {"type": "plain_text_input", "action_id": "reason", "max_length": 500}
    if isinstance(initial, str) and initial:
        element["initial_value"] = initial[:500]
    return {
        "type": "input",
        "block_id": "reason",
        "optional": True,
        "label": {"type": "plain_text", "text": "Reason (recorded in the thread and audit)"},
        "element": element,
    }


def _override_block(freeze: str) -> Block:
    """For an admin during a freeze: the reason to go ahead anyway (SPEC §8)."""
    return {
        "type": "input",
        "block_id": "override",
        "optional": True,
        "label": {"type": "plain_text", "text": "Override the freeze (admins): why"},
        # No min_length: the input is optional (most changes in a freeze are not overridden),
        # and Slack's docs do not say an empty optional input escapes it; the server checks
        # the minimum after trimming (forms.py) and shows it on this input.
        "element": {
            "type": "plain_text_input",
            "action_id": "override",
            "max_length": MAX_JUSTIFICATION,
        },
        "hint": {"type": "plain_text", "text": _clip(plain(freeze), 150)},
    }


def _run_at_block() -> Block:
    """The optional run time of a scheduled change (SPEC §9)."""
    return {
        "type": "input",
        "block_id": "run_at",
        "optional": True,
        "label": {"type": "plain_text", "text": "Run at (optional)"},
        "element": {"type": "datetimepicker", "action_id": "run_at"},
        "hint": {
            "type": "plain_text",
            "text": "Empty: it runs once approved. Else 1 minute to 14 days ahead; approve before.",
        },
    }


def loading_modal(callback_id: str, title: str, metadata: Mapping[str, Any]) -> Block:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": _clip(title, 24)},
        "close": {"type": "plain_text", "text": "Close"},
        "private_metadata": json.dumps(dict(metadata)),
        "blocks": [section(":hourglass_flowing_sand: Fetching the cluster…")],
    }


def message_modal(callback_id: str, title: str, text: str, metadata: Mapping[str, Any]) -> Block:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": _clip(title, 24)},
        "close": {"type": "plain_text", "text": "Close"},
        "private_metadata": json.dumps(dict(metadata)),
        "blocks": [section(escape(text))],
    }


def reply_modal(callback_id: str, message: SlackMessage, metadata: Mapping[str, Any]) -> Block:
    """A view showing an answer (a refusal, an outcome) where a form was or would be."""
    view = message_modal(callback_id, "gpuops", "", metadata)
    view["blocks"] = [b for b in message.blocks if b.get("type") in _MODAL_ANSWER_BLOCKS][:100]
    if not view["blocks"]:
        view["blocks"] = [section(escape(message.text))]
    return view


_MODAL_ANSWER_BLOCKS = {"section", "context", "header", "divider"}


def checking_modal(callback_id: str, title: str, metadata: Mapping[str, Any]) -> Block:
    """The view a slow submission is answered with while its checks go on."""
    view = message_modal(callback_id, title, "", metadata)
    view["blocks"] = [section(":hourglass_flowing_sand: Checking your request…")]
    return view


def form_with_problems(view: Mapping[str, Any], problems: Mapping[str, str]) -> Block:
    """A submitted form shown again with what was typed and what is wrong (views.update
    cannot mark fields the way a submission's answer does)."""
    state = view.get("state", {}).get("values", {}) if isinstance(view.get("state"), dict) else {}
    blocks: list[Block] = [
        section(":warning: " + escape("; ".join(f"{k}: {v}" for k, v in problems.items())))
    ]
    for block in view.get("blocks") or []:
        if not isinstance(block, dict):
            continue
        blocks.append(_with_typed(block, state.get(block.get("block_id", ""), {})))
    shown: Block = {
        k: view[k]
        for k in ("type", "callback_id", "title", "submit", "close", "private_metadata")
        if k in view
    }
    shown["blocks"] = blocks[:100]
    return shown


def _with_typed(block: Mapping[str, Any], typed: Mapping[str, Any]) -> Block:
    again = dict(block)
    element = block.get("element")
    if block.get("type") != "input" or not isinstance(element, dict):
        return again
    value = typed.get(element.get("action_id", ""), {})
    element = {k: v for k, v in element.items() if k not in ("initial_value", "initial_option")}
    if isinstance(value, dict) and value.get("selected_option"):
        element["initial_option"] = value["selected_option"]
    elif isinstance(value, dict) and value.get("value"):
        element["initial_value"] = value["value"]
    again["element"] = element
    return again


FORM_SUBMIT = "Request change"
# What the submit button does, said where it is pressed: there is no separate preview step.
FORM_SUBMIT_SAYS = (
    f"*{FORM_SUBMIT}* posts the change with its preview in the channel: a change that needs "
    "approval waits there for an approver, any other runs at once."
)


def _form(callback_id: str, title: str, blocks: list[Block], metadata: Mapping[str, Any]) -> Block:
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": FORM_SUBMIT},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps(dict(metadata)),
        "blocks": [*blocks, context(FORM_SUBMIT_SAYS)],
    }


# Each form kind's callback id: SPEC's names, kept as Slack knows them.
FORM_CALLBACKS: dict[FormKind, str] = {"single": "gpu_update", "choice": "gpu_action"}
BREAK_GLASS_CALLBACK = "gpu_break_glass"


def form_kind(callback_id: str) -> FormKind:
    """The kind of change form a modal callback id stands for."""
    return "choice" if callback_id == FORM_CALLBACKS["choice"] else "single"


def change_form(form: FormView | FormMessage) -> Block:
    """The modal for a change form, or for the refusal that stands in its place."""
    if isinstance(form, FormMessage):
        return message_modal(FORM_CALLBACKS[form.kind], "gpuops", form.text, form.metadata)
    if form.kind == "single":
        modal = update_modal(form.summary, form.specs, form.values, form.metadata, title=form.title)
    else:
        modal = action_modal(
            form.summary,
            form.actions,
            form.action,
            form.specs,
            form.values,
            form.metadata,
            title=form.title,
        )
    if form.freeze is not None:
        modal["blocks"].append(_override_block(form.freeze))
    return modal


DENY_CALLBACK = "gpu_deny"


def reason_modal(
    callback_id: str,
    title: str,
    submit: str,
    metadata: Mapping[str, Any],
    intro: str | None,
    ask: str,
    *,
    block_id: str = "reason",
    min_length: int | None = None,
) -> Block:
    """A modal that asks why before acting: one text input (``min_length``: required)."""
    element: Block = {"type": "plain_text_input", "action_id": block_id, "max_length": 500}
    asking: Block = {
        "type": "input",
        "block_id": block_id,
        "label": {"type": "plain_text", "text": ask},
        "element": element,
    }
    if min_length is None:
        asking["optional"] = True
    else:
        element["min_length"] = min_length
    return {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": submit},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps(dict(metadata)),
        "blocks": [*([section(intro)] if intro else []), asking],
    }


def deny_modal(request_id: str, channel: str, thread_ts: str | None) -> Block:
    """Ask a denier why (optional): the reason is audited and shown in the thread."""
    return reason_modal(
        DENY_CALLBACK,
        "Deny request",
        "Deny",
        {"request_id": request_id, "channel": channel, "thread_ts": thread_ts},
        f":no_entry_sign: You are denying `{escape(request_id)}`: nothing is changed.",
        "Why? (recorded in the thread and audit)",
    )


def break_glass_modal(request_id: str, channel: str | None) -> Block:
    """Ask an admin approving their own request why it cannot wait for a second person."""
    return reason_modal(
        BREAK_GLASS_CALLBACK,
        "Break glass",
        "Approve my own",
        {"request_id": request_id, "channel": channel},
        f":rotating_light: You are approving your own request `{escape(request_id)}`."
        " This is announced in the thread and the audit channel.",
        "Why can't this wait for a second person?",
        min_length=MIN_JUSTIFICATION,
    )


def update_modal(
    summary: ClusterSummary,
    specs: Sequence[FieldSpec],
    current: Mapping[str, Any],
    metadata: Mapping[str, Any],
    *,
    title: str,
) -> Block:
    """The form of a provider's one action; ``title`` is its descriptor's form title."""
    blocks: list[Block] = [
        section(
            f"*{escape(summary.name)}* (`{escape(summary.cluster_id)}`) — "
            f"{escape(summary.status)} · {escape(summary.project)}\n"
            "Change only what should change; fields left as they are are not sent."
        )
    ]
    blocks += [_input_block(s, current.get(s.name), required=False) for s in specs]
    focus = metadata.get("focus")
    for block in blocks:
        if focus and block.get("block_id") == focus and "element" in block:
            block["element"]["focus_on_load"] = True
    blocks.append(_reason_block(current.get("reason")))
    blocks.append(_run_at_block())
    return _form(FORM_CALLBACKS["single"], title, blocks, metadata)


def action_modal(
    summary: ClusterSummary,
    actions: Sequence[str],
    selected: str | None,
    specs: Sequence[FieldSpec],
    current: Mapping[str, Any],
    metadata: Mapping[str, Any],
    *,
    title: str,
) -> Block:
    """The form to choose a provider's action in; ``title`` is its descriptor's."""
    select: Block = {
        "type": "static_select",
        "action_id": "action",
        "placeholder": {"type": "plain_text", "text": "Choose an action"},
        "options": [_option(a) for a in actions],
    }
    if selected in actions:
        select["initial_option"] = _option(str(selected))
    blocks: list[Block] = [
        section(
            f"*{escape(summary.name)}* (`{escape(summary.cluster_id)}`) — "
            f"{escape(summary.status)} · {escape(summary.project)}"
        ),
        {
            "type": "input",
            "block_id": "action",
            "dispatch_action": True,
            "label": {"type": "plain_text", "text": "Action"},
            "element": select,
        },
    ]
    prefill = {k: v for k, v in current.items() if k in {s.name for s in specs}}
    blocks += [_input_block(s, prefill.get(s.name), required=s.required) for s in specs]
    blocks.append(_reason_block(current.get("reason")))
    blocks.append(_run_at_block())
    return _form(FORM_CALLBACKS["choice"], title, blocks, metadata)


# -- answers ------------------------------------------------------------------------------


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
