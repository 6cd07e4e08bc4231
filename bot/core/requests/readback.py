"""Reading back a decision whose commit answer was lost.

A decision is one transaction (bot.core.requests.transitions), but the store can fail on or
after its COMMIT: the server may have taken it or not, and the error alone cannot say which.
Before anyone is told anything, the request is read again once the store answers (within
``READ_BACK_SECONDS``, well inside the half hour a Slack click's answer may take): what it
shows is what is told — recorded, not recorded (press again), or decided by someone else.
A store still silent after that is told as such, never as "nothing was changed", and the
decider's replica goes on reading back (for ``SETTLE_LATER_SECONDS``): once the store is back
a decision it took is told and its prompt redrawn (bot.core.requests.decisions)."""

from __future__ import annotations

import asyncio
import logging

from bot.core.answers import Reply, error
from bot.core.store import ChangeRequestRecord, Store, StoreUnavailable

log = logging.getLogger(__name__)

READ_BACK_SECONDS = 20.0  # how long a decider waits for the store to answer the read-back
SETTLE_LATER_SECONDS = 1800.0  # then the read-back goes on in the background, this long
_PAUSE_SECONDS = 0.25  # between tries of a store that refused at once


class ReadBackFailed(StoreUnavailable):
    """The store did not answer the read-back in time: what was recorded is unknown."""


async def read_back(
    store: Store, request_id: str, *, within: float | None = None
) -> ChangeRequestRecord | None:
    """The request as the store has it, once it answers again; ReadBackFailed when it does
    not within ``within`` seconds (default READ_BACK_SECONDS; each try is bounded by the
    store's own timeout)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (READ_BACK_SECONDS if within is None else within)
    while True:
        try:
            return await store.get_request(request_id)
        except StoreUnavailable as exc:
            if loop.time() >= deadline:
                raise ReadBackFailed(store.database, exc.reason) from exc
            log.info("reading back %s once the store answers: %s", request_id, exc.reason)
            await asyncio.sleep(_PAUSE_SECONDS)


def not_recorded(request_id: str, what: str) -> Reply:
    """The read-back found the decision not taken: nothing was stored, press again."""
    return error(
        f"Your {what} of {request_id} was not recorded: gpuops lost contact with its state "
        "store while recording it. Press the button again."
    )


def unknown_whether_recorded(request_id: str, what: str) -> Reply:
    """The store stayed silent: whether the decision was taken is not known yet."""
    return error(
        f"gpuops lost contact with its state store while recording your {what} of "
        f"{request_id}, so it cannot say yet whether it was recorded; the request's message "
        "shows it once the store is back."
    )
