"""The ``watch`` policy key of a project (SPEC §3), validated: the policy loader embeds
``WatchConfig`` in a project's settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.core.watch.reminders import Horizon, parse_horizons

MIN_EVERY_SECONDS = 15


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
