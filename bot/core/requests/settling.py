"""Recording a decision when the store may lose the answer to a commit.

A commit whose answer was lost is read back before anything is told; when the store does not
answer the read-back either, it goes on in the background and tells what it took once the
store is back."""

from __future__ import annotations

import logging

from bot.core.answers import Reply
from bot.core.requests import table, transitions
from bot.core.requests.deciders import already_decided_refusal
from bot.core.requests.deps import RequestDeps
from bot.core.requests.execution import Execution
from bot.core.requests.readback import (
    SETTLE_LATER_SECONDS,
    ReadBackFailed,
    not_recorded,
    read_back,
    unknown_whether_recorded,
)
from bot.core.requests.transitions import Change
from bot.core.store import ChangeRequestRecord, RequestState, StoreUnavailable

log = logging.getLogger(__name__)

_COMPLETING = frozenset({table.APPROVE, table.BREAK_GLASS})


def took(seen: ChangeRequestRecord, current: ChangeRequestRecord, change: Change) -> bool:
    """Whether ``current`` (read back) holds ``change`` written over ``seen``: the state it
    sets, by its actor (a partial approval: still pending, the approver counted)."""
    t = change.transition
    if current.version <= seen.version or current.state is not t.to:
        return False
    if t.to in t.from_states:
        return change.actor in current.approvers
    return current.decided_by == change.actor


class Settling:
    """Settle a decision's change, read back after a lost answer, and tell it once."""

    def __init__(self, deps: RequestDeps, execution: Execution) -> None:
        self.deps = deps
        self.execution = execution

    async def settle_decision(self, record: ChangeRequestRecord, change: Change) -> Reply | None:
        """Settle a decision; the already-decided refusal when someone was faster. A commit
        whose answer was lost is read back before anything is told."""
        try:
            done = await transitions.apply(self.deps, record, change)
        except StoreUnavailable:
            found = await self.read_back(record, change, "decision")
            if isinstance(found, Reply):
                return found
            done = found
        if done is not None:
            await self.announce(record, done, change)
            return None
        current = await self.deps.store.get_request(record.id) or record
        return already_decided_refusal(current).reply()

    async def read_back(
        self, record: ChangeRequestRecord, change: Change, what: str
    ) -> ChangeRequestRecord | Reply | None:
        """After a store error on writing ``change``: the request as written by it (then
        told by the caller), None when someone else decided it, or what the decider is
        told (not recorded, press again; or not known yet, settled later)."""
        try:
            current = await read_back(self.deps.store, record.id)
        except ReadBackFailed:
            self._settle_later(record, change)
            return unknown_whether_recorded(record.id, what)
        if current is not None and took(record, current, change):
            return current
        if current is not None and current.state is RequestState.PENDING:
            return not_recorded(record.id, what)
        return None

    async def announce(
        self, record: ChangeRequestRecord, done: ChangeRequestRecord, change: Change
    ) -> None:
        """Tell a decision the store has recorded; a store error while telling it (a
        mirror's failure audited, say) leaves it recorded, so it is logged, not told as
        "nothing was changed"."""
        try:
            await transitions.announce(self.deps, record, done, change)
        except StoreUnavailable as exc:
            log.warning("%s: %s recorded, not all told: %s", record.id, change.transition.name, exc)

    def _settle_later(self, record: ChangeRequestRecord, change: Change) -> None:
        """Go on reading back in the background: once the store is back, what it took is
        told (and the prompt redrawn), an approval that completed the rule sent."""
        self.deps.tasks.spawn(self._told_once_back(record, change), f"read back {record.id}")

    async def _told_once_back(self, record: ChangeRequestRecord, change: Change) -> None:
        try:
            current = await read_back(self.deps.store, record.id, within=SETTLE_LATER_SECONDS)
        except ReadBackFailed as exc:
            log.warning("%s: the store never answered the read-back: %s", record.id, exc)
            return
        if current is None or not took(record, current, change):
            return
        await self.announce(record, current, change)
        if current.state is RequestState.APPROVED and change.transition in _COMPLETING:
            await self.execution.execute(current.id, actor=change.actor, record=current)
