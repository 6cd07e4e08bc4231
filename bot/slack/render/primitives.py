"""Block Kit primitives every surface builds from: escaped text, mentions of ids the bot
knows, sections, headers, buttons and the message they make. Every string that comes from
a user or a provider goes through ``escape`` so it cannot mention, link or ping — in blocks
and in the ``text`` fallback — and long text is shortened by ``bot.slack.text`` (never
mid-entity, never losing an id)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from bot.core.api import Page
from bot.slack.text import clip, fit_lines, pack_lines
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


class MessageKwargs(TypedDict):
    """A message as chat.postMessage, chat.update and respond() take it."""

    text: str
    blocks: list[Block]


@dataclass(frozen=True)
class SlackMessage:
    text: str
    blocks: list[Block] = field(default_factory=list)

    def as_kwargs(self) -> MessageKwargs:
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


def usergroup_ref(usergroup_id: str) -> str:
    """A Slack user-group mention for an id from the policy; anything else escaped."""
    if usergroup_id.isalnum() and usergroup_id.startswith("S"):
        return f"<!subteam^{usergroup_id}>"
    return escape(usergroup_id)


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
