"""What a message must satisfy to be sent to real Slack in one piece (SPEC §4.6): Slack's
documented limits, slack_sdk's Block Kit models, a text fallback that is never cut inside an
entity, and gpuops's safe total for one message."""

from __future__ import annotations

import json
import re
from typing import Any

from slack_sdk.models.blocks import Block

from bot.local.slack.models import block_problems

SAFE_TOTAL = 12_000 + 400  # the rows' budget plus a page's context lines
_CUT_ENTITY = re.compile(r"<[@#!][^>]*$|&[a-z]{0,3}$")


def texts_of(blocks: list[dict[str, Any]]) -> list[str]:
    """Every mrkdwn/plain text of sections (text and fields) and context elements."""
    texts = []
    for block in blocks:
        if isinstance(block.get("text"), dict):
            texts.append(block["text"]["text"])
        texts += [e["text"] for e in block.get("elements", []) if isinstance(e.get("text"), str)]
        texts += [f["text"] for f in block.get("fields", [])]
    return texts


def assert_fits_one_message(text: str, blocks: list[dict[str, Any]] | None) -> None:
    blocks = blocks or []
    assert len(blocks) <= 50
    assert block_problems(blocks) == []
    for block in blocks:
        parsed = Block.parse(block)
        assert parsed is not None
        parsed.validate_json()
    texts = texts_of(blocks)
    assert all(len(t) <= 3000 for t in texts)
    assert sum(map(len, texts)) <= SAFE_TOTAL
    assert text.strip() and len(text) <= 3500
    assert not _CUT_ENTITY.search(text.rstrip("…")), text[-40:]
    for needle in ("<@U0EVIL>", "<!channel>"):
        assert needle not in text + json.dumps(blocks)
