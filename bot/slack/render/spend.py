"""``/gpu spend`` and the weekly digest in Block Kit: a scope's lines packed into sections
within Slack's limits (3,000 characters a section), never cut mid-line; a digest longer
than one message's blocks goes on in its thread."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.api import SpendCard
from bot.slack.render.primitives import Block, SlackMessage, composed_text, section
from bot.slack.text import pack_lines

SECTION_LIMIT = 2900
BLOCKS_PER_MESSAGE = 45  # of Slack's 50, room to spare


def _blocks(lines: Sequence[str]) -> list[Block]:
    return [
        section(text) for text in pack_lines((composed_text(line) for line in lines), SECTION_LIMIT)
    ]


def spend_messages(scopes: Sequence[Sequence[str]]) -> list[SlackMessage]:
    """The messages of the scopes' lines (a divider between scopes), in order."""
    blocks: list[Block] = []
    for index, lines in enumerate(scopes):
        if index:
            blocks.append({"type": "divider"})
        blocks += _blocks(lines)
    chunks = [blocks[i : i + BLOCKS_PER_MESSAGE] for i in range(0, len(blocks), BLOCKS_PER_MESSAGE)]
    fallback = scopes[0][0] if scopes and scopes[0] else "Spend"
    return [SlackMessage(text=composed_text(fallback), blocks=chunk) for chunk in chunks or [[]]]


def spend_card(card: SpendCard) -> SlackMessage:
    """``/gpu spend``'s answer: its first message (an ephemeral answer is one message; a
    longer one says how to narrow it)."""
    messages = spend_messages(card.scopes)
    first = messages[0]
    if len(messages) > 1:
        more = section("… more scopes than one answer holds: ask for one project or team.")
        first = SlackMessage(text=first.text, blocks=[*first.blocks[:-1], more])
    return first
