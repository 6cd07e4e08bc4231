"""The audit trail's hash chain (SPEC §10): each entry's hash, and the walk that finds the
first entry edited, removed, inserted or moved, and a chain head that does not match.

An entry's hash is SHA-256 over its canonical JSON: every field it records (``at``,
``actor``, ``event``, ``project``, ``cluster_id``, ``request_id``, ``outcome``, ``detail``)
plus ``prev_hash``, the hash of the entry before it (64 zeros for the first), with sorted
keys, no spaces, UTF-8, ``at`` as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` and integral numbers
written as integers (PostgreSQL's JSONB gives ``1e20`` back as ``100000000000000000000``).
The row id is not hashed: it is where the database keeps the entry, and the chain itself
fixes the order. The chain head (``gpuops_audit_chain``: how many entries, the last one's id
and hash) is updated in the same transaction as every append, so removing the newest
entries, or adding entries after them, shows too.

Changing this canonical form changes every hash: it is version 1, used by migration 5.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

GENESIS_HASH = "0" * 64
CHAIN_NAME = "audit"
HASHED_FIELDS = ("actor", "event", "project", "cluster_id", "request_id", "outcome", "detail")


def _normalized(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(v) for v in value]
    return value


def stored_detail(detail: Mapping[str, object] | None) -> dict[str, object]:
    """``detail`` as the database will give it back (JSON types only, integral numbers as
    integers): what is stored is what is hashed."""
    normalized = _normalized(json.loads(json.dumps(dict(detail or {}), allow_nan=False)))
    assert isinstance(normalized, dict)
    return normalized


def stamp(at: datetime) -> str:
    """``at`` in the canonical form: UTC, microseconds, ``Z``."""
    if at.tzinfo is None:
        raise ValueError("an audit time must be tz-aware")
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical_json(fields: Mapping[str, object], prev_hash: str) -> str:
    """The text an entry's hash is taken over (see the module docstring)."""
    at = fields["at"]
    if not isinstance(at, datetime):
        raise TypeError("an audit entry's time must be a datetime")
    body: dict[str, object] = {name: fields.get(name) for name in HASHED_FIELDS}
    body["detail"] = _normalized(body["detail"] or {})
    body["at"] = stamp(at)
    body["prev_hash"] = prev_hash
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def entry_hash(fields: Mapping[str, object], prev_hash: str) -> str:
    return hashlib.sha256(canonical_json(fields, prev_hash).encode("utf-8")).hexdigest()


def sha256_hex(text: str) -> str:
    """The hash the database computes in an append (SQLite's ``gpuops_sha256``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_AT_MARK = "#" * 27  # as long as a stamp, and never one
_PREV_MARK = "#" * 64  # as long as a hash, and never one


@dataclass(frozen=True)
class CanonicalPieces:
    """An entry's canonical JSON with its time and ``prev_hash`` left out, for an append
    that reads both inside its one statement: ``before_at + stamp + before_prev +
    prev_hash + after_prev`` is ``canonical_json``."""

    before_at: str
    before_prev: str
    after_prev: str

    def joined(self, at_stamp: str, prev_hash: str) -> str:
        return self.before_at + at_stamp + self.before_prev + prev_hash + self.after_prev


def canonical_pieces(fields: Mapping[str, object]) -> CanonicalPieces:
    """Split the canonical JSON around ``at`` and ``prev_hash``. With sorted keys, only
    ``actor`` (a string) comes before ``at``, and only ``project`` and ``request_id``
    (strings) after ``prev_hash``: a string's quotes are escaped, so the first ``"at":``
    and the last ``"prev_hash":`` are the entry's own, whatever ``detail`` holds."""
    body: dict[str, object] = {name: fields.get(name) for name in HASHED_FIELDS}
    body["detail"] = _normalized(body["detail"] or {})
    body["at"], body["prev_hash"] = _AT_MARK, _PREV_MARK
    text = json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    at_key, prev_key = f'"at":"{_AT_MARK}"', f'"prev_hash":"{_PREV_MARK}"'
    before_at, _, rest = text.partition(at_key)
    before_prev, _, after_prev = rest.rpartition(prev_key)
    return CanonicalPieces(
        before_at=before_at + '"at":"',
        before_prev='"' + before_prev + '"prev_hash":"',
        after_prev='"' + after_prev,
    )


