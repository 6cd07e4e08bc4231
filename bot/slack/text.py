"""Slack text that fits: escaping, and shortening that never splits an escape, mention or link.

Shortening works on whole *atoms* of mrkdwn — an escape (``&lt;``), an angle-bracket entity
(``<@U…>``, ``<#C…>``, ``<https://…|label>``), an emoji code (``:gear:``) or one character —
so raw text is escaped first and then cut between atoms, which is cutting between the raw
characters. A shortened text ends with ``…``; nothing is cut without saying so."""

from __future__ import annotations

import re
from collections.abc import Iterable

ELLIPSIS = "…"
_ATOM = re.compile(r"<[^<>\n]*>|&(?:amp|lt|gt);|:[a-z0-9_+\-]{1,40}:|.", re.DOTALL)


def escape(value: object) -> str:
    """Neutralise Slack control sequences: ``<!channel>``, ``<@U…>``, ``<url|label>``."""
    text = str(value)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain(value: object) -> str:
    """Text for plain_text objects: Slack does not parse them, and we make sure of it."""
    return str(value).replace("<", "\u2039").replace(">", "\u203a")


def clip(mrkdwn: str, limit: int) -> str:
    """``mrkdwn`` in at most ``limit`` characters, cut between atoms and ending with ``…``."""
    if len(mrkdwn) <= limit:
        return mrkdwn
    kept: list[str] = []
    used = 0
    for match in _ATOM.finditer(mrkdwn):
        atom = match.group()
        if used + len(atom) > limit - len(ELLIPSIS):
            break
        kept.append(atom)
        used += len(atom)
    return "".join(kept).rstrip() + ELLIPSIS


def shorten(raw: object, limit: int) -> str:
    """Raw user or provider text, escaped, in at most ``limit`` characters."""
    return clip(escape(raw), max(limit, len(ELLIPSIS)))


def shorten_plain(raw: object, limit: int) -> str:
    """Raw text for a plain_text object in at most ``limit`` characters."""
    text = plain(raw)
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


def fit_lines(lines: Iterable[str], limit: int) -> str:
    """As many whole lines as fit in ``limit`` characters; ``…`` on a line of its own says
    more lines were left out (when not even the first line fits, the text is clipped)."""
    lines = list(lines)
    whole = "\n".join(lines)
    if len(whole) <= limit:
        return whole
    kept: list[str] = []
    used = 0
    for line in lines:
        extra = len(line) + (1 if kept else 0)
        if used + extra > limit - len(ELLIPSIS) - 1:
            if not kept:
                return clip(whole, limit)
            return "\n".join(kept) + "\n" + ELLIPSIS
        kept.append(line)
        used += extra
    return "\n".join(kept)


def pack_lines(lines: Iterable[str], limit: int) -> list[str]:
    """Lines grouped into texts of at most ``limit`` characters each, in order, none lost
    (a single line longer than ``limit`` is clipped)."""
    texts: list[str] = []
    current: list[str] = []
    used = 0
    for line in (clip(line, limit) for line in lines):
        extra = len(line) + (1 if current else 0)
        if current and used + extra > limit:
            texts.append("\n".join(current))
            current, used, extra = [], 0, len(line)
        current.append(line)
        used += extra
    if current:
        texts.append("\n".join(current))
    return texts
