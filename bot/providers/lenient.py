"""Lenient parsing for providers' replies, shared by their models: an empty list sent as
``null`` (Go services marshal an empty slice so), an unset time sent as ``""``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, TypeVar

from pydantic import BeforeValidator

T = TypeVar("T")


def _none_as_empty(value: object) -> object:
    return [] if value is None else value


def _blank_as_none(value: object) -> object:
    return None if value == "" else value


NullableList = Annotated[list[T], BeforeValidator(_none_as_empty)]
OptionalTime = Annotated[datetime | None, BeforeValidator(_blank_as_none)]