class ChainedEntry(Protocol):
    """What the walk reads of an entry (``AuditEntry`` has it)."""

    @property
    def id(self) -> int: ...
    @property
    def prev_hash(self) -> str | None: ...
    @property
    def hash(self) -> str | None: ...
    def hashed_fields(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class ChainHead:
    """The chain as the last append left it."""

    entries: int
    last_id: int | None
    last_hash: str


BreakKind = Literal["edited", "removed", "inserted", "reordered"]


@dataclass(frozen=True)
class ChainBreak:
    """The first place where the trail is not the chain the appends made."""

    kind: BreakKind
    entry_id: int | None  # the entry edited, inserted or moved, or the first after a removal
    text: str


@dataclass
class _Walked:
    """How far the walk got: the accepted entries' count, and the last two hashes."""

    count: int = 0
    last_id: int | None = None
    last_hash: str = GENESIS_HASH
    hash_before_last: str | None = None
    head_seen: bool = False  # the head's hash was that of an accepted entry …
    after_head: int | None = None  # … and this accepted entry came after it

    def accept(self, entry: ChainedEntry, head: ChainHead) -> None:
        if self.head_seen and self.after_head is None:
            self.after_head = entry.id
        self.count += 1
        self.last_id, self.hash_before_last = entry.id, self.last_hash
        self.last_hash = str(entry.hash)
        if entry.hash == head.last_hash:
            self.head_seen, self.after_head = True, None


def _after(entry_id: int | None) -> str:
    return f"entry {entry_id}" if entry_id is not None else "the start of the trail"


def _intact(entry: ChainedEntry) -> bool:
    if entry.hash is None or entry.prev_hash is None:
        return False
    return entry_hash(entry.hashed_fields(), entry.prev_hash) == entry.hash


def _judge(
    entry: ChainedEntry, following: ChainedEntry | None, walked: _Walked, head: ChainHead
) -> ChainBreak:
    """Why ``entry`` does not continue the chain."""
    if entry.hash is None:
        return ChainBreak(
            "inserted",
            entry.id,
            f"entry {entry.id} was inserted: it has no hash, so no append of the chain "
            "wrote it (a gpuops release without the chain, or a hand-made row)",
        )
    if walked.head_seen and walked.last_hash == head.last_hash:
        return ChainBreak(
            "inserted",
            entry.id,
            f"entry {entry.id} was inserted: the chain's last append was entry {head.last_id}",
        )
    links = entry.prev_hash == walked.last_hash
    if _swapped(entry, following, walked):
        assert following is not None
        return ChainBreak(
            "reordered",
            entry.id,
            f"entries {entry.id} and {following.id} were swapped: in the chain entry "
            f"{following.id} follows {_after(walked.last_id)} and entry {entry.id} follows "
            f"entry {following.id}",
        )
    if following is not None and following.prev_hash == walked.last_hash:
        return ChainBreak(
            "inserted",
            entry.id,
            f"entry {entry.id} was inserted: entry {following.id} follows "
            f"{_after(walked.last_id)} in the chain",
        )
    if entry.prev_hash == walked.hash_before_last and walked.last_id is not None:
        return ChainBreak(
            "inserted",
            walked.last_id,
            f"entry {walked.last_id} was inserted: entry {entry.id} follows the entry "
            f"before it in the chain",
        )
    if links or not _intact(entry):
        return ChainBreak(
            "edited", entry.id, f"entry {entry.id} was edited: its content does not match its hash"
        )
    return ChainBreak(
        "removed",
        entry.id,
        f"entries were removed between {_after(walked.last_id)} and entry {entry.id}: "
        f"entry {entry.id} does not follow {_after(walked.last_id)}",
    )


def _swapped(entry: ChainedEntry, following: ChainedEntry | None, walked: _Walked) -> bool:
    """``entry`` and the one after it hold together in the other order."""
    return (
        following is not None
        and _intact(entry)
        and _intact(following)
        and following.prev_hash == walked.last_hash
        and entry.prev_hash == following.hash
    )


def _check_tail(walked: _Walked, head: ChainHead) -> ChainBreak | None:
    """Every entry continues the chain: whether the trail ends where the head says."""
    if walked.last_hash == head.last_hash and walked.count == head.entries:
        return None
    if walked.head_seen and walked.after_head is not None:
        return ChainBreak(
            "inserted",
            walked.after_head,
            f"entry {walked.after_head} was inserted: the chain's last append was entry "
            f"{head.last_id}",
        )
    recorded = f"the chain's last append recorded {head.entries} entries ending with entry "
    recorded += f"{head.last_id}"
    if walked.head_seen:  # the head's hash is the last entry's: its count was changed
        return ChainBreak(
            "edited",
            None,
            f"the chain head was edited: {recorded}, the trail holds together with "
            f"{walked.count} ending with that entry",
        )
    if walked.last_id is not None and walked.last_id == head.last_id:
        return ChainBreak(
            "edited",
            walked.last_id,
            f"entry {walked.last_id}, the newest, was edited and hashed again, or the chain "
            f"head was edited: the trail's {walked.count} entries hold together, but {recorded} "
            "with another hash",
        )
    if walked.last_id is None or (head.last_id is not None and walked.last_id < head.last_id):
        return ChainBreak(
            "removed",
            None,
            f"entries were removed after {_after(walked.last_id)}: {recorded}, the trail has "
            f"{walked.count}",
        )
    return ChainBreak(
        "edited",
        None,
        f"the chain head was edited: {recorded}, the trail holds together with "
        f"{walked.count} entries ending with entry {walked.last_id}",
    )


async def first_break(
    entries: AsyncIterator[ChainedEntry], head: ChainHead
) -> tuple[int, ChainBreak | None]:
    """Walk ``entries`` (oldest first) against ``head``: how many entries continue the
    chain, and the first break (None when the chain is intact). Reads one entry ahead."""
    walked = _Walked()
    current = await anext(entries, None)
    while current is not None:
        following = await anext(entries, None)
        if current.prev_hash == walked.last_hash and _intact(current):
            walked.accept(current, head)
        else:
            return walked.count, _judge(current, following, walked, head)
        current = following
    return walked.count, _check_tail(walked, head)
