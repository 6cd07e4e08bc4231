"""The policy's ``staged`` section (SPEC §14): how long each step of a staged change is held
steady (``soak``) and how long it may take to be steady (``steady_within``), when the change
does not say."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator
from pydantic_core import PydanticCustomError

MAX_DURATION = timedelta(hours=24)
_DURATION = re.compile(r"^([0-9]{1,6})(s|m|h)\Z")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours"}


def read_duration(text: str) -> timedelta | None:
    """``30s``, ``10m``, ``1h`` from 1 s up to 24 h; None for anything else."""
    match = _DURATION.match(text.strip())
    if match is None:
        return None
    value = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    return value if timedelta(seconds=1) <= value <= MAX_DURATION else None


def duration_words(value: timedelta) -> str:
    """A duration as the policy writes it: ``90s``, ``10m``, ``2h``."""
    seconds = int(value.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def _parse(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    parsed = read_duration(value) if isinstance(value, str) else None
    if parsed is None:
        raise PydanticCustomError(
            "duration",
            "a duration from 1s to 24h such as 30s, 10m or 1h (got {given!r})",
            {"given": value},
        )
    return parsed


Duration = Annotated[
    timedelta, PlainValidator(_parse), PlainSerializer(duration_words, return_type=str)
]


class StagedDefaults(BaseModel):
    """``staged: {soak: 10m, steady_within: 30m}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    soak: Duration = timedelta(minutes=10)
    steady_within: Duration = timedelta(minutes=30)
