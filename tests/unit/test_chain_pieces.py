"""The audit append hashes an entry inside the database from its canonical JSON cut around
``at`` and ``prev_hash`` (bot.core.store.chain.canonical_pieces): joined again, the pieces
are the canonical JSON, whatever the entry's text and detail hold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bot.core.store.chain import canonical_json, canonical_pieces, entry_hash, sha256_hex, stamp

texts = st.text(max_size=30) | st.sampled_from(['"at":"', '"prev_hash":"', "#" * 64, "\\", '"'])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
entries = st.fixed_dictionaries(
    {
        "actor": texts,
        "event": texts,
        "project": st.none() | texts,
        "cluster_id": st.none() | texts,
        "request_id": st.none() | texts,
        "outcome": st.none() | texts,
        "detail": st.dictionaries(texts, json_values, max_size=4),
        "at": st.datetimes(timezones=st.just(UTC)),
    }
)


@given(entries, st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_the_pieces_joined_around_time_and_link_are_the_canonical_json(
    fields: dict[str, Any], prev_hash: str
) -> None:
    pieces = canonical_pieces(fields)
    joined = pieces.joined(stamp(fields["at"]), prev_hash)
    assert joined == canonical_json(fields, prev_hash)
    assert sha256_hex(joined) == entry_hash(fields, prev_hash)


def test_a_detail_naming_the_keys_does_not_move_the_cut() -> None:
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    fields: dict[str, Any] = {
        "actor": 'U"at":"',
        "event": "requested",
        "detail": {"at": "#" * 27, "prev_hash": "#" * 64},
        "project": '"prev_hash":"',
        "at": at,
    }
    pieces = canonical_pieces(fields)
    assert pieces.joined(stamp(at), "0" * 64) == canonical_json(fields, "0" * 64)
