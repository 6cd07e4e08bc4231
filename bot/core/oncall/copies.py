"""The approval card finds the on-call approvers (SPEC §16): besides the thread, the prompt
is sent by DM to each eligible on-call approver (claimed once per person across replicas,
its message kept so that every later edit of the prompt edits the copies too); after each
``escalate_after`` with no decision the next level is added, once across replicas: its
people are DMed and the thread says so."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol

from bot.core.guardrails.approvals import requirement_in_force
from bot.core.oncall.gate import OnCallGate, OnCallNow, level_now, on_call_words
from bot.core.policy import PolicyHolder
from bot.core.store import ChangeRequestRecord, RequestState, Store, StoreUnavailable

log = logging.getLogger(__name__)
ESCALATION_BATCH = 200  # pending requests looked at per sweep


class CopyPoster(Protocol):
    """Where the copies go (Slack: the bot's DM with each person)."""

    async def post_copy(self, record: ChangeRequestRecord, user: str) -> tuple[str, str] | None:
        """DM ``user`` the request's approval prompt; its (channel, ts), None when Slack
        would not take it."""
        ...

    async def thread_note(
        self, record: ChangeRequestRecord, text: str, mentions: Iterable[str]
    ) -> None:
        """A note in the request's thread (``<@id>`` of ``mentions`` stay mentions)."""
        ...


class OnCallCopies:
    """DMs the prompt to on-call approvers and escalates pending requests."""

    def __init__(
        self,
        store: Store,
        poster: CopyPoster,
        gate: OnCallGate,
        holder: PolicyHolder,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.poster = poster
        self.gate = gate
        self.holder = holder
        self.clock = clock

    async def send(
        self, record: ChangeRequestRecord, on_call: OnCallNow, *, level: int = 1
    ) -> list[str]:
        """DM each Slack user of ``on_call`` at ``level`` or below (never the requester)
        whom no replica has DMed yet; the users DMed."""
        sent: list[str] = []
        for member in on_call.eligible:
            user = member.slack_id
            if user is None or user == record.requester or member.level > level:
                continue
            if not await self.store.claim_approval_copy(record.id, user, member.level):
                continue
            posted = await self.poster.post_copy(record, user)
            if posted is None:
                continue
            await self.store.note_approval_copy(record.id, user, *posted)
            sent.append(user)
        return sent

    async def opened(self, record: ChangeRequestRecord) -> list[str]:
        """After the prompt is posted: DM the on-call approvers of the level reached."""
        requirement = requirement_in_force(self.holder.current, record.project, record.kinds)
        if not requirement.oncall:
            return []
        now = self.clock()
        on_call = await self.gate.now(requirement, opened_at=record.created_at, now=now)
        return await self.send(record, on_call, level=on_call.level)

    async def escalate_due(self) -> int:
        """Add the next level to each pending request whose ``escalate_after`` has passed
        with no decision: DM its people, say so in the thread. Each level once across
        replicas; the number of escalations made."""
        pending = await self.store.list_requests(
            states={RequestState.PENDING}, limit=ESCALATION_BATCH
        )
        made = 0
        for record in pending:
            try:
                made += await self._escalate(record)
            except StoreUnavailable:
                raise
            except Exception:
                log.exception("%s: escalation failed", record.id)
        return made

    async def _escalate(self, record: ChangeRequestRecord) -> int:
        requirement = requirement_in_force(self.holder.current, record.project, record.kinds)
        every = requirement.escalate_after_seconds
        if not requirement.oncall or every is None:
            return 0
        now = self.clock()
        reached = level_now(requirement, record.created_at, now)
        made = 0
        for level in range(2, reached + 1):
            if not await self.store.claim_escalation(record.id, level):
                continue
            on_call = await self.gate.now(requirement, opened_at=record.created_at, now=now)
            dmed = await self.send(record, on_call, level=level)
            waited = round((level - 1) * every / 60)
            if on_call.fault is not None:
                said = f"who is on call is not known ({on_call.fault})"
            else:
                said = f"on call now: {on_call_words(on_call)}"
            text = (
                f"No decision after {waited} min: level {level} may approve {record.id} now; "
                f"{said}."
                + (f" Sent by DM to {', '.join(f'<@{u}>' for u in dmed)}." if dmed else "")
            )
            await self.poster.thread_note(record, text, on_call.slack_ids)
            made += 1
        return made
