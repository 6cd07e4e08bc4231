"""A change form's values: the context kept in its metadata, the cluster's values it was
prefilled with, and which typed values change something."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypeAlias

from bot.providers.base import FieldSpec

CONTEXT_KEYS = ("project", "cluster_id", "channel")

# A value a form was prefilled with, as its metadata keeps it: text, or a list of texts.
Shown: TypeAlias = str | list[str]


def parse_metadata(raw: str | None) -> dict[str, str]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v) for k, v in data.items() if k in CONTEXT_KEYS}


def shown_values(current: Mapping[str, object], specs: list[FieldSpec]) -> dict[str, Shown]:
    """The cluster's values a form was prefilled with (kept in its metadata): a prefilled
    input submitted as it was is not a change, even if the cluster changed while the form
    was open."""
    shown: dict[str, Shown] = {}
    for spec in specs:
        value = current.get(spec.name)
        if isinstance(value, list | tuple):
            shown[spec.name] = [str(v) for v in value]
        elif value is not None:
            shown[spec.name] = str(value)
    return shown


def parse_shown(raw: str | None) -> dict[str, Shown]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    shown = data.get("shown") if isinstance(data, dict) else None
    if not isinstance(shown, dict):
        return {}
    return {
        str(k): v
        for k, v in shown.items()
        if isinstance(v, str) or (isinstance(v, list) and all(isinstance(i, str) for i in v))
    }


def changed_inputs(
    specs: list[FieldSpec],
    current: Mapping[str, object],
    values: Mapping[str, str | None],
    shown: Mapping[str, Shown],
) -> tuple[dict[str, str], set[str]]:
    """The typed values that change something, and the names of those that do not."""
    inputs: dict[str, str] = {}
    unchanged: set[str] = set()
    for spec in specs:
        raw = (values.get(spec.name) or "").strip()
        if not raw:
            continue
        if _same_value(raw, current.get(spec.name)) or _same_value(raw, shown.get(spec.name)):
            unchanged.add(spec.name)
            continue
        inputs[spec.name] = raw
    return inputs, unchanged


def _same_value(raw: str, current: object) -> bool:
    if current is None:
        return False
    if isinstance(current, list | tuple):
        shown = ",".join(str(v) for v in current)
        return raw.replace(" ", "") == shown
    return raw == str(current)
