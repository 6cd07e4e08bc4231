"""The on-call approvers' rows (SPEC §16): a request's approval prompt copied by DM to each
eligible on-call approver (claimed once per person across replicas, then its message
noted, so that a decision edits every copy), and each escalation to a further level
(claimed once across replicas)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bot.core.store.engine import StoreBase, Upsert, utcnow
from bot.core.store.tables import approval_copies, escalations


def _claims(table: Table) -> dict[str, Upsert]:
    """An insert that is a claim: a row only the first caller writes, across replicas."""
    keys = [c for c in table.primary_key.columns]
    return {
        name: dialect.insert(table).on_conflict_do_nothing(index_elements=keys).returning(keys[0])
        for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
    }


_CLAIM_COPY = _claims(approval_copies)
_CLAIM_ESCALATION = _claims(escalations)


@dataclass(frozen=True)
class ApprovalCopy:
    """A DM copy of a request's approval prompt: to whom, at which level, where it is."""

    request_id: str
    user_id: str
    level: int
    channel: str
    ts: str


class OnCallMixin(StoreBase):
    async def claim_approval_copy(self, request_id: str, user_id: str, level: int) -> bool:
        """True for the one caller (across replicas) that is to DM ``user_id`` the prompt."""
        row = {"request_id": request_id, "user_id": user_id, "level": level}
        async with self._begin() as conn:
            found = await conn.execute(_CLAIM_COPY[self._dialect], {**row, "claimed_at": utcnow()})
            return found.first() is not None

    async def note_approval_copy(
        self, request_id: str, user_id: str, channel: str, ts: str
    ) -> None:
        """Where the DM copy claimed for ``user_id`` was posted."""
        where = (approval_copies.c.request_id == request_id) & (
            approval_copies.c.user_id == user_id
        )
        async with self._begin() as conn:
            await conn.execute(update(approval_copies).where(where).values(channel=channel, ts=ts))

    async def approval_copies(self, request_id: str) -> list[ApprovalCopy]:
        """The DM copies of the request's prompt that were posted, in the order claimed."""
        statement = (
            select(approval_copies)
            .where(approval_copies.c.request_id == request_id, approval_copies.c.ts.is_not(None))
            .order_by(approval_copies.c.claimed_at, approval_copies.c.user_id)
        )
        async with self._begin() as conn:
            rows = (await conn.execute(statement)).mappings().all()
        return [
            ApprovalCopy(r["request_id"], r["user_id"], r["level"], r["channel"], r["ts"])
            for r in rows
        ]

    async def approval_copy_refs(self, request_id: str) -> list[tuple[str, str]]:
        """Where the request's prompt was copied: (channel, ts) of each DM copy."""
        return [(c.channel, c.ts) for c in await self.approval_copies(request_id)]

    async def claim_escalation(self, request_id: str, level: int) -> bool:
        """True for the one caller (across replicas) that escalates the request to ``level``."""
        row = {"request_id": request_id, "level": level, "claimed_at": utcnow()}
        async with self._begin() as conn:
            found = await conn.execute(_CLAIM_ESCALATION[self._dialect], row)
            return found.first() is not None

    async def escalated_levels(self, request_id: str) -> list[int]:
        statement = select(escalations.c.level).where(escalations.c.request_id == request_id)
        async with self._begin() as conn:
            return sorted(int(v) for v in (await conn.execute(statement)).scalars())
