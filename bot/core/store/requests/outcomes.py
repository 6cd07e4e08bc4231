"""What the request writes answer besides a record: the refusals (StepTaken, RevertTaken)
and how a start went (Started)."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from bot.core.store.records import (
    ChangeRequestRecord,
    Lease,
)
from bot.errors import GpuopsError


class StepTaken(GpuopsError):
    """The workflow step a request was to be linked to is no longer running (another replica
    made its request, or it was ended): no request was created."""


class RevertTaken(GpuopsError):
    """Another revert of the same request is open or done (a unique index, migration 12):
    no request was created."""

    def __init__(self, revert_of: str) -> None:
        self.revert_of = revert_of
        super().__init__(f"{revert_of} already has a revert")


# The index that lets one revert per request be open or done (migration 12).
_REVERT_SLOT = "revert_slot"


class Moved(GpuopsError):
    """The request was not where the transition needs it: leave the transaction by it, so
    nothing taken in it (lease, lock) stays."""


class StartedHow(enum.StrEnum):
    """What ``start_execution`` did."""

    STARTED = "started"  # executing now, under ``lease``, holding the cluster
    HELD = "held"  # another executor holds the request's lease: nothing done
    BUSY = "busy"  # another request holds the cluster (``holder``); the lease is ours
    MOVED = "moved"  # the request is no longer approved: nothing done


@dataclass(frozen=True)
class StartAsked:
    """What a start asks for: the execution lease (kept, with ``fence``), the call deadline."""

    lease_name: str
    holder: str
    ttl_seconds: float
    max_call_seconds: float
    fence: Lease | None


@dataclass(frozen=True)
class Started:
    how: StartedHow
    lease: Lease | None = None
    record: ChangeRequestRecord | None = None
    holder: str | None = None  # BUSY: the request holding the cluster


@asynccontextmanager
async def revert_slot_taken(revert_of: str | None) -> AsyncIterator[None]:
    """Turn the unique index's refusal of a second revert into RevertTaken (the
    transaction, left by it, stored nothing)."""
    try:
        yield
    except IntegrityError as exc:
        if revert_of is None or _REVERT_SLOT not in str(exc.orig):
            raise
        raise RevertTaken(revert_of) from None
