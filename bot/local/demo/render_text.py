"""Slack messages and modals as terminal text, for the demo console.

Like a Slack client, this turns mrkdwn entities back into what a person reads
(``<@U01ALICE>`` → ``@alice``, ``&lt;`` → ``<``) and draws Block Kit as indented lines.
Buttons get numbers so they can be pressed by typing the number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_EMOJI = {
    ":hourglass_flowing_sand:": "⏳",
    ":white_check_mark:": "✅",
    ":gear:": "⚙",
    ":large_green_circle:": "🟢",
    ":red_circle:": "🔴",
    ":warning:": "⚠",
    ":no_entry_sign:": "🚫",
    ":alarm_clock:": "⏰",
    ":heavy_multiplication_x:": "✖",
    ":rotating_light:": "🚨",
    ":raised_hand:": "✋",
    ":x:": "❌",
    ":large_yellow_circle:": "🟡",
    ":moneybag:": "💰",
    ":pager:": "📟",
    ":clipboard:": "📋",
    ":desktop_computer:": "🖥",
    ":stethoscope:": "🩺",
    ":large_orange_circle:": "🟠",
    ":white_circle:": "⚪",
    ":information_source:": "ℹ",  # noqa: RUF001
    ":grey_question:": "❔",
    ":sparkles:": "✨",
    ":snowflake:": "❄",
    ":scroll:": "📜",
    ":memory:": "📝",
    ":leftwards_arrow_with_hook:": "↩",
    ":wastebasket:": "🗑",
}
# A shortcode the table lacks reads as its words, as a client without the emoji shows it
# (not inside ``09:21:04`` or ``a:b:c``: a letter first, no word or colon around it).
_SHORTCODE = re.compile(r"(?<![\w:]):([a-z][a-z0-9_+-]*):(?![\w:])")
_USER = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL = re.compile(r"<#([A-Z0-9]+)(?:\|[^>]*)?>")
_LINK = re.compile(r"<(https?://[^|>]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!([a-z]+)>")
_SUBTEAM = re.compile(r"<!subteam\^([A-Z0-9]+)(?:\|([^>]*))?>")


@dataclass(frozen=True)
class Button:
    number: int
    label: str
    action_id: str
    value: str
    channel: str
    message_ts: str
    thread_ts: str | None


@dataclass
class ButtonBoard:
    """Numbers every button shown, so that typing the number presses it."""

    buttons: dict[int, Button] = field(default_factory=dict)
    _by_key: dict[tuple[str, str, str, str], int] = field(default_factory=dict)

    def number(
        self, label: str, action_id: str, value: str, channel: str, ts: str, thread_ts: str | None
    ) -> int:
        key = (channel, ts, action_id, value)
        if key not in self._by_key:
            n = len(self.buttons) + 1
            self._by_key[key] = n
            self.buttons[n] = Button(n, label, action_id, value, channel, ts, thread_ts)
        return self._by_key[key]


class TextRenderer:
    def __init__(
        self,
        users: Mapping[str, str],
        channels: Mapping[str, str],
        groups: Mapping[str, str] | None = None,
    ) -> None:
        self.users = users
        self.channels = channels
        self.groups = groups or {}  # user group id → handle

    def mrkdwn(self, text: str) -> str:
        text = _USER.sub(lambda m: "@" + self.users.get(m.group(1), m.group(1)), text)
        text = _CHANNEL.sub(lambda m: "#" + self.channels.get(m.group(1), m.group(1)), text)
        text = _SUBTEAM.sub(self._group, text)
        text = _LINK.sub(lambda m: m.group(2) or m.group(1), text)
        text = _SPECIAL.sub(lambda m: "@" + m.group(1), text)
        for code, symbol in _EMOJI.items():
            text = text.replace(code, symbol)
        text = _SHORTCODE.sub(lambda m: f"[{m.group(1).replace('_', ' ')}]", text)
        text = re.sub(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])", r"\1", text)  # *bold*
        text = re.sub(r"(?<![\w_])_([^_\n]+)_(?![\w_])", r"\1", text)  # _italic_
        return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")

    def _group(self, match: re.Match[str]) -> str:
        """``<!subteam^S0PLATFORM>`` as Slack shows it: ``@platform``."""
        handle = self.groups.get(match.group(1))
        if handle is not None:
            return f"@{handle}"
        label = match.group(2)
        return label if label else f"@{match.group(1)}"

    def _text(self, obj: Any) -> str:
        if not isinstance(obj, dict):
            return ""
        raw = str(obj.get("text", ""))
        return self.mrkdwn(raw) if obj.get("type") == "mrkdwn" else raw

    def blocks(
        self,
        blocks: list[dict[str, Any]] | None,
        fallback: str,
        board: ButtonBoard,
        *,
        channel: str,
        ts: str,
        thread_ts: str | None,
    ) -> list[str]:
        if not blocks:
            return self.mrkdwn(fallback).splitlines() or [""]
        lines: list[str] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "header":
                lines.append(f"┃ {self._text(block.get('text'))}")
            elif kind == "section":
                if block.get("text"):
                    lines += self._text(block["text"]).splitlines()
                pairs = [self._text(f).replace("\n", ": ", 1) for f in block.get("fields", [])]
                lines += [f"  {pair}" for pair in pairs]
                accessory = block.get("accessory")
                if isinstance(accessory, dict) and accessory.get("type") == "button":
                    label = self._text(accessory.get("text"))
                    n = board.number(
                        label,
                        str(accessory.get("action_id", "")),
                        str(accessory.get("value", "")),
                        channel,
                        ts,
                        thread_ts,
                    )
                    lines.append(f"  [{n} {label}]")
            elif kind == "context":
                parts = [self._text(e) for e in block.get("elements", [])]
                lines.append("  · " + " ".join(p for p in parts if p))
            elif kind == "actions":
                buttons = []
                for element in block.get("elements", []):
                    if element.get("type") != "button":
                        continue
                    label = self._text(element.get("text"))
                    n = board.number(
                        label,
                        str(element.get("action_id", "")),
                        str(element.get("value", "")),
                        channel,
                        ts,
                        thread_ts,
                    )
                    buttons.append(f"[{n} {label}]")
                lines.append("  " + "  ".join(buttons))
            elif kind == "divider":
                lines.append("  ───")
        return lines

    def view(
        self, view: dict[str, Any], errors: Mapping[str, str] | None, values: Mapping[str, str]
    ) -> list[str]:
        title = self._text(view.get("title"))
        lines = [f"╭─ form: {title} ─"]
        for block in view.get("blocks", []):
            kind = block.get("type")
            if kind == "section" and block.get("text"):
                lines += [f"│ {line}" for line in self._text(block["text"]).splitlines()]
            elif kind == "input":
                lines += self._input_lines(block, errors, values)
        submit = self._text(view.get("submit")) if view.get("submit") else None
        lines.append(f"╰─ {'submit: ' + submit if submit else 'no submit button'}")
        return lines

    def _input_lines(
        self, block: dict[str, Any], errors: Mapping[str, str] | None, values: Mapping[str, str]
    ) -> list[str]:
        block_id = str(block.get("block_id", ""))
        element = block.get("element", {})
        label = self._text(block.get("label"))
        required = "" if block.get("optional") else " (required)"
        value = values.get(block_id, "")
        shown = f" = {value}" if value else ""
        lines = [f"│ {block_id}: {label}{required}{shown}"]
        if element.get("type") == "static_select":
            options = ", ".join(str(o.get("value")) for o in element.get("options", []))
            lines.append(f"│     choices: {options}")
        hint = self._text(block.get("hint"))
        if hint:
            lines.append(f"│     {hint}")
        if errors and block_id in errors:
            lines.append(f"│     ❌ {errors[block_id]}")
        return lines


def initial_values(view: dict[str, Any]) -> dict[str, str]:
    """The values a form shows before anyone types: block_id → text."""
    values: dict[str, str] = {}
    for block in view.get("blocks", []):
        if block.get("type") != "input":
            continue
        element = block.get("element", {})
        if "initial_value" in element:
            values[str(block["block_id"])] = str(element["initial_value"])
        option = element.get("initial_option")
        if isinstance(option, dict):
            values[str(block["block_id"])] = str(option.get("value", ""))
    return values


def file_lines(name: str, text: str, *, limit: int = 40) -> list[str]:
    """A file shared in a message, as a client previews it: its name, then its first
    ``limit`` lines."""
    lines = text.splitlines()
    shown = [f"📎 {name} ({len(text.encode()):,} bytes)"]
    shown += [f"│ {line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"│ … ({len(lines) - limit} more lines)")
    return shown
