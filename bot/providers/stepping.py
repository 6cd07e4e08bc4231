"""How a provider's size change is sent in steps (SPEC §14): which action and count fields
``step=`` applies to, and whether each step's value is the new total or what it adds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Stepping(BaseModel):
    """A provider's steppable size change: ``action`` with one of ``fields``, counted in
    ``unit``; ``additive`` when the field says what to add (E2E ``additional_nodes``) rather
    than the new total (Together ``num_gpus``); each step a multiple of ``multiple``."""

    model_config = ConfigDict(frozen=True)

    action: str
    fields: tuple[str, ...]
    unit: str  # "GPUs", "nodes"
    additive: bool = False
    multiple: int = 1
