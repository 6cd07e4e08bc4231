"""Shortening Slack text: within the limit, never splitting an escape, mention or link, ending
with "…" when cut, and keeping every line when packing."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from bot.slack.text import (
    ELLIPSIS,
    clip,
    escape,
    fit_lines,
    pack_lines,
    shorten,
    shorten_plain,
)

ENTITIES = ["<@U05ERIN>", "<#C0INCIDENT>", "<https://example.com/a?b=c|the runbook>", "<!here>"]
PIECES = st.one_of(
    st.sampled_from([*ENTITIES, "&lt;", "&gt;", "&amp;", ":gear:", " ", "\n", "x"]),
    st.text(alphabet=st.characters(blacklist_characters="<>&"), max_size=12),
)
MRKDWN = st.lists(PIECES, max_size=60).map("".join)
RAW = st.text(max_size=400) | st.text(alphabet="<>&@!|x ", max_size=400)
_ENTITY_OR_ESCAPE = re.compile(r"<[^<>\n]*>|&(?:amp|lt|gt);")


def _atoms(text: str) -> list[str]:
    return _ENTITY_OR_ESCAPE.findall(text)


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@given(text=MRKDWN, limit=st.integers(min_value=1, max_value=300))
@example(text="hello <@U05ERIN> there", limit=12)
@example(text="a &lt;b&gt; c", limit=5)
def test_clip_is_within_the_limit_and_never_splits_an_entity(text: str, limit: int) -> None:
    out = clip(text, limit)
    assert len(out) <= max(limit, len(ELLIPSIS))
    if len(text) <= limit:
        assert out == text
        return
    assert out.endswith(ELLIPSIS)
    kept = out[: -len(ELLIPSIS)]
    assert text.startswith(kept)
    # Every entity or escape in what was kept is whole: the kept text's own atoms are a
    # prefix of the original's, so nothing ends half-way through one.
    assert _atoms(text)[: len(_atoms(kept))] == _atoms(kept)
    assert "<" not in kept.rpartition(">")[2]  # no open "<…" left at the end
    tail = kept.rpartition(";")[2]
    assert "&" not in tail  # no "&l" left at the end


@given(raw=RAW, limit=st.integers(min_value=1, max_value=200))
def test_shorten_cuts_the_raw_text_not_its_escapes(raw: str, limit: int) -> None:
    out = shorten(raw, limit)
    assert len(out) <= max(limit, len(ELLIPSIS))
    for needle in ("<@", "<!", "<#", "<http"):
        assert needle not in out
    if len(escape(raw)) <= limit:
        assert out == escape(raw)
        return
    assert out.endswith(ELLIPSIS)
    assert raw.startswith(_unescape(out[: -len(ELLIPSIS)]))  # cut between raw characters


def test_shorten_a_hostile_name_ends_with_an_ellipsis_not_half_an_escape() -> None:
    name = "<" * 4700
    out = shorten(name, 2900)
    assert out.endswith("&lt;…") and len(out) <= 2900
    assert out.count("&lt;") == (2900 - 1) // 4


def test_the_fallback_is_never_cut_mid_mention() -> None:
    rows = [f"`2026-11-30` <@U05ERIN> *refused* row {i}" for i in range(200)]
    out = clip("\n".join(rows), 3500)
    assert not re.search(r"<@U[0-9A-Z]*…", out) and "<@U05ERIN>" in out
    assert out.endswith(ELLIPSIS)


@given(raw=st.text(max_size=300), limit=st.integers(min_value=1, max_value=150))
def test_shorten_plain_stays_within_the_limit_and_cannot_mention(raw: str, limit: int) -> None:
    out = shorten_plain(raw, limit)
    assert len(out) <= limit and "<" not in out and ">" not in out
    assert out.endswith(ELLIPSIS) or len(raw) <= limit


LINES = st.lists(MRKDWN.filter(lambda s: "\n" not in s), max_size=40)


@given(lines=LINES, limit=st.integers(min_value=20, max_value=400))
def test_pack_lines_keeps_every_line_in_order_within_the_limit(
    lines: list[str], limit: int
) -> None:
    texts = pack_lines(lines, limit)
    assert all(len(t) <= limit for t in texts)
    assert "\n".join(texts).split("\n") == [clip(line, limit) for line in lines] or not lines


@given(lines=LINES, limit=st.integers(min_value=20, max_value=400))
def test_fit_lines_keeps_whole_lines_and_says_when_some_are_left_out(
    lines: list[str], limit: int
) -> None:
    out = fit_lines(lines, limit)
    assert len(out) <= limit
    if out == "\n".join(lines):
        return
    assert out.endswith(ELLIPSIS)
    kept = out.split("\n")
    if len(kept) > 1:
        assert kept[-1] == ELLIPSIS and kept[:-1] == lines[: len(kept) - 1]
    else:
        assert lines[0].startswith(out[: -len(ELLIPSIS)])
