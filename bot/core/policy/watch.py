"""The ``watch`` policy key of a project (SPEC §3), validated, with its reminder horizons
(``24h``, ``1h``, ``30m``): the policy schema embeds ``WatchConfig`` in a project's
settings."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator

MIN_EVERY_SECONDS = 15
_HORIZON = re.compile(r"^\s*(\d+)\s*([dhm])\s*$", re.IGNORECASE)
_UNITS = {"d": timedelta(days=1), "h": timedelta(hours=1), "m": timedelta(minutes=1)}


@dataclass(frozen=True, order=True)
class Horizon:
    """A reminder horizon: ``text`` as written in the policy, ``before`` the end."""

    before: timedelta
    text: str


def parse_horizon(text: str) -> Horizon:
    """``24h`` → 24 hours before the end; ``30m``, ``2d`` likewise. ValueError otherwise."""
    match = _HORIZON.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a reminder horizon like 24h, 1h or 30m")
    amount = int(match.group(1))
    if amount == 0:
        raise ValueError(f"{text!r}: a reminder horizon must be more than zero")
    unit = match.group(2).lower()
    return Horizon(before=amount * _UNITS[unit], text=f"{amount}{unit}")


def parse_horizons(texts: Iterable[str]) -> list[Horizon]:
    """Distinct horizons, widest first."""
    unique = {h.before: h for h in (parse_horizon(t) for t in texts)}
    return sorted(unique.values(), reverse=True)


class WatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    every_seconds: int = Field(default=60, ge=MIN_EVERY_SECONDS)
    status: bool = True
    remediations: bool = True
    reservation_reminders: tuple[str, ...] = ("24h", "1h")

    @field_validator("reservation_reminders")
    @classmethod
    def _horizons_parse(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.text for h in parse_horizons(value))

    @property
    def horizons(self) -> list[Horizon]:
        return parse_horizons(self.reservation_reminders)
