"""How a provider's reply differs from the model gpuops reads it with: the fields the reply
has that the model does not know (kept by ``extra="allow"``), and the fields the model
declares that the reply left out. ``gpuops check-config --online`` names them for each
project's real replies, so an operator sees how far the provider contract holds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class Differences:
    """Field paths (``nodes[].status``) a reply had unknown, or lacked."""

    unknown: tuple[str, ...]
    missing: tuple[str, ...]


def differences(replies: Sequence[BaseModel]) -> Differences:
    """The unknown and missing fields over every reply (each path once, sorted)."""
    unknown: set[str] = set()
    missing: set[str] = set()
    for reply in replies:
        for kind, path in _walk(reply, ""):
            (unknown if kind == "unknown" else missing).add(path)
    return Differences(tuple(sorted(unknown)), tuple(sorted(missing)))


def _walk(model: BaseModel, prefix: str) -> Iterator[tuple[str, str]]:
    for name in model.model_extra or {}:
        yield "unknown", prefix + name
    fields = type(model).model_fields
    for name, field in fields.items():
        shown = prefix + (field.alias or name)
        if name not in model.model_fields_set:
            yield "missing", shown
            continue
        yield from _nested(getattr(model, name), shown)


def _nested(value: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, BaseModel):
        yield from _walk(value, path + ".")
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _nested(item, path + "[]")
    elif isinstance(value, dict):
        for item in value.values():
            yield from _nested(item, path + "{}")
