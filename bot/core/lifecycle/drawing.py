"""A lifecycle table drawn as a mermaid ``stateDiagram-v2`` (the README's drawings)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Protocol


class Row(Protocol):
    """One transition of a table: its name, where it may come from (none: it starts a new
    one) and where it goes (None: it stays where it is, recording facts)."""

    @property
    def name(self) -> str: ...

    @property
    def from_states(self) -> frozenset[enum.StrEnum]: ...

    @property
    def to(self) -> enum.StrEnum | None: ...


def mermaid(rows: Iterable[Row], finals: Iterable[enum.StrEnum]) -> str:
    """Every transition as an arrow (those between the same two states on one, named in the
    table's order), then each final state's end."""
    edges: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        for source in sorted(str(state) for state in row.from_states) or ["[*]"]:
            target = source if row.to is None else str(row.to)
            edges.setdefault((source, target), []).append(row.name)
    lines = ["stateDiagram-v2"]
    lines += [f"    {a} --> {b}: {', '.join(names)}" for (a, b), names in edges.items()]
    lines += [f"    {state} --> [*]" for state in finals]
    return "\n".join(lines)
